// Package dispatch is the stage that calls providers: exactly once per
// fingerprint, whatever crashes, redeliveries or replays happen (SPEC §3
// Dispatch). The journal (kv.Journal) is written with Sync before a
// provider is called and after it answers; a fingerprint that may have
// reached a provider is never sent again.
//
// step.go is the pure part: Step decides, from what the journal holds and
// what the last call returned, what to write, which call to make next (at
// most one) and what to publish. stage.go only locks, loads, steps,
// commits, calls and steps again.
package dispatch

import (
	"errors"
	"strconv"
	"time"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/policy"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
)

// Facts are what one step decides from: the proposal, what the journal
// holds for its fingerprint and proposal, and what the previous step's
// call returned.
type Facts struct {
	Env *schema.Envelope
	// Record is the fingerprint's record (kv.NewIntent when Found is false).
	Record kv.Intent
	Found  bool
	// Ended is this proposal's end at an earlier re-check, if any.
	Ended *kv.Ended
	Now   int64
	// Self is this processor's instance id (pebble.Store.InstanceID): the
	// writer it names in its in-flight records.
	Self string
	// Provider is the intent's configured provider; Known is false when it
	// is not configured or has no adapter. Adapter is the adapter's kind.
	Provider Provider
	Adapter  string
	Known    bool
	// GivingUp: the runner gave up on the input (its retries are spent):
	// end it from the journal, never call anything.
	GivingUp bool
	// Redispatch is the number of the intent's redispatch this input is —
	// the held envelope reconciliation handed back after finding the
	// intent's request lost in flight, recognized by its message id
	// (kv.RedispatchID under the internal key: only a processor can have
	// published it) — and 0 when it is not one.
	Redispatch int

	// After CallDisclosure: the resolved disclosure record, or the closed
	// code of a disclosure failure.
	Disclosed      *schema.DisclosureRecord
	DisclosureCode schema.Code
	// After the in-flight write of CallProvider failed.
	CheckpointErr error
	// After CallProvider: the provider's reply or the call's error, and
	// the in-flight record the call was made under.
	Dispatched bool
	Reply      schema.AdapterReply
	CallErr    error
	Lease      Lease
}

// Provider is what dispatch uses of a configured provider
// (providers.<name>).
type Provider struct {
	Name string
	// Timeout bounds one call (and a disclosure request); with
	// Rules.LeaseMargin it makes an in-flight record's lease.
	Timeout time.Duration
	// UnavailableRetry is how long a provider nobody answered is tried
	// again before ADAPTER_UNAVAILABLE.
	UnavailableRetry time.Duration
	// MaxInFlight bounds its proposals handled at once (Bulkhead).
	MaxInFlight int
}

// Lease names one in-flight record: its writer, its end and the attempt it
// counts. A provider call belongs to the lease it was made under.
type Lease struct {
	By       string
	UntilMs  int64
	Attempts int
}

// LeaseOf is rec's lease.
func LeaseOf(rec kv.Intent) Lease {
	return Lease{By: rec.InFlightBy, UntilMs: rec.InFlightUntilMs, Attempts: rec.DispatchAttempts}
}

// Call is the external call a step asks for, after its writes.
type Call int

// Calls.
const (
	NoCall         Call = iota
	CallDisclosure      // resolve protected disclosure values
	CallProvider        // the provider adapter's dispatch
)

// Decision is what the shell does for one step, in this order: commit
// Writes (Sync), make Call, or else publish Outcome (and Events), then
// apply Activity to the intent's snapshot, or redeliver after Retry.
type Decision struct {
	Writes  kv.IntentWrites
	Call    Call
	Outcome *schema.Outcome
	// Others are the outcomes of the intent's other proposals (a dispatch
	// sent again after a lost one).
	Others []schema.Outcome
	// Hold, when not "", is the message id under which the shell keeps
	// the envelope for a redispatch (see finish and HeldID).
	Hold     string
	Events   []schema.Incident
	Activity *ActivityChange
	Retry    time.Duration
	// Verdict is the receipt's verdict when Writes holds a receipt.
	Verdict *kv.Verdict
}

// Rules are what every step decides with.
type Rules struct {
	// Policy re-checks the grant window and managed policy (step 3).
	// nil: policy.Rules{} (the grant's own checks, no managed policy).
	Policy stages.Grants
	// ReconcileInterval is the wait before the first verification or
	// reconciliation poll.
	ReconcileInterval time.Duration
	// PollSubject is where the fingerprint's polls fire (the successor
	// stage's timer subject for its hex digits).
	PollSubject func(hex string) string
	// LeaseMargin is added to the provider's timeout to make an in-flight
	// record's lease: how long another processor that finds it waits for
	// its receipt before declaring the dispatch interrupted. It covers the
	// writer committing the receipt after the call and the processors'
	// clocks disagreeing. Default DefaultLeaseMargin.
	LeaseMargin time.Duration
}

// DefaultLeaseMargin is Rules.LeaseMargin's default.
const DefaultLeaseMargin = 5 * time.Second

// Step runs SPEC §3 Dispatch for one proposal, one decision at a time:
//  1. a receipt exists: it is the answer (the proposal is recorded on the
//     intent, so it hears of reconciliation);
//  2. in flight without a receipt: DISPATCH_INTERRUPTED, never sent again
//     (SPEC §6: whoever wrote it) — but while another processor's lease on
//     it runs, that processor may still be in the call: wait (Retry, no
//     writes) for its receipt or the lease's end;
//  3. the grant window and managed policy again, then disclosure: a denial
//     ends this proposal only, never the fingerprint;
//  4. the in-flight record, synced, then the provider call;
//  5. the reply becomes the receipt.
//
// A reply that proves nobody received the request (no responders) marks
// the record not-invoked and asks for a retry inside the provider's
// unavailable_retry window, then ADAPTER_UNAVAILABLE.
func Step(f Facts, r Rules) Decision {
	ref := f.Env.Ref()
	if e, ok := endOf(f, ref); ok {
		if awaitedRedispatch(f, f.Record) {
			// The redispatch of a lost request whose own proposal ended
			// meanwhile (its original input, redelivered while the intent
			// was lost, denied or given up at the re-check): its envelope
			// is not sent, nothing was, so the intent concludes as for a
			// redispatch denied (notSentAgain) — its other proposals would
			// otherwise wait for good — and this proposal keeps its end
			// (found by internal/sim, seed 10165).
			d := notSentAgain(f, f.Record, e.Phase, e.Code, r)
			d.Outcome = ended(f.Env, e).Outcome
			return d
		}
		return ended(f.Env, e)
	}
	rec := f.Record
	known := len(rec.Proposals)
	rec.AddProposal(ref)
	switch {
	case rec.Receipt != nil:
		d := Decision{
			Outcome:  outcome(rec.Outcome(ref, f.Now)),
			Activity: &ActivityChange{Record: &rec},
		}
		if rec.Receipt.Reconciliation == nil && rec.Redispatches > 0 {
			// A redispatch's receipt is told to every proposal of the
			// intent (finish); a crash between its commit and those
			// outcomes leaves them to a redelivery (found by the
			// simulation, internal/sim finding 7).
			d.Others = othersOf(rec, ref, f.Now)
		}
		if rec.Receipt.Status == schema.StatusReconciliationRequired {
			// The envelope is kept after the receipt is committed: a crash
			// between the two leaves none, and reconciliation could not
			// send the intent again should its request turn out lost. A
			// redelivery keeps it again (the same message id: a duplicate
			// if it was kept).
			d.Hold = hold(rec, f.Env)
		}
		if len(rec.Proposals) != known {
			d.Writes.Record = &rec
		}
		return d
	case rec.State == kv.StateInFlight && !f.Dispatched:
		if wait := LeaseWait(rec, f.Self, f.Now); wait > 0 && !f.GivingUp {
			return Decision{Retry: wait}
		}
		return finish(f, rec, Interrupted(), "interrupted", r)
	case f.Env.Authorization.Bound:
		// Authorization found the intent bound, and it is not any more (its
		// records swept, or found never dispatched since): nothing
		// authorizes a dispatch.
		return end(f, schema.PhaseDispatch, schema.CodeProcessingFailed)
	case f.GivingUp && rec.State == kv.StateNotInvoked:
		return finish(f, rec, MapDispatch(schema.AdapterReply{}, adapters.ErrNotInvoked), "dispatch", r)
	case f.GivingUp && awaitedRedispatch(f, rec):
		// The redispatch of a lost request, given up: nothing was sent
		// and nothing more will be (notSentAgain).
		return notSentAgain(f, rec, schema.PhaseDispatch, schema.CodeProcessingFailed, r)
	case f.GivingUp:
		// Nothing was sent for it: it ends PROCESSING_FAILED, recorded on
		// the intent first, so that no processor still deciding it can
		// dispatch it after this answer.
		return end(f, schema.PhaseDispatch, schema.CodeProcessingFailed)
	}
	if !f.Dispatched {
		// Step 3, before every attempt: a grant can expire and a policy
		// tighten while a provider is unreachable.
		if code, _ := r.grants().JudgeGrant(&f.Env.Authorization.Grant, f.Env, f.Now); code != "" {
			if awaitedRedispatch(f, rec) {
				return notSentAgain(f, rec, PhaseOf(code), code, r)
			}
			return end(f, PhaseOf(code), code)
		}
		if !f.Known {
			// Admission refuses unknown providers: the configuration
			// changed since. Nothing was sent.
			return finish(f, rec, MapDispatch(schema.AdapterReply{}, adapters.ErrNotInvoked), "dispatch", r)
		}
		if f.Env.Proposal.Intent.ProtectedDisclosure != nil {
			switch {
			case f.DisclosureCode != "" && awaitedRedispatch(f, rec):
				return notSentAgain(f, rec, schema.PhaseDisclosure, f.DisclosureCode, r)
			case f.DisclosureCode != "":
				return end(f, schema.PhaseDisclosure, f.DisclosureCode)
			case f.Disclosed == nil:
				return Decision{Call: CallDisclosure}
			}
		}
		if f.CheckpointErr != nil {
			inc := schema.NewIncident(schema.PhaseDispatch, schema.CodeCheckpointFailed)
			o := schema.FailureOutcome(ref, inc, f.Now)
			o.Fingerprint, o.Referent = schema.StringPtr(rec.Fingerprint), schema.StringPtr(rec.Referent)
			return Decision{Outcome: &o}
		}
		// Step 4: the in-flight record, synced, before the provider call.
		rec.State = kv.StateInFlight
		rec.DispatchAttempts++
		rec.InFlightAtMs = f.Now
		rec.InFlightBy = f.Self
		rec.DispatchedFor = &ref
		margin := r.LeaseMargin
		if margin <= 0 {
			margin = DefaultLeaseMargin
		}
		rec.InFlightUntilMs = f.Now + (f.Provider.Timeout + margin).Milliseconds()
		rec.Adapter = f.Adapter
		rec.UpdatedAtMs = f.Now
		return Decision{Writes: kv.IntentWrites{Record: &rec}, Call: CallProvider}
	}
	if NotInvoked(f.Reply, f.CallErr) && (rec.State != kv.StateInFlight || LeaseOf(rec) != f.Lease) {
		// Refused as late, or it reached nobody — and meanwhile the record
		// moved on without this call: another processor found the lease
		// ended, and the intent may be in flight again under its lease (a
		// request lost in flight is sent again). This call did nothing and
		// has nothing to record; marking that other dispatch not-invoked
		// would send the intent a second time. A redelivery decides afresh
		// from the record (found by the simulation, internal/sim).
		if wait := LeaseWait(rec, f.Self, f.Now); wait > 0 {
			return Decision{Retry: wait}
		}
		return Decision{Retry: time.Second}
	}
	if NotInvoked(f.Reply, f.CallErr) {
		// Nobody received it, or nobody acted on it because it came after
		// its not_after_ms: durably not-invoked (unless another processor
		// has recorded the dispatch meanwhile: then this commit loses),
		// then retried inside the window with a new lease (connectors
		// reconnecting after a restart; a processor that stalled).
		rec.State = kv.StateNotInvoked
		if rec.NotInvokedSinceMs == 0 {
			rec.NotInvokedSinceMs = f.Now
		}
		rec.UpdatedAtMs = f.Now
		window := f.Provider.UnavailableRetry
		if elapsed := time.Duration(f.Now-rec.NotInvokedSinceMs) * time.Millisecond; elapsed < window {
			// Sized so that a window of any length takes a bounded number
			// of redeliveries (stages.MaxRequestedRetries).
			retry := max(stages.Backoff(250*time.Millisecond, 5*time.Second, rec.DispatchAttempts), window/24)
			return Decision{Writes: kv.IntentWrites{Record: &rec}, Retry: min(retry, window-elapsed+time.Millisecond)}
		}
	}
	// Step 5: the receipt, synced; then the outcome.
	return finish(f, rec, MapDispatch(f.Reply, f.CallErr), "dispatch", r)
}

// NotInvoked reports whether a dispatch call provably led to no action: it
// reached nobody (adapters.ErrNotInvoked, but not a request refused as
// invalid, which no retry mends), or it came after its not_after_ms and
// was refused (schema.LateReply, from the connector or from this
// processor's own check before sending).
func NotInvoked(reply schema.AdapterReply, err error) bool {
	if err != nil {
		return errors.Is(err, adapters.ErrNotInvoked) && !errors.Is(err, adapters.ErrInvalidRequest)
	}
	return reply.IsLate()
}

// LeaseWait is how long a processor (instance id self) that finds rec in
// flight without a receipt waits before looking again, at nowMs: 0 when it
// may declare the dispatch interrupted — the record is its own (written by
// it before a restart: nothing of that run is still calling; or by this
// run, whose call ended without a receipt, since the fingerprint's lock
// excludes a concurrent call), predates leases, or its lease has ended:
// nowMs is past InFlightUntilMs, the request's not_after_ms, after which
// no connector acts on it (SPEC §4).
// Otherwise the writer may be in the call right now: a quarter of the
// lease's rest, between 250ms and 5s, and never past its end.
func LeaseWait(rec kv.Intent, self string, nowMs int64) time.Duration {
	if rec.InFlightBy == "" || rec.InFlightBy == self || nowMs > rec.InFlightUntilMs {
		return 0
	}
	left := time.Duration(rec.InFlightUntilMs-nowMs) * time.Millisecond
	return min(max(left/4, 250*time.Millisecond), 5*time.Second, left+time.Millisecond)
}

// finish settles verdict v as the fingerprint's receipt, with its first
// poll when the effect still needs checking and the indeterminate index.
//
// A dispatch sent again after reconciliation found the last one lost in
// flight (the record was StateLost) tells every proposal of the intent:
// they heard only RECONCILIATION_REQUIRED of the lost one. A verdict that
// leaves the effect unknown for want of an answer keeps the envelope
// (Decision.Hold), so that reconciliation can have it dispatched again if
// the provider turns out never to have received it.
func finish(f Facts, rec kv.Intent, v kv.Verdict, step string, r Rules) Decision {
	reopened := rec.Redispatches > 0 && rec.ReceiptSeq > 0 && rec.Receipt == nil
	rc := rec.Settle(v, rec.DispatchStep(step), nil, f.Disclosed, f.Now)
	rec.DispatchCode = ""
	if v.NextAction == schema.NextReconcile && len(v.Incidents) > 0 {
		rec.DispatchCode = v.Incidents[0].Code
	}
	w := kv.IntentWrites{Record: &rec, Receipt: &rc}
	if rc.NextAction != schema.NextNone {
		// Attempt numbers go on across redispatches: each id is used once.
		rec.ReconcileNextAtMs = f.Now + r.ReconcileInterval.Milliseconds()
		t := kv.PollTimer(r.PollSubject(kv.Hex(rec.Fingerprint)), rec.Fingerprint, rec.ReconcileAttempt+1, rec.ReconcileNextAtMs)
		w.Timer = &t
	}
	if kv.IndeterminateReceipt(&rc) {
		w.Indeterminate, w.SinceMs = 1, f.Now
	}
	disclosed := f.Disclosed
	var others []schema.Outcome
	if reopened {
		others = othersOf(rec, f.Env.Ref(), f.Now)
	}
	return Decision{
		Writes:   w,
		Outcome:  outcome(rec.Outcome(f.Env.Ref(), f.Now)),
		Others:   others,
		Hold:     hold(rec, f.Env),
		Verdict:  &v,
		Activity: &ActivityChange{Record: &rec, Disclosed: disclosed},
	}
}

// endOf is how proposal ref ended without dispatching, if it did: its own
// end record (Facts.Ended), or the intent's.
func endOf(f Facts, ref schema.ProposalRef) (kv.Ended, bool) {
	if f.Ended != nil {
		return *f.Ended, true
	}
	e, ok := f.Record.EndOf(ref)
	return e.Ended, ok
}

// awaitedRedispatch reports whether f's input is the redispatch rec waits
// for: the intent reopened after its request was found lost (no receipt,
// kv.StateLost) and this its latest reopening's hand-off. The held stream
// keeps one envelope per intent, so no other redispatch of it is coming.
// So it is while that redispatch's attempts reach nobody
// (kv.StateNotInvoked, no receipt yet): a denial at the re-check of the
// next attempt leaves the intent as unsent as one before the first (found
// by internal/sim, seed 52819: the intent stayed not-invoked, its other
// proposal at RECONCILIATION_REQUIRED for good).
func awaitedRedispatch(f Facts, rec kv.Intent) bool {
	return f.Redispatch > 0 && f.Redispatch == rec.Redispatches && rec.Receipt == nil &&
		(rec.State == kv.StateLost || rec.State == kv.StateNotInvoked)
}

// notSentAgain concludes an intent whose redispatch cannot go: its request
// was found lost in flight (the provider never received it, believed only
// past its not_after_ms), and the held envelope sent again is denied at
// the re-check (its grant expired meanwhile, a policy tightened,
// disclosure refused) or given up by the runner. Nothing reached the provider and nothing will, so
// the intent ends FAILED_BEFORE_DISPATCH — what reconciliation records for
// a lost request with no envelope left to send — told to every proposal
// (finish), with the reason it was not sent again as an incident event.
// Ending only this proposal (end) would leave the intent lost and its
// other proposals at RECONCILIATION_REQUIRED for good.
func notSentAgain(f Facts, rec kv.Intent, phase schema.Phase, code schema.Code, r Rules) Decision {
	v := kv.Verdict{Status: schema.StatusFailedBeforeDispatch, NextAction: schema.NextNone,
		Incidents: incidents(schema.CodeProviderFailedBeforeDispatch), ErrorCode: string(schema.CodeProviderFailedBeforeDispatch)}
	d := finish(f, rec, v, "dispatch", r)
	d.Events = append(d.Events, schema.NewIncident(phase, code))
	return d
}

// end ends one proposal without dispatching it — a denial at the step 3
// re-check, or a give-up — recorded before its outcome is published: on
// the intent's record, with its compare-and-set (a processor deciding the
// same proposal at the same moment loses and answers with this end), and
// for the proposal. It never binds the fingerprint: a later proposal of
// the same intent with a fresh grant is judged afresh.
func end(f Facts, phase schema.Phase, code schema.Code) Decision {
	e := kv.EndedProposal{Ref: f.Env.Ref(), Ended: kv.Ended{Phase: phase, Code: code, AtMs: f.Now}}
	rec := f.Record
	rec.End(e)
	rec.UpdatedAtMs = f.Now
	d := ended(f.Env, e.Ended)
	d.Writes.Record, d.Writes.Ended = &rec, &e
	return d
}

// ended is the answer of a proposal ended at the re-check: its outcome,
// and its mark on the intent's activity (the intent's own state is
// untouched; a receipt another proposal got stays the picture).
func ended(env *schema.Envelope, e kv.Ended) Decision {
	o := schema.FailureOutcome(env.Ref(), schema.NewIncident(e.Phase, e.Code), e.AtMs)
	o.Fingerprint, o.Referent = schema.StringPtr(env.Grounded.Fingerprint), schema.StringPtr(env.Grounded.Referent)
	return Decision{Outcome: &o, Activity: &ActivityChange{Ref: env.Ref(), Ended: &e}}
}

// ActivityChange is a step's edit of its intent's activity snapshot (see
// Apply). It is data, not a closure: the shell applies it once the
// outcomes are acknowledged.
type ActivityChange struct {
	// Record, when set, is the intent's record, projected into the
	// snapshot with the disclosure record Disclosed (nil: none).
	Record    *kv.Intent
	Disclosed *schema.DisclosureRecord
	// Ended, when set, marks the proposal Ref denied at the re-check (the
	// intent's own state is untouched; a receipt another proposal got stays
	// the picture).
	Ref   schema.ProposalRef
	Ended *kv.Ended
}

// Apply makes the change to the snapshot a.
func (c *ActivityChange) Apply(a *schema.Activity) {
	if c.Record != nil {
		c.Record.Project(a)
		if c.Disclosed != nil {
			d := *c.Disclosed
			a.Disclosure = &d
		}
	}
	if e := c.Ended; e != nil {
		a.AddProposal(c.Ref)
		if a.Receipt != nil {
			return
		}
		a.Status = schema.ActivityDenied
		a.Decision = &schema.ActivityDecision{Outcome: "deny", ReasonCode: e.Code, DecidedAtMs: e.AtMs}
	}
}

func outcome(o schema.Outcome) *schema.Outcome { return &o }

// othersOf are the outcomes rec's latest receipt gives the intent's
// proposals other than ref.
func othersOf(rec kv.Intent, ref schema.ProposalRef, nowMs int64) []schema.Outcome {
	var others []schema.Outcome
	for _, o := range rec.Outcomes(nowMs) {
		if o.To() != ref {
			others = append(others, o)
		}
	}
	return others
}

// HeldID is the message id under which the envelope of proposal
// proposalID is kept for fingerprint fp after redispatches redispatches:
// one per proposal and dispatch, so that keeping it again is a duplicate.
func HeldID(fp, proposalID string, redispatches int) string {
	return "held/" + kv.Hex(fp) + "/" + proposalID + "/" + strconv.Itoa(redispatches)
}

// hold is Decision.Hold for env under rec's receipt: the envelope is kept
// when the effect is unknown for want of an answer — unless it is a
// proposal answered from its intent (Authorization.Bound: it carries no
// grant of its own). Sent again, such an envelope would end at dispatch's
// re-check and leave the intent lost, its other proposals waiting; the
// envelope kept is always one that can be dispatched (the held stream
// keeps the latest per intent, so a bound one would replace it).
func hold(rec kv.Intent, env *schema.Envelope) string {
	if !rec.LostInFlight() || env.Authorization.Bound {
		return ""
	}
	return HeldID(rec.Fingerprint, env.Proposal.ProposalID, rec.Redispatches)
}

// MapDispatch turns an adapter's dispatch answer into a verdict. A timeout
// or an unknown error after the request may have been sent is
// indeterminate, never a failure (SPEC §3 Dispatch step 5).
func MapDispatch(reply schema.AdapterReply, err error) kv.Verdict {
	if err != nil {
		code := schema.CodeAdapterError
		switch {
		case errors.Is(err, adapters.ErrNotInvoked):
			return kv.Verdict{Status: schema.StatusFailedBeforeDispatch, NextAction: schema.NextNone,
				Incidents: incidents(schema.CodeAdapterUnavailable), ErrorCode: string(schema.CodeAdapterUnavailable)}
		case errors.Is(err, adapters.ErrTimeout):
			code = schema.CodeAdapterTimeout
		case errors.Is(err, adapters.ErrMalformedReply):
			code = schema.CodeMalformedAdapterResult
		}
		return kv.Verdict{Status: schema.StatusReconciliationRequired, NextAction: schema.NextReconcile, Attempted: true,
			Incidents: incidents(code), ErrorCode: string(code)}
	}
	v := kv.Verdict{Attempted: true, ProviderActionID: reply.ProviderActionID, EvidenceRefs: reply.EvidenceRefs, ErrorCode: reply.ErrorCode}
	var code schema.Code
	switch reply.Outcome {
	case schema.ReplyConfirmed:
		v.Status, v.NextAction = schema.StatusConfirmed, schema.NextNone
	case schema.ReplyAcknowledged:
		v.Status, v.NextAction = schema.StatusAcknowledged, schema.NextVerify
	case schema.ReplyRejected:
		v.Status, v.NextAction, code = schema.StatusRejected, schema.NextNone, schema.CodeProviderRejected
	case schema.ReplyFailedBeforeDispatch:
		v.Status, v.NextAction, code = schema.StatusFailedBeforeDispatch, schema.NextNone, schema.CodeProviderFailedBeforeDispatch
		v.Attempted = false
	default: // indeterminate; the adapters refuse anything else as malformed
		v.Status, v.NextAction, code = schema.StatusReconciliationRequired, schema.NextReconcile, schema.CodeProviderIndeterminate
	}
	if code != "" {
		v.Incidents = incidents(code)
		if v.ErrorCode == "" {
			v.ErrorCode = string(code)
		}
	}
	return v
}

// Interrupted is the verdict for an in-flight record without a receipt: the
// processor stopped between "begin" and "receipt", so the provider may have
// acted. It is never dispatched again.
func Interrupted() kv.Verdict {
	return kv.Verdict{Status: schema.StatusReconciliationRequired, NextAction: schema.NextReconcile, Attempted: true,
		Incidents: incidents(schema.CodeDispatchInterrupted), ErrorCode: string(schema.CodeDispatchInterrupted)}
}

func incidents(code schema.Code) []schema.Incident {
	return []schema.Incident{schema.NewIncident(schema.PhaseDispatch, code)}
}

// PhaseOf is the phase a re-check denial code belongs to.
func PhaseOf(code schema.Code) schema.Phase {
	if p := schema.PhaseOf(code, schema.PhaseAuthorization, schema.PhaseDisclosure); p != "" {
		return p
	}
	return schema.PhaseAuthorization
}

// grants are the rules' Policy, policy.Rules{} when unset.
func (r Rules) grants() stages.Grants {
	if r.Policy == nil {
		return policy.Rules{}
	}
	return r.Policy
}
