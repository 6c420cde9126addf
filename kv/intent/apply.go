// Package intent is the life of an intent's dispatch record (kv.Intent),
// in one place: Apply takes a record and one event — a proposal joining,
// the in-flight record with its lease, the provider's reply, a call that
// reached nobody, an interruption, a denial or give-up at dispatch's
// re-check, a reconciliation poll and its finding, a request found lost
// and reopened, an operator's settlement — and returns the next record and
// the event's effects: the receipt made, what each proposal is told, the
// incident events, the poll to arm or cancel, the indeterminate index's
// change. An event a state does not allow is refused, and then nothing
// changes.
//
// It does no I/O and reads no clock: the time and every number decided by
// configuration (a lease's end, the next poll's moment) come in the event.
// Dispatch (stages/dispatch), reconciliation and the operator's
// settlement (stages/reconciliation) decide which event happened, call
// Apply, and turn its effects into writes, calls and publications. The
// transition tables in testdata/ are its tests, and the simulation
// (internal/sim) replays them.
package intent

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// Kind names an event.
type Kind string

// Events. Dispatch's events carry the proposal (Event.Ref); every one of
// them but End, and Deny when it ends only the proposal, joins it to the
// intent's proposals.
const (
	// Join: a proposal of the intent comes to dispatch. With a receipt it
	// is answered from the record (a repeat); without one it only joins.
	Join Kind = "join"
	// Begin: the in-flight record, synced before the provider call, with
	// its writer (By) and lease (UntilMs).
	Begin Kind = "begin"
	// NotInvoked: the call under Lease provably reached nobody.
	NotInvoked Kind = "not_invoked"
	// Reply: a dispatch verdict (the provider's reply, or a call that
	// reached nobody for good) becomes the receipt.
	Reply Kind = "reply"
	// Interrupt: an in-flight record without a receipt, found by Self:
	// DISPATCH_INTERRUPTED, unless another processor's lease still runs
	// (refused, ErrLeaseHeld) and the runner is not giving up (Force).
	Interrupt Kind = "interrupt"
	// Deny: dispatch's re-check denied the proposal (Phase, Code). It ends
	// the proposal only, or, when the input is the redispatch the intent
	// waits for (Redispatch), concludes the intent FAILED_BEFORE_DISPATCH:
	// nothing was sent and nothing will be. With Ended set the proposal
	// had ended before: it keeps its end.
	Deny Kind = "deny"
	// End: the proposal ends without dispatching (Phase, Code), whatever
	// the intent's state.
	End Kind = "end"
	// GiveUp: the runner gave up on the proposal's input: a dispatch that
	// reached nobody becomes its receipt; otherwise as Deny with
	// PROCESSING_FAILED.
	GiveUp Kind = "give_up"
	// Poll: reconciliation's attempt number Attempt starts.
	Poll Kind = "poll"
	// Finding: attempt number Attempt (AttemptID) established Verdict.
	Finding Kind = "finding"
	// Reopen: the request was found lost in flight; the intent is
	// dispatched again.
	Reopen Kind = "reopen"
	// Operator: an operator settles an indeterminate effect (Present,
	// EvidenceRef, Operator, Examined, ObservedAtMs).
	Operator Kind = "operator"
)

// Event is one thing that happened to an intent.
type Event struct {
	Kind Kind
	// NowMs is when it happened.
	NowMs int64
	// Ref is the proposal of a dispatch event.
	Ref schema.ProposalRef

	// Begin: the writer, its lease's end, the adapter's kind.
	By      string
	UntilMs int64
	Adapter string
	// NotInvoked: the lease the call was made under.
	Lease Lease
	// Interrupt: the processor that found the record; Force when the
	// runner gives up (no waiting for another's lease).
	Self  string
	Force bool
	// Reply, Finding: the verdict; Reply's disclosure record.
	Verdict    kv.Verdict
	Disclosure *schema.DisclosureRecord
	// Deny, End: why; Redispatch is the redispatch number the input is (0:
	// not one); Ended the proposal's own earlier end, if any.
	Phase      schema.Phase
	Code       schema.Code
	Redispatch int
	Ended      *kv.Ended
	// PollAtMs is when the next reconciliation poll is due, should the
	// event leave the effect to check (a receipt whose next_action is not
	// none, a finding that did not settle it).
	PollAtMs int64
	// Poll, Finding: the attempt's number and id.
	Attempt   int
	AttemptID string
	// Operator: the finding (present or absent), its evidence, the
	// operator's name, the receipt examined ("" the latest), when the
	// provider was looked at (0: not said), and the moment before which
	// an absence is not believed (AbsentAfterMs, 0: none).
	Present       bool
	EvidenceRef   string
	Operator      string
	Examined      string
	ObservedAtMs  int64
	AbsentAfterMs int64
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

// Effects are what an event means beyond the record.
type Effects struct {
	// Refused says why the event is not allowed in the record's state;
	// then nothing else is set and the record is unchanged.
	Refused error
	// Retry is how long to wait before trying again (Interrupt refused
	// while another processor's lease runs).
	Retry time.Duration
	// Changed: the record changed and is to be committed.
	Changed bool
	// Receipt is the receipt the event made, and Verdict its verdict.
	Receipt *schema.Receipt
	Verdict *kv.Verdict
	// Told are the outcomes the event tells: a dispatch event's own
	// proposal first, then the intent's other proposals it concerns; a
	// reconciliation finding's, every proposal.
	Told []schema.Outcome
	// Events are incident events (not in any outcome).
	Events []schema.Incident
	// Ended is the proposal's end, to record for it (End, Deny).
	Ended *kv.EndedProposal
	// Poll is the next reconciliation poll to arm; CancelPoll cancels the
	// pending one; Announce arms an announcement, due now, of the
	// operator's settlement to every proposal.
	Poll       *NextPoll
	CancelPoll bool
	Announce   bool
	// Indeterminate is the indeterminate index's change (+1, -1, 0).
	Indeterminate int
	// Redispatch is the reopening's number (Reopen): the held envelope
	// goes back to dispatch under it.
	Redispatch int
}

// NextPoll is a reconciliation poll: its attempt number and due time.
type NextPoll struct {
	Attempt int
	AtMs    int64
}

// Refusals.
var (
	// ErrNotAllowed: the event cannot happen in the record's state.
	ErrNotAllowed = errors.New("intent: event not allowed in this state")
	// ErrLeaseHeld: another processor's in-flight lease still runs.
	ErrLeaseHeld = errors.New("intent: in flight under another processor's lease")
	// ErrMovedOn: the record left the lease a call was made under.
	ErrMovedOn = errors.New("intent: the record moved on since the call's lease")

	// The operator's settlement's refusals keep the words the operator's
	// command has always shown (stages/reconciliation names them too).
	ErrNoReceipt        = errors.New("reconciliation: no receipt for this fingerprint")
	ErrNotIndeterminate = errors.New("reconciliation: the effect is not indeterminate")
	ErrSuperseded       = errors.New("reconciliation: the receipt examined is no longer the latest")
	ErrTooEarly         = errors.New("reconciliation: absence cannot be settled while the dispatch's request may still reach the provider")
)

// OperatorStep is the receipt step of the operator's settlement.
const OperatorStep = "operator"

// AttemptStep is the receipt step of attempt attemptID (ReceiptID's input).
func AttemptStep(attemptID string) string { return "reconcile/" + attemptID }

// Apply is the transition of rec by ev: the next record and the effects.
// A refused event returns rec unchanged and Effects.Refused.
func Apply(rec kv.Intent, ev Event) (kv.Intent, Effects) {
	// The next record shares nothing the edits change with rec: the
	// caller's record stays as it was (a step may apply more than one
	// event to the record it loaded).
	next := rec
	next.Proposals, next.Ended = slices.Clone(rec.Proposals), slices.Clone(rec.Ended)
	next, fx := apply(next, ev)
	if fx.Refused != nil {
		return rec, Effects{Refused: fx.Refused, Retry: fx.Retry}
	}
	return next, fx
}

func apply(rec kv.Intent, ev Event) (kv.Intent, Effects) {
	switch ev.Kind {
	case Join:
		return join(rec, ev)
	case Begin:
		return begin(rec, ev)
	case NotInvoked:
		return notInvoked(rec, ev)
	case Reply:
		if rec.Receipt != nil {
			return rec, refuse(ev, rec)
		}
		rec.AddProposal(ev.Ref)
		return receipt(rec, ev, ev.Verdict, "dispatch")
	case Interrupt:
		if rec.Receipt != nil || rec.State != kv.StateInFlight {
			return rec, refuse(ev, rec)
		}
		if wait := LeaseWait(rec, ev.Self, ev.NowMs); wait > 0 && !ev.Force {
			return rec, Effects{Refused: ErrLeaseHeld, Retry: wait}
		}
		rec.AddProposal(ev.Ref)
		return receipt(rec, ev, Interrupted(), "interrupted")
	case Deny:
		return deny(rec, ev)
	case End:
		return end(rec, ev)
	case GiveUp:
		switch {
		case rec.Receipt != nil:
			return rec, refuse(ev, rec)
		case rec.State == kv.StateInFlight:
			ev.Kind, ev.Force = Interrupt, true
			return apply(rec, ev)
		case rec.State == kv.StateNotInvoked:
			rec.AddProposal(ev.Ref)
			return receipt(rec, ev, Unavailable(), "dispatch")
		}
		ev.Phase, ev.Code = schema.PhaseDispatch, schema.CodeProcessingFailed
		return deny(rec, ev)
	case Poll:
		if rec.Receipt == nil || !rec.NeedsWork() || ev.Attempt != rec.ReconcileAttempt+1 {
			return rec, refuse(ev, rec)
		}
		rec.ReconcileAttempt, rec.UpdatedAtMs = ev.Attempt, ev.NowMs
		return rec, Effects{Changed: true}
	case Finding:
		return finding(rec, ev)
	case Reopen:
		if rec.Receipt == nil || !LostInFlight(rec) {
			return rec, refuse(ev, rec)
		}
		MarkLost(&rec, ev.NowMs)
		return rec, Effects{Changed: true, CancelPoll: true, Indeterminate: -1, Redispatch: rec.Redispatches}
	case Operator:
		return operator(rec, ev)
	}
	return rec, Effects{Refused: fmt.Errorf("%w: unknown event %q", ErrNotAllowed, ev.Kind)}
}

func refuse(ev Event, rec kv.Intent) Effects {
	state := string(rec.State)
	if state == "" {
		state = "new"
	}
	if rec.Receipt != nil {
		state += "/" + string(rec.Receipt.Status)
	}
	return Effects{Refused: fmt.Errorf("%w: %s in %s", ErrNotAllowed, ev.Kind, state)}
}

// join records the proposal on the intent; with a receipt, it is the
// answer. A redispatch's receipt is told to every proposal of the intent
// (receipt): a crash between its commit and those outcomes leaves them to
// a redelivery (found by the simulation, internal/sim finding 7).
func join(rec kv.Intent, ev Event) (kv.Intent, Effects) {
	known := len(rec.Proposals)
	rec.AddProposal(ev.Ref)
	fx := Effects{Changed: len(rec.Proposals) != known}
	if rec.Receipt == nil {
		return rec, fx
	}
	fx.Told = []schema.Outcome{Outcome(rec, ev.Ref, ev.NowMs)}
	if rec.Receipt.Reconciliation == nil && rec.Redispatches > 0 {
		fx.Told = append(fx.Told, othersOf(rec, ev.Ref, ev.NowMs)...)
	}
	return rec, fx
}

// begin writes the in-flight record: from a fingerprint never dispatched,
// one whose last attempt reached nobody, or one whose request was lost.
func begin(rec kv.Intent, ev Event) (kv.Intent, Effects) {
	if rec.Receipt != nil || rec.State == kv.StateInFlight {
		return rec, refuse(ev, rec)
	}
	rec.AddProposal(ev.Ref)
	ref := ev.Ref
	rec.State = kv.StateInFlight
	rec.DispatchAttempts++
	rec.InFlightAtMs = ev.NowMs
	rec.InFlightBy = ev.By
	rec.DispatchedFor = &ref
	rec.InFlightUntilMs = ev.UntilMs
	rec.Adapter = ev.Adapter
	rec.UpdatedAtMs = ev.NowMs
	return rec, Effects{Changed: true}
}

// notInvoked marks the dispatch made under ev.Lease as having reached
// nobody. Refused when the record moved on without that call: another
// processor found the lease ended, and the intent may be in flight again
// under its lease; marking that other dispatch not-invoked would send the
// intent a second time (found by the simulation, internal/sim).
func notInvoked(rec kv.Intent, ev Event) (kv.Intent, Effects) {
	if rec.Receipt != nil || rec.State != kv.StateInFlight || LeaseOf(rec) != ev.Lease {
		return rec, Effects{Refused: fmt.Errorf("%w: not_invoked in %s", ErrMovedOn, rec.State)}
	}
	rec.AddProposal(ev.Ref)
	rec.State = kv.StateNotInvoked
	if rec.NotInvokedSinceMs == 0 {
		rec.NotInvokedSinceMs = ev.NowMs
	}
	rec.UpdatedAtMs = ev.NowMs
	return rec, Effects{Changed: true}
}

// receipt settles dispatch verdict v as the fingerprint's receipt, with
// its first poll when the effect still needs checking and the
// indeterminate index.
//
// A dispatch sent again after reconciliation found the last one lost in
// flight (the record was kv.StateLost) tells every proposal of the
// intent: they heard only RECONCILIATION_REQUIRED of the lost one.
func receipt(rec kv.Intent, ev Event, v kv.Verdict, step string) (kv.Intent, Effects) {
	reopened := rec.Redispatches > 0 && rec.ReceiptSeq > 0 && rec.Receipt == nil
	rc := Settle(&rec, v, DispatchStep(rec, step), nil, ev.Disclosure, ev.NowMs)
	rec.DispatchCode = ""
	if v.NextAction == schema.NextReconcile && len(v.Incidents) > 0 {
		rec.DispatchCode = v.Incidents[0].Code
	}
	fx := Effects{Changed: true, Receipt: &rc, Verdict: &v}
	if rc.NextAction != schema.NextNone {
		// Attempt numbers go on across redispatches: each id is used once.
		rec.ReconcileNextAtMs = ev.PollAtMs
		fx.Poll = &NextPoll{Attempt: rec.ReconcileAttempt + 1, AtMs: rec.ReconcileNextAtMs}
	}
	if kv.IndeterminateReceipt(&rc) {
		fx.Indeterminate = 1
	}
	fx.Told = []schema.Outcome{Outcome(rec, ev.Ref, ev.NowMs)}
	if reopened {
		fx.Told = append(fx.Told, othersOf(rec, ev.Ref, ev.NowMs)...)
	}
	return rec, fx
}

// deny ends the proposal at dispatch's re-check — or, when its input is
// the redispatch the intent waits for, the intent: its request was found
// lost in flight, and the envelope sent again is denied (its grant
// expired meanwhile, a policy tightened, disclosure refused) or given up.
// Nothing reached the provider and nothing will, so the intent ends
// FAILED_BEFORE_DISPATCH — what reconciliation records for a lost request
// with no envelope left to send — told to every proposal, with the reason
// it was not sent again as an incident event. Ending only this proposal
// would leave the intent lost and its other proposals at
// RECONCILIATION_REQUIRED for good. A proposal that had ended before
// (ev.Ended: its original input, redelivered while the intent was lost,
// denied or given up) keeps its end either way (found by internal/sim,
// seed 10165).
func deny(rec kv.Intent, ev Event) (kv.Intent, Effects) {
	if !AwaitsRedispatch(rec, ev.Redispatch) {
		if e := ev.Ended; e != nil {
			return rec, Effects{Told: []schema.Outcome{EndedOutcome(rec, ev.Ref, *e)}}
		}
		return end(rec, ev)
	}
	phase, code := ev.Phase, ev.Code
	if ev.Ended == nil {
		rec.AddProposal(ev.Ref)
	} else {
		phase, code = ev.Ended.Phase, ev.Ended.Code
	}
	rec, fx := receipt(rec, ev, notSentAgain(), "dispatch")
	fx.Events = append(fx.Events, schema.NewIncident(phase, code))
	if ev.Ended != nil {
		fx.Told[0] = EndedOutcome(rec, ev.Ref, *ev.Ended)
	}
	return rec, fx
}

// end ends one proposal without dispatching it — a denial at the re-check,
// or a give-up — recorded before its outcome is published: on the intent's
// record, with its compare-and-set (a processor deciding the same proposal
// at the same moment loses and answers with this end), and for the
// proposal. It never binds the fingerprint: a later proposal of the same
// intent with a fresh grant is judged afresh.
func end(rec kv.Intent, ev Event) (kv.Intent, Effects) {
	e := kv.EndedProposal{Ref: ev.Ref, Ended: kv.Ended{Phase: ev.Phase, Code: ev.Code, AtMs: ev.NowMs}}
	rec.End(e)
	rec.UpdatedAtMs = ev.NowMs
	return rec, Effects{Changed: true, Ended: &e, Told: []schema.Outcome{EndedOutcome(rec, ev.Ref, e.Ended)}}
}

// finding records a reconciliation attempt's verdict: the new receipt
// linked to the previous one, the next poll or its end, the indeterminate
// index; then the outcome for every proposal.
func finding(rec kv.Intent, ev Event) (kv.Intent, Effects) {
	prev := rec.Receipt
	if prev == nil {
		return rec, refuse(ev, rec)
	}
	v := ev.Verdict
	link := &schema.ReceiptReconcileRef{AttemptID: ev.AttemptID, PreviousReceiptID: prev.ReceiptID}
	rc := Settle(&rec, v, AttemptStep(ev.AttemptID), link, nil, ev.NowMs)
	fx := Effects{Changed: true, Receipt: &rc, Verdict: &v, Events: v.Events}
	rec.ReconcileNextAtMs = 0
	if v.Settled || v.Exhausted {
		fx.CancelPoll = true
	} else {
		rec.ReconcileNextAtMs = ev.PollAtMs
		fx.Poll = &NextPoll{Attempt: ev.Attempt + 1, AtMs: rec.ReconcileNextAtMs}
	}
	fx.Indeterminate = IndexChange(prev, &rc)
	fx.Told = Outcomes(rec, ev.NowMs)
	return rec, fx
}

// operator settles an indeterminate effect (SPEC §3 Reconciliation,
// `processor reconcile resolve`). Only a record whose latest receipt is
// reconciliation_required can be settled, polling or exhausted: its
// pending poll is left to find the record settled. An absence observed
// before the dispatch's not_after_ms plus the clock skew
// (ev.AbsentAfterMs) is refused when the event says when it was observed,
// as reconciliation does not conclude it from the provider before then:
// the request may still arrive and be acted on. The receipt names the
// operator and the operator's attempt id (kv.OperatorAttemptID); the
// announcement, due now, is committed with it so that the outcome reaches
// every proposal even if the processor dies right after the commit.
func operator(rec kv.Intent, ev Event) (kv.Intent, Effects) {
	prev := rec.Receipt
	if prev == nil {
		return rec, Effects{Refused: ErrNoReceipt}
	}
	if prev.Status != schema.StatusReconciliationRequired {
		return rec, Effects{Refused: fmt.Errorf("%w: its latest receipt is %s", ErrNotIndeterminate, prev.Status)}
	}
	if ev.Examined != "" && ev.Examined != prev.ReceiptID {
		return rec, Effects{Refused: ErrSuperseded}
	}
	if after := ev.AbsentAfterMs; !ev.Present && ev.ObservedAtMs > 0 && min(ev.ObservedAtMs, ev.NowMs) <= after {
		// What reconciliation does not believe from the provider before
		// the fence it does not take from an operator either: the request
		// may still reach the provider (SPEC §4).
		return rec, Effects{Refused: fmt.Errorf("%w: %w until %s", ErrNotIndeterminate, ErrTooEarly,
			time.UnixMilli(after).UTC().Format(time.RFC3339Nano))}
	}
	v := OperatorVerdict(prev, ev.Present, ev.EvidenceRef)
	link := &schema.ReceiptReconcileRef{AttemptID: kv.OperatorAttemptID(rec.Fingerprint), PreviousReceiptID: prev.ReceiptID, Operator: ev.Operator}
	rc := Settle(&rec, v, OperatorStep, link, nil, ev.NowMs)
	rec.ReconcileNextAtMs = 0
	return rec, Effects{Changed: true, Receipt: &rc, Verdict: &v, Announce: true, Indeterminate: -1, Events: v.Events}
}
