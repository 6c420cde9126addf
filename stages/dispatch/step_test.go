package dispatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/intent"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/policy"
)

const now = int64(1_764_424_800_000)

var fp = "sha256:" + strings.Repeat("ab", 32)

// envelope is an authorized envelope whose grant is valid at now.
func envelope(plan bool) *schema.Envelope {
	env := &schema.Envelope{
		Host: "frontdesk",
		Proposal: schema.Proposal{ProposalID: "p-1", Intent: schema.Intent{
			Provider: "demo", Capability: "inventory.adjust", Operation: "adjust_stock", Environment: schema.EnvTest,
		}},
		Grounded: &schema.Grounded{Referent: "sku-1", Fingerprint: fp, IdempotencyKey: fp[7:]},
		Authorization: &schema.AuthorizationRecord{Grant: schema.Grant{
			Schema: schema.SchemaGrant, IntentFingerprint: fp, AuthorizedBy: "actor:demo",
			AuthorizationMethod: schema.MethodManual, AuthenticationAssurance: schema.AssuranceBiometric,
			IssuedAtMs: now - 1000, ExpiresAtMs: now + 300_000,
		}},
	}
	if plan {
		env.Proposal.Intent.ProtectedDisclosure = &schema.DisclosurePlan{FieldClasses: []string{schema.ClassBirthDate}, Recipient: "r", Purpose: "p", Source: "user_profile"}
	}
	return env
}

func facts(mod func(f *Facts)) Facts {
	env := envelope(false)
	f := Facts{
		Env: env, Record: kv.NewIntent(kv.IdentityOf(env), "fake", now), Now: now,
		Provider: Provider{Name: "demo", UnavailableRetry: 30 * time.Second}, Adapter: "fake", Known: true,
	}
	if mod != nil {
		mod(&f)
	}
	if f.Dispatched && f.Lease == (Lease{}) {
		// As the shell: the call was made under this run's in-flight record.
		if f.Record.State != kv.StateInFlight && f.Record.Receipt == nil {
			f.Record.State, f.Record.InFlightBy, f.Record.InFlightUntilMs = kv.StateInFlight, f.Self, now+35_000
			f.Record.DispatchAttempts++
		}
		f.Lease = LeaseOf(f.Record)
	}
	return f
}

var rules = Rules{
	Policy:            policy.Rules{ClockSkew: 30 * time.Second, MaxGrantLifetime: 24 * time.Hour},
	ReconcileInterval: 5 * time.Second,
	PollSubject:       func(hex string) string { return "poll." + hex },
}

// settled is a record of fp with a receipt of status.
func settled(status schema.Status) kv.Intent {
	r := kv.NewIntent(kv.IdentityOf(envelope(false)), "fake", now-10)
	r.AddProposal(schema.ProposalRef{Host: "frontdesk", ProposalID: "p-0"})
	intent.Settle(&r, kv.Verdict{Status: status, NextAction: schema.NextNone, Attempted: true}, "dispatch", nil, nil, now-10)
	return r
}

func TestStep(t *testing.T) {
	type want struct {
		call      Call
		record    kv.IntentState // state written ("" none written)
		receipt   schema.Status  // receipt written ("" none)
		ended     schema.Code    // proposal end written
		kind      schema.Kind    // outcome kind ("" no outcome)
		code      schema.Code    // outcome's first incident
		timer     bool           // a poll scheduled
		indet     int
		retry     bool
		proposals int // proposals on the written record
	}
	notInvoked := fmt.Errorf("adapters: demo dispatch: %w", adapters.ErrNotInvoked)
	cases := []struct {
		name string
		f    Facts
		want want
	}{
		{"ended before: the same answer", facts(func(f *Facts) {
			f.Ended = &kv.Ended{Phase: schema.PhaseAuthorization, Code: schema.CodeGrantExpired, AtMs: now - 5}
		}), want{kind: schema.KindDenied, code: schema.CodeGrantExpired}},
		{"1: a receipt is the answer", facts(func(f *Facts) { f.Record, f.Found = settled(schema.StatusConfirmed), true }),
			want{record: kv.StateDone, kind: schema.KindConfirmed, proposals: 2}},
		{"2: in flight without a receipt", facts(func(f *Facts) { f.Record.State, f.Found = kv.StateInFlight, true }),
			want{record: kv.StateDone, receipt: schema.StatusReconciliationRequired, kind: schema.KindReconciliationRequired,
				code: schema.CodeDispatchInterrupted, timer: true, indet: 1, proposals: 1}},
		{"3: grant expired at the re-check", facts(func(f *Facts) { f.Now = now + 300_000 }),
			want{ended: schema.CodeGrantExpired, kind: schema.KindDenied, code: schema.CodeGrantExpired}},
		{"3: grant window within clock skew", facts(func(f *Facts) { f.Env.Authorization.Grant.IssuedAtMs = now + 20_000 }),
			want{call: CallProvider, record: kv.StateInFlight, proposals: 1}},
		{"3: an unknown provider is not called", facts(func(f *Facts) { f.Known = false }),
			want{record: kv.StateDone, receipt: schema.StatusFailedBeforeDispatch, kind: schema.KindFailedBeforeDispatch, code: schema.CodeAdapterUnavailable, proposals: 1}},
		{"3: disclosure first", facts(func(f *Facts) { f.Env = envelope(true) }), want{call: CallDisclosure}},
		{"3: disclosure refused", facts(func(f *Facts) { f.Env, f.DisclosureCode = envelope(true), schema.CodeDisclosureRefused }),
			want{ended: schema.CodeDisclosureRefused, kind: schema.KindDenied, code: schema.CodeDisclosureRefused}},
		{"4: in flight, then the call", facts(func(f *Facts) {
			f.Env, f.Disclosed = envelope(true), &schema.DisclosureRecord{Recipient: "r"}
		}), want{call: CallProvider, record: kv.StateInFlight, proposals: 1}},
		{"4: the in-flight write failed", facts(func(f *Facts) { f.CheckpointErr = errors.New("disk") }),
			want{kind: schema.KindIntegrationFailure, code: schema.CodeCheckpointFailed}},
		{"5: confirmed", facts(func(f *Facts) { f.Dispatched, f.Reply = true, schema.AdapterReply{Outcome: "confirmed"} }),
			want{record: kv.StateDone, receipt: schema.StatusConfirmed, kind: schema.KindConfirmed, proposals: 1}},
		{"5: acknowledged, verified later", facts(func(f *Facts) { f.Dispatched, f.Reply = true, schema.AdapterReply{Outcome: "acknowledged"} }),
			want{record: kv.StateDone, receipt: schema.StatusAcknowledged, kind: schema.KindAcknowledged, timer: true, proposals: 1}},
		{"5: a timeout is indeterminate", facts(func(f *Facts) { f.Dispatched, f.CallErr = true, adapters.ErrTimeout }),
			want{record: kv.StateDone, receipt: schema.StatusReconciliationRequired, kind: schema.KindReconciliationRequired,
				code: schema.CodeAdapterTimeout, timer: true, indet: 1, proposals: 1}},
		{"nobody received it: retry in the window", facts(func(f *Facts) { f.Dispatched, f.CallErr = true, notInvoked }),
			want{record: kv.StateNotInvoked, retry: true, proposals: 1}},
		{"nobody received it for the whole window", facts(func(f *Facts) {
			f.Dispatched, f.CallErr = true, notInvoked
			f.Record.State, f.Record.NotInvokedSinceMs, f.Found = kv.StateNotInvoked, now-30_000, true
		}), want{record: kv.StateDone, receipt: schema.StatusFailedBeforeDispatch, kind: schema.KindFailedBeforeDispatch, code: schema.CodeAdapterUnavailable, proposals: 1}},
		{"refused as late: retry in the window, with a new lease", facts(func(f *Facts) { f.Dispatched, f.Reply = true, schema.LateReply() }),
			want{record: kv.StateNotInvoked, retry: true, proposals: 1}},
		{"refused as late for the whole window", facts(func(f *Facts) {
			f.Dispatched, f.Reply = true, schema.LateReply()
			f.Record.State, f.Record.NotInvokedSinceMs, f.Found = kv.StateNotInvoked, now-30_000, true
		}), want{record: kv.StateDone, receipt: schema.StatusFailedBeforeDispatch, kind: schema.KindFailedBeforeDispatch, code: schema.CodeProviderFailedBeforeDispatch, proposals: 1}},
		// A reply of an older lease, reloaded over the record another
		// processor wrote since (it found that lease ended; the intent may
		// be in flight again): nothing of this call is recorded — marking
		// the other dispatch not-invoked would send the intent twice
		// (internal/sim, finding 1).
		{"refused as late, while another processor's lease runs: wait, write nothing", facts(func(f *Facts) {
			f.Dispatched, f.Reply, f.Self = true, schema.LateReply(), "p_me"
			f.Lease = Lease{By: "p_me", UntilMs: now - 1, Attempts: 1}
			f.Record.State, f.Found, f.Record.DispatchAttempts = kv.StateInFlight, true, 2
			f.Record.InFlightBy, f.Record.InFlightUntilMs = "p_other", now+10_000
		}), want{retry: true}},
		{"nobody received it, and the record was reopened since: wait, write nothing", facts(func(f *Facts) {
			f.Dispatched, f.CallErr, f.Self = true, notInvoked, "p_me"
			f.Lease = Lease{By: "p_me", UntilMs: now - 1, Attempts: 1}
			f.Record.State, f.Found, f.Record.DispatchAttempts = kv.StateLost, true, 1
		}), want{retry: true}},
		{"not invoked again: a new in-flight record", facts(func(f *Facts) {
			f.Record.State, f.Record.NotInvokedSinceMs, f.Found = kv.StateNotInvoked, now-1000, true
		}), want{call: CallProvider, record: kv.StateInFlight, proposals: 1}},
		{"failed before dispatch with another code is the provider's answer", facts(func(f *Facts) {
			f.Dispatched, f.Reply = true, schema.AdapterReply{Outcome: "failed_before_dispatch", ErrorCode: "card_blocked"}
		}), want{record: kv.StateDone, receipt: schema.StatusFailedBeforeDispatch, kind: schema.KindFailedBeforeDispatch, code: schema.CodeProviderFailedBeforeDispatch, proposals: 1}},
		{"a proposal answered from its intent, which has its receipt", facts(func(f *Facts) {
			f.Env.Authorization = &schema.AuthorizationRecord{Bound: true}
			f.Record, f.Found = settled(schema.StatusConfirmed), true
		}), want{record: kv.StateDone, kind: schema.KindConfirmed, proposals: 2}},
		{"a proposal answered from its intent, which is no longer bound: never dispatched", facts(func(f *Facts) {
			f.Env.Authorization = &schema.AuthorizationRecord{Bound: true}
		}), want{ended: schema.CodeProcessingFailed, kind: schema.KindIntegrationFailure, code: schema.CodeProcessingFailed}},
		{"giving up before anything was written: the end is recorded on the intent first", facts(func(f *Facts) { f.GivingUp = true }),
			want{ended: schema.CodeProcessingFailed, kind: schema.KindIntegrationFailure, code: schema.CodeProcessingFailed}},
		{"a proposal another processor ended on the intent gets that end, never a dispatch", facts(func(f *Facts) {
			f.Record.End(kv.EndedProposal{Ref: f.Env.Ref(), Ended: kv.Ended{Phase: schema.PhaseDispatch, Code: schema.CodeProcessingFailed, AtMs: now - 5}})
			f.Found = true
		}), want{kind: schema.KindIntegrationFailure, code: schema.CodeProcessingFailed}},
		{"a proposal ended after a not-invoked attempt leaves the intent's proposals", facts(func(f *Facts) {
			f.Record.State, f.Record.NotInvokedSinceMs, f.Found = kv.StateNotInvoked, now-1, true
			f.Record.AddProposal(schema.ProposalRef{Host: "frontdesk", ProposalID: "p-0"})
			f.Record.AddProposal(f.Env.Ref())
			f.Env.Authorization.Grant.ExpiresAtMs = now - 1
		}), want{record: kv.StateNotInvoked, ended: schema.CodeGrantExpired, kind: schema.KindDenied, code: schema.CodeGrantExpired, proposals: 1}},
		{"giving up while not invoked", facts(func(f *Facts) {
			f.GivingUp, f.Record.State, f.Record.NotInvokedSinceMs, f.Found = true, kv.StateNotInvoked, now-1, true
		}), want{record: kv.StateDone, receipt: schema.StatusFailedBeforeDispatch, kind: schema.KindFailedBeforeDispatch, code: schema.CodeAdapterUnavailable, proposals: 1}},
		{"giving up in flight", facts(func(f *Facts) { f.GivingUp, f.Record.State, f.Found = true, kv.StateInFlight, true }),
			want{record: kv.StateDone, receipt: schema.StatusReconciliationRequired, kind: schema.KindReconciliationRequired, code: schema.CodeDispatchInterrupted, timer: true, indet: 1, proposals: 1}},

		// More than one processor (SPEC §6).
		{"1: a receipt, the proposal on it already: nothing to write", facts(func(f *Facts) {
			f.Record, f.Found = settled(schema.StatusConfirmed), true
			f.Record.AddProposal(f.Env.Ref())
		}), want{kind: schema.KindConfirmed}},
		{"2: in flight at another processor, its lease running: wait, write nothing", facts(func(f *Facts) {
			f.Record.State, f.Found, f.Self = kv.StateInFlight, true, "p_me"
			f.Record.InFlightBy, f.Record.InFlightUntilMs = "p_other", now+10_000
		}), want{retry: true}},
		{"2: in flight at another processor, at the last moment of its lease: wait", facts(func(f *Facts) {
			f.Record.State, f.Found, f.Self = kv.StateInFlight, true, "p_me"
			f.Record.InFlightBy, f.Record.InFlightUntilMs = "p_other", now
		}), want{retry: true}},
		{"2: in flight at another processor, its lease ended", facts(func(f *Facts) {
			f.Record.State, f.Found, f.Self = kv.StateInFlight, true, "p_me"
			f.Record.InFlightBy, f.Record.InFlightUntilMs = "p_other", now-1
		}), want{record: kv.StateDone, receipt: schema.StatusReconciliationRequired, kind: schema.KindReconciliationRequired,
			code: schema.CodeDispatchInterrupted, timer: true, indet: 1, proposals: 1}},
		{"2: in flight by this processor before a restart, its lease running", facts(func(f *Facts) {
			f.Record.State, f.Found, f.Self = kv.StateInFlight, true, "p_me"
			f.Record.InFlightBy, f.Record.InFlightUntilMs = "p_me", now+10_000
		}), want{record: kv.StateDone, receipt: schema.StatusReconciliationRequired, kind: schema.KindReconciliationRequired,
			code: schema.CodeDispatchInterrupted, timer: true, indet: 1, proposals: 1}},
		{"2: giving up during another processor's lease", facts(func(f *Facts) {
			f.Record.State, f.Found, f.Self, f.GivingUp = kv.StateInFlight, true, "p_me", true
			f.Record.InFlightBy, f.Record.InFlightUntilMs = "p_other", now+10_000
		}), want{record: kv.StateDone, receipt: schema.StatusReconciliationRequired, kind: schema.KindReconciliationRequired,
			code: schema.CodeDispatchInterrupted, timer: true, indet: 1, proposals: 1}},
		{"5: the reply came after another processor recorded the intent: its receipt stands", facts(func(f *Facts) {
			f.Record, f.Found = settled(schema.StatusReconciliationRequired), true
			f.Dispatched, f.Reply = true, schema.AdapterReply{Outcome: "confirmed"}
		}), want{record: kv.StateDone, kind: schema.KindReconciliationRequired, proposals: 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Step(tc.f, rules)
			w, got := d.Writes, want{call: d.Call, indet: d.Writes.Indeterminate, timer: d.Writes.Timer != nil, retry: d.Retry > 0}
			if w.Record != nil {
				got.record, got.proposals = w.Record.State, len(w.Record.Proposals)
			}
			if w.Receipt != nil {
				got.receipt = w.Receipt.Status
			}
			if w.Ended != nil {
				got.ended = w.Ended.Ended.Code
			}
			if d.Outcome != nil {
				got.kind = d.Outcome.Kind
				if len(d.Outcome.Incidents) > 0 {
					got.code = d.Outcome.Incidents[0].Code
				}
			}
			if got != tc.want {
				t.Fatalf("decision %+v\n     want %+v", got, tc.want)
			}
			// Invariants: a call comes with its writes and nothing to
			// publish; an in-flight write always precedes the provider call.
			if d.Call != NoCall && (d.Outcome != nil || d.Retry > 0) {
				t.Error("a call with something to publish")
			}
			if d.Call == CallProvider && (w.Record == nil || w.Record.State != kv.StateInFlight) {
				t.Error("the provider call without its in-flight record")
			}
			if d.Outcome != nil && d.Outcome.Fingerprint == nil && tc.want.kind != "" {
				t.Errorf("outcome without its fingerprint: %+v", d.Outcome)
			}
			if tc.want.timer && w.Timer.Subject != "poll."+kv.Hex(fp) {
				t.Errorf("poll on %s", w.Timer.Subject)
			}
		})
	}
}

// The in-flight record names its writer and its lease: the provider's
// timeout and the margin from the moment it is written. The lease's end is
// the request's not_after_ms: another processor may declare the dispatch
// interrupted only after it — at not_after_ms a connector may still act.
func TestInFlightLease(t *testing.T) {
	f := facts(func(f *Facts) { f.Self, f.Provider.Timeout = "p_me", 10*time.Second })
	d := Step(f, rules)
	if d.Call != CallProvider || d.Writes.Record.InFlightBy != "p_me" || d.Writes.Record.InFlightUntilMs != now+15_000 {
		t.Fatalf("in-flight record %+v", d.Writes.Record)
	}
	r := rules
	r.LeaseMargin = time.Second
	if d := Step(f, r); d.Writes.Record.InFlightUntilMs != now+11_000 {
		t.Errorf("lease with a 1s margin ends at %d", d.Writes.Record.InFlightUntilMs-now)
	}
	// Waiting for another's lease: a quarter of the rest, at least 250ms,
	// at most 5s, never past its end.
	rec := d.Writes.Record
	for _, c := range []struct {
		left, want time.Duration
	}{{time.Minute, 5 * time.Second}, {8 * time.Second, 2 * time.Second}, {time.Second, 250 * time.Millisecond}, {100 * time.Millisecond, 101 * time.Millisecond},
		{0, time.Millisecond}, {-time.Millisecond, 0}} {
		if got := LeaseWait(*rec, "p_other", rec.InFlightUntilMs-c.left.Milliseconds()); got != c.want {
			t.Errorf("%s before the lease ends: wait %s, want %s", c.left, got, c.want)
		}
	}
	if got := LeaseWait(*rec, "p_me", now); got != 0 {
		t.Errorf("the writer waits for its own lease: %s", got)
	}
	if got := LeaseWait(kv.Intent{State: kv.StateInFlight}, "p_me", now); got != 0 {
		t.Errorf("a record without a writer waits: %s", got)
	}
}

// A retry of a provider nobody answered never outlasts the window, and a
// long window takes a bounded number of retries.
func TestNotInvokedRetryFitsTheWindow(t *testing.T) {
	for _, window := range []time.Duration{time.Second, 30 * time.Second, time.Hour} {
		f := facts(func(f *Facts) {
			f.Dispatched, f.CallErr = true, adapters.ErrNotInvoked
			f.Provider.UnavailableRetry = window
		})
		tries, elapsed := 0, time.Duration(0)
		for {
			d := Step(f, rules)
			if d.Retry == 0 {
				break
			}
			tries++
			elapsed += d.Retry
			f.Now = now + elapsed.Milliseconds()
			// The next delivery's in-flight record, and its call.
			f.Record = *d.Writes.Record
			f.Record.State, f.Record.InFlightUntilMs = kv.StateInFlight, f.Now+35_000
			f.Record.DispatchAttempts++
			f.Lease = LeaseOf(f.Record)
		}
		if tries == 0 || tries > 40 || elapsed > window+time.Millisecond {
			t.Errorf("window %s: %d retries over %s", window, tries, elapsed)
		}
	}
}

func TestMapDispatch(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("adapters: demo dispatch: %w", err) }
	cases := []struct {
		name      string
		reply     schema.AdapterReply
		err       error
		status    schema.Status
		next      schema.NextAction
		attempted bool
		kind      schema.Kind
		code      schema.Code // "" no incident
		boundary  schema.Boundary
		errorCode string
	}{
		{"confirmed", schema.AdapterReply{Outcome: "confirmed", ProviderActionID: "a:1"}, nil, schema.StatusConfirmed, schema.NextNone, true, schema.KindConfirmed, "", "", ""},
		{"acknowledged", schema.AdapterReply{Outcome: "acknowledged"}, nil, schema.StatusAcknowledged, schema.NextVerify, true, schema.KindAcknowledged, "", "", ""},
		{"rejected", schema.AdapterReply{Outcome: "rejected", ErrorCode: "card_declined"}, nil, schema.StatusRejected, schema.NextNone, true, schema.KindRejected, schema.CodeProviderRejected, schema.BoundaryInvoked, "card_declined"},
		{"rejected without code", schema.AdapterReply{Outcome: "rejected"}, nil, schema.StatusRejected, schema.NextNone, true, schema.KindRejected, schema.CodeProviderRejected, schema.BoundaryInvoked, string(schema.CodeProviderRejected)},
		{"failed before dispatch", schema.AdapterReply{Outcome: "failed_before_dispatch"}, nil, schema.StatusFailedBeforeDispatch, schema.NextNone, false, schema.KindFailedBeforeDispatch, schema.CodeProviderFailedBeforeDispatch, schema.BoundaryNotInvoked, string(schema.CodeProviderFailedBeforeDispatch)},
		{"indeterminate", schema.AdapterReply{Outcome: "indeterminate"}, nil, schema.StatusReconciliationRequired, schema.NextReconcile, true, schema.KindReconciliationRequired, schema.CodeProviderIndeterminate, schema.BoundaryInvoked, string(schema.CodeProviderIndeterminate)},
		{"refused as late", schema.LateReply(), nil, schema.StatusFailedBeforeDispatch, schema.NextNone, false, schema.KindFailedBeforeDispatch, schema.CodeProviderFailedBeforeDispatch, schema.BoundaryNotInvoked, schema.ErrorCodeNotAfterPassed},
		{"no responders", schema.AdapterReply{}, wrap(adapters.ErrNotInvoked), schema.StatusFailedBeforeDispatch, schema.NextNone, false, schema.KindFailedBeforeDispatch, schema.CodeAdapterUnavailable, schema.BoundaryNotInvoked, string(schema.CodeAdapterUnavailable)},
		{"timeout", schema.AdapterReply{}, wrap(adapters.ErrTimeout), schema.StatusReconciliationRequired, schema.NextReconcile, true, schema.KindReconciliationRequired, schema.CodeAdapterTimeout, schema.BoundaryUnknown, string(schema.CodeAdapterTimeout)},
		{"malformed", schema.AdapterReply{}, wrap(adapters.ErrMalformedReply), schema.StatusReconciliationRequired, schema.NextReconcile, true, schema.KindReconciliationRequired, schema.CodeMalformedAdapterResult, schema.BoundaryInvoked, string(schema.CodeMalformedAdapterResult)},
		{"unknown error", schema.AdapterReply{}, errors.New("connection reset"), schema.StatusReconciliationRequired, schema.NextReconcile, true, schema.KindReconciliationRequired, schema.CodeAdapterError, schema.BoundaryUnknown, string(schema.CodeAdapterError)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := MapDispatch(tc.reply, tc.err)
			if v.Status != tc.status || v.NextAction != tc.next || v.Attempted != tc.attempted || v.ErrorCode != tc.errorCode {
				t.Errorf("verdict = %+v", v)
			}
			rec := kv.NewIntent(kv.Identity{Fingerprint: fp, Target: schema.Target{Provider: "demo", Referent: "svc:1"}}, "fake", 10)
			r := intent.Settle(&rec, v, "dispatch", nil, nil, 10)
			o := intent.Outcome(rec, schema.ProposalRef{Host: "h", ProposalID: "p-1"}, 11)
			if o.Kind != tc.kind || o.EffectTruth != tc.kind.EffectTruth() || o.Terminal != tc.kind.Terminal() {
				t.Errorf("outcome = %+v", o)
			}
			if tc.code == "" {
				if len(o.Incidents) != 0 {
					t.Errorf("incidents = %+v", o.Incidents)
				}
			} else if len(o.Incidents) != 1 || o.Incidents[0].Code != tc.code || o.Incidents[0].DispatchBoundary != tc.boundary || o.Incidents[0].Phase != schema.PhaseDispatch {
				t.Errorf("incidents = %+v", o.Incidents)
			}
			if *o.Fingerprint != fp || *o.Referent != "svc:1" || o.Receipt == nil || o.Receipt.ReceiptID != r.ReceiptID {
				t.Errorf("outcome binding = %+v", o)
			}
			if kv.IndeterminateReceipt(&r) != (tc.status == schema.StatusReconciliationRequired) {
				t.Error("indeterminate")
			}
		})
	}
}

func TestPhaseOfAndInterrupted(t *testing.T) {
	if PhaseOf(schema.CodeGrantExpired) != schema.PhaseAuthorization || PhaseOf(schema.CodeDisclosureRefused) != schema.PhaseDisclosure {
		t.Error("phases of re-check codes")
	}
	v := Interrupted()
	if v.Status != schema.StatusReconciliationRequired || !v.Attempted || v.Incidents[0].DispatchBoundary != schema.BoundaryUnknown {
		t.Errorf("interrupted = %+v", v)
	}
}

// The envelope is kept (Decision.Hold) whenever the latest receipt leaves
// the effect unknown for want of an answer — when that receipt is written,
// and again on every later delivery of a proposal of the intent: a crash
// between the receipt's commit and keeping the envelope would otherwise
// leave reconciliation nothing to send again, and a request lost in flight
// would end its proposal FAILED_BEFORE_DISPATCH (seen once in the cluster
// soak).
func TestStepKeepsTheEnvelope(t *testing.T) {
	unknown := func(code schema.Code, redispatches int) kv.Intent {
		r := settled(schema.StatusReconciliationRequired)
		r.DispatchCode, r.Redispatches = code, redispatches
		return r
	}
	ref := envelope(false).Proposal.ProposalID
	fp := envelope(false).Grounded.Fingerprint
	cases := []struct {
		name string
		f    Facts
		hold string
	}{
		{"a timeout's receipt", facts(func(f *Facts) { f.Dispatched, f.CallErr = true, adapters.ErrTimeout }), HeldID(fp, ref, 0)},
		{"an interrupted dispatch's receipt", facts(func(f *Facts) { f.Record.State, f.Found = kv.StateInFlight, true }), HeldID(fp, ref, 0)},
		{"a confirmed receipt", facts(func(f *Facts) { f.Dispatched, f.Reply = true, schema.AdapterReply{Outcome: "confirmed"} }), ""},
		{"an indeterminate answer: the provider did receive it", facts(func(f *Facts) {
			f.Dispatched, f.Reply = true, schema.AdapterReply{Outcome: "indeterminate"}
		}), ""},
		{"redelivered after a timeout's receipt: kept again", facts(func(f *Facts) {
			f.Record, f.Found = unknown(schema.CodeAdapterTimeout, 0), true
		}), HeldID(fp, ref, 0)},
		{"redelivered after an interruption's receipt, sent again twice: kept again", facts(func(f *Facts) {
			f.Record, f.Found = unknown(schema.CodeDispatchInterrupted, 2), true
		}), HeldID(fp, ref, 2)},
		// A proposal answered from its intent carries no grant: sent again
		// it would end at the re-check, so it never replaces the kept one.
		{"a bound proposal finding a timeout's receipt", facts(func(f *Facts) {
			f.Env.Authorization = &schema.AuthorizationRecord{Bound: true}
			f.Record, f.Found = unknown(schema.CodeAdapterTimeout, 0), true
		}), ""},
		{"a bound proposal declaring the dispatch interrupted", facts(func(f *Facts) {
			f.Env.Authorization = &schema.AuthorizationRecord{Bound: true}
			f.Record.State, f.Found = kv.StateInFlight, true
		}), ""},
		{"redelivered, sent again too often", facts(func(f *Facts) {
			f.Record, f.Found = unknown(schema.CodeAdapterTimeout, kv.MaxRedispatches), true
		}), ""},
		{"redelivered after a settled receipt", facts(func(f *Facts) {
			f.Record, f.Found = unknown(schema.CodeAdapterTimeout, 0), true
			intent.Settle(&f.Record, kv.Verdict{Status: schema.StatusConfirmed, NextAction: schema.NextNone, Attempted: true}, "reconcile/a", nil, nil, now-5)
		}), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if d := Step(c.f, rules); d.Hold != c.hold {
				t.Fatalf("hold %q, want %q (decision %+v)", d.Hold, c.hold, d)
			}
		})
	}
}

// A redispatch's receipt is told to every proposal of the intent; a
// delivery that finds it — the redispatch's input again, after a crash
// between the receipt's commit and those outcomes — tells them again
// (internal/sim finding 7: seed 792 left two proposals without an end).
// A first dispatch's receipt is each proposal's own to hear.
func TestStepRedispatchReceiptTellsEveryProposal(t *testing.T) {
	for _, c := range []struct {
		name         string
		redispatches int
		others       int
	}{{"after a redispatch", 1, 1}, {"first dispatch", 0, 0}} {
		t.Run(c.name, func(t *testing.T) {
			f := facts(func(f *Facts) {
				f.Record, f.Found = settled(schema.StatusConfirmed), true
				f.Record.Redispatches = c.redispatches
			})
			d := Step(f, rules)
			if len(d.Others) != c.others {
				t.Fatalf("%d other outcomes, want %d: %+v", len(d.Others), c.others, d.Others)
			}
			for _, o := range d.Others {
				if o.ProposalID != "p-0" || o.Kind != schema.KindConfirmed {
					t.Errorf("other outcome %+v", o)
				}
			}
		})
	}
}

// A held envelope sent again after the intent's request was found lost in
// flight, and denied at the re-check (its grant expired meanwhile, or
// disclosure refused), concludes the intent FAILED_BEFORE_DISPATCH for
// every proposal: nothing reached the provider and nothing will be sent.
// Ending only its own proposal left the intent lost and the others at
// RECONCILIATION_REQUIRED for good (internal/sim, BugRedispatchEndsOne:
// seed 230). Any other input of the lost intent is judged for itself.
func TestStepDeniedRedispatch(t *testing.T) {
	reopened := func(redispatches int) kv.Intent {
		r := settled(schema.StatusReconciliationRequired) // with proposal p-0
		r.DispatchCode = schema.CodeAdapterTimeout
		for range redispatches {
			intent.MarkLost(&r, now-5)
		}
		return r
	}
	expired := func(f *Facts) {
		f.Env.Authorization.Grant.IssuedAtMs, f.Env.Authorization.Grant.ExpiresAtMs = now-2*time.Minute.Milliseconds(), now-time.Minute.Milliseconds()
	}
	for _, c := range []struct {
		name     string
		f        Facts
		intent   bool        // the intent concluded (a receipt for all)
		code     schema.Code // the denial: an event when the intent concluded, else the outcome's
		provider bool        // the provider is called instead
	}{
		{"the awaited redispatch, its grant expired", facts(func(f *Facts) {
			f.Record, f.Found, f.Redispatch = reopened(1), true, 1
			expired(f)
		}), true, schema.CodeGrantExpired, false},
		{"the awaited redispatch, disclosure refused", facts(func(f *Facts) {
			f.Env, f.DisclosureCode = envelope(true), schema.CodeDisclosureRefused
			f.Record, f.Found, f.Redispatch = reopened(1), true, 1
		}), true, schema.CodeDisclosureRefused, false},
		{"the awaited redispatch, given up", facts(func(f *Facts) {
			f.Record, f.Found, f.Redispatch, f.GivingUp = reopened(1), true, 1, true
		}), true, schema.CodeProcessingFailed, false},
		{"the awaited redispatch, its proposal ended since at the re-check", facts(func(f *Facts) {
			f.Record, f.Found, f.Redispatch = reopened(1), true, 1
			e := kv.EndedProposal{Ref: f.Env.Ref(), Ended: kv.Ended{Phase: schema.PhaseAuthorization, Code: schema.CodeGrantExpired, AtMs: now - 10}}
			f.Record.End(e)
			f.Ended = &e.Ended
		}), true, schema.CodeGrantExpired, false},
		{"the awaited redispatch, after an attempt that reached nobody, its grant expired", facts(func(f *Facts) {
			f.Record, f.Found, f.Redispatch = reopened(1), true, 1
			f.Record.State, f.Record.NotInvokedSinceMs = kv.StateNotInvoked, now-1000
			expired(f)
		}), true, schema.CodeGrantExpired, false},
		{"another proposal of the lost intent, given up", facts(func(f *Facts) {
			f.Record, f.Found, f.GivingUp = reopened(1), true, true
		}), false, schema.CodeProcessingFailed, false},
		{"the awaited redispatch, its grant valid: sent again", facts(func(f *Facts) {
			f.Record, f.Found, f.Redispatch = reopened(1), true, 1
		}), false, "", true},
		{"another proposal of the lost intent, its grant expired", facts(func(f *Facts) {
			f.Record, f.Found = reopened(1), true
			expired(f)
		}), false, schema.CodeGrantExpired, false},
		{"an earlier reopening's hand-off", facts(func(f *Facts) {
			f.Record, f.Found, f.Redispatch = reopened(2), true, 1
			expired(f)
		}), false, schema.CodeGrantExpired, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Step(c.f, rules)
			switch {
			case c.provider:
				if d.Call != CallProvider {
					t.Fatalf("decision %+v, want the provider called", d)
				}
			case c.intent:
				rc := d.Writes.Receipt
				if rc == nil || rc.Status != schema.StatusFailedBeforeDispatch || rc.DispatchAttempted || d.Writes.Ended != nil {
					t.Fatalf("receipt %+v, ended %+v: want the intent concluded FAILED_BEFORE_DISPATCH", rc, d.Writes.Ended)
				}
				switch {
				case c.f.Ended != nil:
					// It keeps the end it was told.
					if d.Outcome == nil || d.Outcome.Kind != schema.KindDenied || d.Outcome.Incidents[0].Code != c.f.Ended.Code {
						t.Fatalf("outcome %+v, want its end again", d.Outcome)
					}
				case d.Outcome == nil || d.Outcome.Kind != schema.KindFailedBeforeDispatch || !d.Outcome.Terminal ||
					d.Outcome.Incidents[0].Code != schema.CodeProviderFailedBeforeDispatch:
					t.Fatalf("outcome %+v", d.Outcome)
				}
				if len(d.Others) != 1 || d.Others[0].ProposalID != "p-0" || d.Others[0].Kind != schema.KindFailedBeforeDispatch || !d.Others[0].Terminal {
					t.Fatalf("the other proposal's outcome: %+v", d.Others)
				}
				if len(d.Events) != 1 || d.Events[0].Code != c.code {
					t.Fatalf("events %+v, want the denial %s", d.Events, c.code)
				}
				if d.Hold != "" {
					t.Fatalf("held again as %q", d.Hold)
				}
			default:
				if d.Writes.Receipt != nil || d.Writes.Ended == nil || len(d.Others) != 0 {
					t.Fatalf("writes %+v, others %+v: want only this proposal ended", d.Writes, d.Others)
				}
				if d.Outcome == nil || d.Outcome.Incidents[0].Code != c.code {
					t.Fatalf("outcome %+v, want %s", d.Outcome, c.code)
				}
			}
		})
	}
}

// The shell recognizes reconciliation's redispatch by its message id: the
// processor's MsgID of kv.RedispatchID for the record's latest reopening,
// nothing else (an unsealed id, an earlier reopening's, none).
func TestRedispatchOf(t *testing.T) {
	mac := func(id string) string { return "mac(" + id + ")" }
	rec := settled(schema.StatusReconciliationRequired)
	intent.MarkLost(&rec, now)
	intent.MarkLost(&rec, now)
	for _, c := range []struct {
		name  string
		msgID string
		macOf func(string) string
		want  int
	}{
		{"the latest reopening's", mac(kv.RedispatchID(fp, 2)), mac, 2},
		{"an earlier reopening's", mac(kv.RedispatchID(fp, 1)), mac, 0},
		{"another intent's", mac(kv.RedispatchID("sha256:"+strings.Repeat("cd", 32), 2)), mac, 0},
		{"not under the processor's MsgID", kv.RedispatchID(fp, 2), mac, 0},
		{"no message id", "", mac, 0},
		{"no MsgID configured", mac(kv.RedispatchID(fp, 2)), nil, 0},
	} {
		s := &Stage{MsgID: c.macOf}
		if got := s.redispatchOf(c.msgID, rec); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// An outcome says recorded_earlier exactly when its receipt came from the
// dispatch of another proposal of the intent (SPEC §2.4): the proposal
// that dispatched hears its own receipt without it, every later proposal
// with it; one whose earlier attempt reached nobody (not invoked) and was
// then dispatched for another proposal leaves the effect to that other one.
func TestStepRecordedEarlier(t *testing.T) {
	first := facts(nil)
	d := Step(first, rules)
	if d.Call != CallProvider || d.Writes.Record == nil {
		t.Fatalf("first proposal: %+v", d)
	}
	rec := *d.Writes.Record
	reply := facts(func(f *Facts) {
		f.Record, f.Found, f.Dispatched, f.Reply = rec, true, true, schema.AdapterReply{Outcome: "confirmed"}
		f.Lease = LeaseOf(rec)
	})
	d = Step(reply, rules)
	if d.Outcome == nil || d.Outcome.Kind != schema.KindConfirmed || d.Outcome.RecordedEarlier {
		t.Fatalf("the dispatching proposal's own outcome: %+v, want CONFIRMED without recorded_earlier", d.Outcome)
	}
	rec = *d.Writes.Record
	repeat := facts(func(f *Facts) {
		f.Record, f.Found = rec, true
		f.Env.Proposal.ProposalID = "p-2"
	})
	d = Step(repeat, rules)
	if d.Outcome == nil || d.Outcome.Kind != schema.KindConfirmed || !d.Outcome.RecordedEarlier {
		t.Fatalf("a repeat of the intent: %+v, want CONFIRMED with recorded_earlier", d.Outcome)
	}
	// The dispatching proposal redelivered: still its own.
	d = Step(facts(func(f *Facts) { f.Record, f.Found = rec, true }), rules)
	if d.Outcome == nil || d.Outcome.RecordedEarlier {
		t.Fatalf("the dispatching proposal redelivered: %+v", d.Outcome)
	}
	data, err := json.Marshal(d.Outcome)
	if err != nil || strings.Contains(string(data), "recorded_earlier") {
		t.Fatalf("absent, not false, on the wire: %s (%v)", data, err)
	}

	// p-1's attempt reached nobody; p-2 dispatches it: p-2's effect.
	notInv := *Step(first, rules).Writes.Record
	notInv.State, notInv.NotInvokedSinceMs = kv.StateNotInvoked, now
	second := facts(func(f *Facts) {
		f.Record, f.Found = notInv, true
		f.Env.Proposal.ProposalID = "p-2"
	})
	d = Step(second, rules)
	if d.Call != CallProvider {
		t.Fatalf("p-2 after a not-invoked attempt: %+v", d)
	}
	rec = *d.Writes.Record
	d = Step(facts(func(f *Facts) {
		f.Env.Proposal.ProposalID = "p-2"
		f.Record, f.Found, f.Dispatched, f.Reply = rec, true, true, schema.AdapterReply{Outcome: "confirmed"}
		f.Lease = LeaseOf(rec)
	}), rules)
	if d.Outcome == nil || d.Outcome.RecordedEarlier {
		t.Fatalf("p-2's own dispatch: %+v", d.Outcome)
	}
	others := othersOf(*d.Writes.Record, schema.ProposalRef{Host: "frontdesk", ProposalID: "p-2"}, now)
	if len(others) != 1 || others[0].ProposalID != "p-1" || !others[0].RecordedEarlier {
		t.Fatalf("p-1 told of p-2's dispatch: %+v, want recorded_earlier", others)
	}
}

// othersOf are the outcomes rec's latest receipt gives the intent's
// proposals other than ref.
func othersOf(rec kv.Intent, ref schema.ProposalRef, nowMs int64) []schema.Outcome {
	var others []schema.Outcome
	for _, o := range intent.Outcomes(rec, nowMs) {
		if o.To() != ref {
			others = append(others, o)
		}
	}
	return others
}
