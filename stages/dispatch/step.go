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

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/intent"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/adapter"
	"github.com/portcullis/portcullis/stages/policy"
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
type Lease = intent.Lease

// LeaseOf is rec's lease.
func LeaseOf(rec kv.Intent) Lease { return intent.LeaseOf(rec) }

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

// Step runs SPEC §3 Dispatch for one proposal, one decision at a time.
// What each event does to the intent's record is intent.Apply's; Step
// decides which event happened and turns its effects into a decision:
//  1. a receipt exists: it is the answer (the proposal joins the intent,
//     so it hears of reconciliation);
//  2. in flight without a receipt: DISPATCH_INTERRUPTED, never sent again
//     (SPEC §6: whoever wrote it) — but while another processor's lease on
//     it runs, that processor may still be in the call: wait (Retry, no
//     writes) for its receipt or the lease's end;
//  3. the grant window and managed policy again, then disclosure: a denial
//     ends this proposal only, never the fingerprint (unless the input is
//     the redispatch the intent waits for: intent.Deny);
//  4. the in-flight record, synced, then the provider call;
//  5. the reply becomes the receipt.
//
// A reply that proves nobody received the request (no responders) marks
// the record not-invoked and asks for a retry inside the provider's
// unavailable_retry window, then ADAPTER_UNAVAILABLE.
func Step(f Facts, r Rules) Decision {
	ref := f.Env.Ref()
	ev := func(k intent.Kind) intent.Event {
		return intent.Event{Kind: k, NowMs: f.Now, Ref: ref, Redispatch: f.Redispatch, Disclosure: f.Disclosed,
			PollAtMs: f.Now + r.ReconcileInterval.Milliseconds()}
	}
	if e, ok := endOf(f, ref); ok {
		// Ended before: it keeps its end — and concludes the intent if it
		// is the redispatch the intent waits for (intent.Deny).
		d := ev(intent.Deny)
		d.Ended = &e
		return decide(f, r, d)
	}
	if rec, fx := intent.Apply(f.Record, ev(intent.Join)); len(fx.Told) > 0 {
		// A receipt: the proposal is answered from the record.
		return answer(f, rec, fx)
	}
	if !f.Dispatched {
		e := ev(intent.Interrupt)
		e.Self, e.Force = f.Self, f.GivingUp
		if _, fx := intent.Apply(f.Record, e); !errors.Is(fx.Refused, intent.ErrNotAllowed) {
			return decide(f, r, e)
		}
	}
	switch {
	case f.Env.Authorization.Bound:
		// Authorization found the intent bound, and it is not any more (its
		// records swept, or found never dispatched since): nothing
		// authorizes a dispatch.
		e := ev(intent.End)
		e.Phase, e.Code = schema.PhaseDispatch, schema.CodeProcessingFailed
		return decide(f, r, e)
	case f.GivingUp:
		// Nothing was sent for it, or nothing that reached anybody: it
		// ends, recorded on the intent first, so that no processor still
		// deciding it can dispatch it after this answer.
		return decide(f, r, ev(intent.GiveUp))
	}
	if !f.Dispatched {
		// Step 3, before every attempt: a grant can expire and a policy
		// tighten while a provider is unreachable.
		if code, _ := r.grants().JudgeGrant(&f.Env.Authorization.Grant, f.Env, f.Now); code != "" {
			e := ev(intent.Deny)
			e.Phase, e.Code = PhaseOf(code), code
			return decide(f, r, e)
		}
		if !f.Known {
			// Admission refuses unknown providers: the configuration
			// changed since. Nothing was sent.
			e := ev(intent.Reply)
			e.Verdict = intent.Unavailable()
			return decide(f, r, e)
		}
		if f.Env.Proposal.Intent.ProtectedDisclosure != nil {
			switch {
			case f.DisclosureCode != "":
				e := ev(intent.Deny)
				e.Phase, e.Code = schema.PhaseDisclosure, f.DisclosureCode
				return decide(f, r, e)
			case f.Disclosed == nil:
				return Decision{Call: CallDisclosure}
			}
		}
		if f.CheckpointErr != nil {
			inc := schema.NewIncident(schema.PhaseDispatch, schema.CodeCheckpointFailed)
			o := schema.FailureOutcome(ref, inc, f.Now)
			o.Fingerprint, o.Referent = schema.StringPtr(f.Record.Fingerprint), schema.StringPtr(f.Record.Referent)
			return Decision{Outcome: &o}
		}
		// Step 4: the in-flight record, synced, before the provider call.
		margin := r.LeaseMargin
		if margin <= 0 {
			margin = DefaultLeaseMargin
		}
		e := ev(intent.Begin)
		e.By, e.UntilMs, e.Adapter = f.Self, f.Now+(f.Provider.Timeout+margin).Milliseconds(), f.Adapter
		d := decide(f, r, e)
		d.Call = CallProvider
		return d
	}
	if NotInvoked(f.Reply, f.CallErr) {
		// Nobody received it, or nobody acted on it because it came after
		// its not_after_ms: durably not-invoked (unless another processor
		// has recorded the dispatch meanwhile: then this commit loses),
		// then retried inside the window with a new lease (connectors
		// reconnecting after a restart; a processor that stalled).
		e := ev(intent.NotInvoked)
		e.Lease = f.Lease
		rec, fx := intent.Apply(f.Record, e)
		if fx.Refused != nil {
			// Refused as late, or it reached nobody — and meanwhile the
			// record moved on without this call (intent.ErrMovedOn). This
			// call did nothing and has nothing to record. A redelivery
			// decides afresh from the record.
			if wait := LeaseWait(f.Record, f.Self, f.Now); wait > 0 {
				return Decision{Retry: wait}
			}
			return Decision{Retry: time.Second}
		}
		window := f.Provider.UnavailableRetry
		if elapsed := time.Duration(f.Now-rec.NotInvokedSinceMs) * time.Millisecond; elapsed < window {
			// Sized so that a window of any length takes a bounded number
			// of redeliveries (stages.MaxRequestedRetries).
			retry := max(stages.Backoff(250*time.Millisecond, 5*time.Second, rec.DispatchAttempts), window/24)
			return Decision{Writes: kv.IntentWrites{Record: &rec}, Retry: min(retry, window-elapsed+time.Millisecond)}
		}
		// The window is spent: the receipt says nobody was reached.
		f.Record = rec
	}
	// Step 5: the receipt, synced; then the outcome.
	e := ev(intent.Reply)
	e.Verdict = MapDispatch(f.Reply, f.CallErr)
	return decide(f, r, e)
}

// LeaseWait is how long a processor (instance id self) that finds rec in
// flight without a receipt waits before looking again (intent.LeaseWait).
func LeaseWait(rec kv.Intent, self string, nowMs int64) time.Duration {
	return intent.LeaseWait(rec, self, nowMs)
}

// NotInvoked reports whether a dispatch call provably led to no action: it
// reached nobody (adapter.ErrNotInvoked, but not a request refused as
// invalid, which no retry mends), or it came after its not_after_ms and
// was refused (schema.LateReply, from the connector or from this
// processor's own check before sending).
func NotInvoked(reply schema.AdapterReply, err error) bool {
	if err != nil {
		return errors.Is(err, adapter.ErrNotInvoked) && !errors.Is(err, adapter.ErrInvalidRequest)
	}
	return reply.IsLate()
}

// answer is the decision of a proposal answered from its intent's
// receipt. The envelope is kept after the receipt is committed: a crash
// between the two leaves none, and reconciliation could not send the
// intent again should its request turn out lost. A redelivery keeps it
// again (the same message id: a duplicate if it was kept).
func answer(f Facts, rec kv.Intent, fx intent.Effects) Decision {
	d := Decision{Activity: &ActivityChange{Record: &rec}}
	d.Outcome, d.Others = told(fx)
	if rec.Receipt.Status == schema.StatusReconciliationRequired {
		d.Hold = hold(rec, f.Env)
	}
	if fx.Changed {
		d.Writes.Record = &rec
	}
	return d
}

// decide applies event e to the record and turns its effects into a
// decision: the writes, the outcomes, the envelope kept (hold) and the
// activity change.
func decide(f Facts, r Rules, e intent.Event) Decision {
	rec, fx := intent.Apply(f.Record, e)
	if fx.Refused != nil {
		return Decision{Retry: fx.Retry}
	}
	d := Decision{Events: fx.Events, Verdict: fx.Verdict}
	d.Outcome, d.Others = told(fx)
	if fx.Changed {
		d.Writes.Record = &rec
	}
	d.Writes.Ended = fx.Ended
	if rc := fx.Receipt; rc != nil {
		d.Writes.Receipt = rc
		if p := fx.Poll; p != nil {
			t := kv.PollTimer(r.PollSubject(kv.Hex(rec.Fingerprint)), rec.Fingerprint, p.Attempt, p.AtMs)
			d.Writes.Timer = &t
		}
		if fx.Indeterminate != 0 {
			d.Writes.Indeterminate, d.Writes.SinceMs = fx.Indeterminate, f.Now
		}
		// A verdict that leaves the effect unknown for want of an answer
		// keeps the envelope, so that reconciliation can have it
		// dispatched again if the provider turns out never to have
		// received it.
		d.Hold = hold(rec, f.Env)
		d.Activity = &ActivityChange{Record: &rec, Disclosed: f.Disclosed}
	}
	if e.Kind == intent.Deny && e.Ended != nil && fx.Receipt == nil {
		d.Activity = &ActivityChange{Ref: e.Ref, Ended: e.Ended}
	}
	if fx.Ended != nil {
		d.Activity = &ActivityChange{Ref: fx.Ended.Ref, Ended: &fx.Ended.Ended}
	}
	return d
}

// told splits the outcomes an event tells: its proposal's, and the others'.
func told(fx intent.Effects) (*schema.Outcome, []schema.Outcome) {
	if len(fx.Told) == 0 {
		return nil, nil
	}
	o := fx.Told[0]
	if len(fx.Told) == 1 {
		return &o, nil
	}
	return &o, fx.Told[1:]
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
		intent.Project(*c.Record, a)
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
	if !intent.LostInFlight(rec) || env.Authorization.Bound {
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
		case errors.Is(err, adapter.ErrNotInvoked):
			return intent.Unavailable()
		case errors.Is(err, adapter.ErrTimeout):
			code = schema.CodeAdapterTimeout
		case errors.Is(err, adapter.ErrMalformedReply):
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

// Interrupted is the verdict for an in-flight record without a receipt
// (intent.Interrupted).
func Interrupted() kv.Verdict { return intent.Interrupted() }

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
