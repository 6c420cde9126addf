// Package reconciliation is the stage after dispatch (SPEC §3
// Reconciliation): it verifies `acknowledged` receipts and reconciles
// `reconciliation_required` ones through the provider adapter's read-only
// Reconcile method, never by dispatching again. Each poll is one attempt
// with a stable attempt_id, checkpointed before the provider is asked, so
// that a replayed attempt is never asked twice; each result is a new
// receipt linked to the previous one and a new outcome for every proposal
// of the intent. What stays unknown after reconciliation.max_attempts is
// RECONCILE_EXHAUSTED, for an operator to settle with evidence
// (Stage.Resolve, `processor reconcile resolve`).
//
// step.go is the pure part: Step decides one trigger from the journal and
// the last reply; settle.go's Settle decides an operator's settlement;
// verdict.go maps answers to verdicts. stage.go locks, loads, steps,
// commits, calls and steps again.
package reconciliation

import (
	"time"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/intent"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
)

// MaxBackoffFactor caps the wait between polls at this many intervals.
const MaxBackoffFactor = 32

// Backoff is the wait before poll n (n ≥ 1): interval·2^(n-1), at most
// MaxBackoffFactor·interval. Dispatch schedules poll 1 one interval after
// its receipt.
func Backoff(interval time.Duration, n int) time.Duration {
	return stages.Backoff(interval, MaxBackoffFactor*interval, n)
}

// Facts are what one step decides from.
type Facts struct {
	Trigger kv.Trigger
	Record  kv.Intent
	Found   bool
	// Checkpoint is the attempt's checkpoint when Trigger.Attempt is the
	// record's current attempt; CheckpointFound whether it exists.
	Checkpoint      kv.Attempt
	CheckpointFound bool
	// Previous is the checkpoint of the record's current attempt when
	// Trigger.Attempt is the next one (PreviousFound whether it exists).
	Previous      kv.Attempt
	PreviousFound bool
	Now           int64
	// MayQuery is false when the runner gave up on the trigger: record the
	// attempt without asking the provider.
	MayQuery bool
	// After CallReconcile: the provider's answer.
	Queried bool
	Reply   schema.AdapterReply
	CallErr error
	// After ReadHeld: the intent's held envelope (nil: none is held).
	HeldRead bool
	Held     []byte
}

// Rules are what every step decides with.
type Rules struct {
	Interval    time.Duration
	MaxAttempts int
	// ClockSkew is approval.clock_skew: how far apart the clocks of
	// processors and connectors may be. Absence is not concluded before a
	// dispatch's not_after_ms plus it has passed (AbsentAfter).
	ClockSkew time.Duration
	// PollSubject is this stage's timer subject for a fingerprint's hex.
	PollSubject func(hex string) string
	// HeldWait is how long after a lost dispatch began its envelope may
	// still be missing from the held stream (0: DefaultHeldWait): dispatch
	// keeps it after committing the receipt, and a crash between the two
	// leaves it to the redelivery of dispatch's input (dispatch.Step keeps
	// it again). Until then a request found lost is not concluded.
	HeldWait time.Duration
}

// DefaultHeldWait is Rules.HeldWait's default: many times the runner's ack
// wait, after which dispatch's input has been redelivered unless the
// processors were down.
const DefaultHeldWait = 2 * time.Minute

func (r Rules) heldWait() time.Duration {
	if r.HeldWait > 0 {
		return r.HeldWait
	}
	return DefaultHeldWait
}

// Decision is what the shell does for one step, in this order: commit
// Writes (Sync), make the reconcile call if Call, or else publish Outcomes
// and Events and refresh the activity snapshot (when Activity).
type Decision struct {
	Writes   kv.IntentWrites
	Call     bool
	Outcomes []schema.Outcome
	Events   []schema.Incident
	Activity bool
	// Finding is the attempt's verdict when Writes holds its receipt.
	Finding *Finding
	// Note is a value-free reason when the step does nothing (an error
	// when Alarm).
	Note  string
	Alarm bool
	// Retry > 0 asks to see the trigger again after this wait: it came
	// before the journal step that armed it was recorded (a shared
	// journal arms a timer before its commit).
	Retry time.Duration
	// ReadHeld asks the shell to read the intent's held envelope (the one
	// its dispatch kept, the subjects' Held) and to step again.
	ReadHeld bool
	// Redispatch is the held envelope to hand to dispatch again: the
	// request was lost in flight (see Lost).
	Redispatch []byte
	// Redispatches is the number of the intent's reopening Redispatch
	// belongs to: its hand-off's message id is kv.RedispatchID's for it,
	// the same when a redelivery hands it on again (a duplicate then), and
	// dispatch recognizes the redispatch by it.
	Redispatches int
}

// Step decides one trigger: an announcement republishes the latest
// outcome; poll n asks the provider once (checkpoint first), records an
// attempt found started and never finished without asking again, and
// ignores stale or settled triggers.
//
// On a shared journal a poll is armed before the commit it belongs to, so
// it can arrive before that commit is visible — or without it ever
// happening (the commit lost its compare-and-set, or its processor died
// and the step's redelivery commits and arms it again). A poll that comes
// while the dispatch is still in flight, or while the attempt before it is
// unfinished, is seen again later instead of being dropped or starting a
// second attempt beside the first. Neither happens on a single node, where
// a timer is committed with its step.
func Step(f Facts, r Rules) Decision {
	rec := f.Record
	if f.Found && rec.State == kv.StateLost {
		return stepLost(f)
	}
	if !f.Found || rec.Receipt == nil {
		if f.Found && rec.State == kv.StateInFlight && !f.Trigger.Announce {
			return Decision{Note: "dispatch not recorded yet", Retry: r.early(rec, f.Now)}
		}
		return Decision{Note: "trigger for a fingerprint without a receipt"}
	}
	if f.Trigger.Announce {
		if rec.Resolution != kv.ResolvedByOperator {
			// Only an operator's settlement is announced, and it is not
			// recorded yet (or its commit lost to a poll that settled the
			// effect first: the retries end, the poll's outcome stands).
			return Decision{Note: "settlement not recorded yet", Retry: r.early(rec, f.Now)}
		}
		var events []schema.Incident
		if rc := rec.Receipt; rec.Resolution == kv.ResolvedByOperator && rc.Reconciliation != nil &&
			rc.Reconciliation.AttemptID == kv.OperatorAttemptID(rec.Fingerprint) {
			events = []schema.Incident{schema.NewIncident(schema.PhaseReconciliation, schema.CodeOperatorResolved)}
		}
		return Decision{Outcomes: intent.Outcomes(rec, f.Now), Events: events, Activity: true}
	}
	n := f.Trigger.Attempt
	id := kv.AttemptID(rec.Fingerprint, n)
	switch {
	case n == rec.ReconcileAttempt && finished(rec, f.Checkpoint, f.CheckpointFound, id):
		// Finished: its receipt is on disk. If it is still the latest, its
		// outcomes may not have gone out (a crash before the ack).
		if latest(rec, id) {
			return Decision{Outcomes: intent.Outcomes(rec, f.Now), Activity: true}
		}
		return Decision{Note: "attempt finished before"}
	case n == rec.ReconcileAttempt && !rec.NeedsWork():
		return Decision{Note: "settled"}
	case n == rec.ReconcileAttempt && !f.Queried:
		// Started and never finished: the processor stopped while the
		// provider was being asked. Never ask again for this attempt.
		cp := f.Checkpoint
		if !f.CheckpointFound {
			cp = kv.Attempt{AttemptID: id, Number: n, StartedAtMs: f.Now}
		}
		return finish(f, rec, cp, Replayed(rec.Receipt, n, r.MaxAttempts), r)
	case n == rec.ReconcileAttempt+1 && rec.NeedsWork() && rec.ReconcileAttempt > 0 &&
		!finished(rec, f.Previous, f.PreviousFound, kv.AttemptID(rec.Fingerprint, rec.ReconcileAttempt)):
		// Armed by the attempt before, whose result is not recorded yet.
		return Decision{Note: "previous attempt unfinished", Retry: r.early(rec, f.Now)}
	case n == rec.ReconcileAttempt+1 && rec.NeedsWork() && f.Queried:
		return Decision{Note: "queried already"} // never twice; unreachable by construction
	case n == rec.ReconcileAttempt+1 && rec.NeedsWork():
		cp := kv.Attempt{AttemptID: id, Number: n, StartedAtMs: f.Now}
		rec, _ = intent.Apply(rec, intent.Event{Kind: intent.Poll, NowMs: f.Now, Attempt: n})
		if !f.MayQuery {
			return finish(f, rec, cp, Abandoned(rec.Receipt, n, r.MaxAttempts), r)
		}
		return Decision{Writes: kv.IntentWrites{Attempt: &cp, Record: &rec}, Call: true}
	case n == rec.ReconcileAttempt && f.Queried:
		cp := f.Checkpoint
		answered := n - rec.UnansweredPolls
		v := Decide(rec.Receipt, f.Reply, f.CallErr, answered, r.MaxAttempts)
		if v.AttemptStatus == metrics.AttemptUnavailable {
			// Nobody received the question (the connector is away, its
			// server restarting): not an answer, so never the last one —
			// an outage never ends a proposal (SPEC §6).
			v = Decide(rec.Receipt, f.Reply, f.CallErr, answered, answered+1)
			rec.UnansweredPolls++
		}
		// Absence is judged by when the question was asked, not when the
		// answer was read: an answer given before the fence is not believed
		// however late it is read (the request may still have arrived
		// after it; found by the simulation, internal/sim).
		asked := f.Now
		if f.CheckpointFound && cp.StartedAtMs > 0 {
			asked = min(asked, cp.StartedAtMs)
		}
		if after := r.AbsentAfter(rec); Absent(v) && !Verifying(rec.Receipt) && asked <= after {
			v = Early(rec.Receipt, f.Reply, n, after+1)
		}
		if Lost(v, rec) {
			switch {
			case !f.HeldRead:
				return Decision{ReadHeld: true}
			case f.Held != nil:
				return redispatch(f, rec, cp, v)
			case f.Now <= rec.InFlightAtMs+r.heldWait().Milliseconds():
				// Not kept yet: the dispatch that found the effect unknown
				// stopped between its receipt and keeping the envelope,
				// and its input's redelivery keeps it. Concluding now
				// would end the proposal for a crash (SPEC §6).
				v = Early(rec.Receipt, f.Reply, n, f.Now+r.early(rec, f.Now).Milliseconds())
			default:
				// The envelope is gone (its stream's max_age): the
				// finding stands.
			}
		}
		return finish(f, rec, cp, v, r)
	}
	return Decision{Note: "stale trigger"}
}

// Lost reports whether verdict v, about rec's reconciliation receipt, finds
// the dispatch's request lost in flight: the provider says it never
// received it (failed_before_dispatch), believed only after the request's
// not_after_ms and the clock skew (an earlier answer is Early), and the
// dispatch had no answer (record.LostInFlight: a timeout, a transport
// error, an interruption). Nothing can act on that request any more, so
// the intent is dispatched again instead of ending FAILED_BEFORE_DISPATCH:
// an outage never ends a proposal (SPEC §6).
func Lost(v Finding, rec kv.Intent) bool {
	return v.Settled && v.Status == schema.StatusFailedBeforeDispatch && v.Resolution == kv.ResolvedByProvider &&
		!Verifying(rec.Receipt) && intent.LostInFlight(rec)
}

// redispatch records attempt cp's finding — the request was lost — and
// reopens the intent for dispatch (intent.Reopen): no receipt (the
// latest stays in the history), polling stops, the intent leaves the
// indeterminate index, and the held envelope goes back to dispatch.
func redispatch(f Facts, rec kv.Intent, cp kv.Attempt, v Finding) Decision {
	cp.Status, cp.FinishedAtMs = v.AttemptStatus, f.Now
	rec, fx := intent.Apply(rec, intent.Event{Kind: intent.Reopen, NowMs: f.Now})
	w := kv.IntentWrites{Record: &rec, Attempt: &cp, CancelTimer: fx.CancelPoll, Indeterminate: fx.Indeterminate, SinceMs: f.Now}
	return Decision{Writes: w, Redispatch: f.Held, Redispatches: fx.Redispatch, Activity: true, Note: "request lost in flight: dispatched again"}
}

// stepLost decides a trigger of an intent reconciliation reopened: the
// poll that found the request lost hands the held envelope to dispatch
// again (its hand-off may not have gone out before a crash: the same
// message id makes a second one a duplicate); any other trigger is stale.
func stepLost(f Facts) Decision {
	if f.Trigger.Announce || f.Trigger.Attempt != f.Record.ReconcileAttempt {
		return Decision{Note: "stale trigger of a reopened intent"}
	}
	if !f.HeldRead {
		return Decision{ReadHeld: true}
	}
	if f.Held == nil {
		return Decision{Note: "reopened intent without its envelope", Alarm: true}
	}
	return Decision{Redispatch: f.Held, Redispatches: f.Record.Redispatches, Note: "request lost in flight: dispatched again"}
}

// AbsentAfter is the moment after which reconciliation may conclude that
// rec's dispatch had no effect (SPEC §4): the not_after_ms of its last
// request — no connector acts on the request after it — plus the clock
// skew between the connector's clock and this processor's. Before it, the
// request may still be on its way to a connector, or acted on by one whose
// clock is behind, so a provider that finds nothing is not yet believed.
// 0 for a record without a lease (written before leases existed).
func (r Rules) AbsentAfter(rec kv.Intent) int64 {
	if rec.InFlightUntilMs <= 0 {
		return 0
	}
	return rec.InFlightUntilMs + r.ClockSkew.Milliseconds()
}

// finished reports whether attempt id's result is recorded: its checkpoint
// says so, or the record's latest receipt is its (on a shared journal the
// record is committed first and the checkpoint after it).
func finished(rec kv.Intent, cp kv.Attempt, found bool, id string) bool {
	return (found && cp.Status != "") || latest(rec, id)
}

// latest reports whether the record's latest receipt is attempt id's.
func latest(rec kv.Intent, id string) bool {
	rc := rec.Receipt
	return rc != nil && rc.Reconciliation != nil && rc.Reconciliation.AttemptID == id
}

// early is the wait before looking again at a trigger that came before
// the journal step that armed it was recorded: a quarter of the time the
// record has stood still, at least one interval (between 250ms and 5s),
// at most 30s. The step it waits for may take long to be recorded — a
// commit whose outcome was unknown during an outage is learned only when
// its input is redelivered — so the waits grow, and the runner's bounded
// retries cover many minutes, not a few seconds.
func (r Rules) early(rec kv.Intent, nowMs int64) time.Duration {
	base := min(max(r.Interval, 250*time.Millisecond), 5*time.Second)
	still := time.Duration(nowMs-rec.UpdatedAtMs) * time.Millisecond
	return min(max(still/4, base), 30*time.Second)
}

// finish records an attempt's verdict (intent.Finding): the attempt
// finished, the new receipt linked to the previous one, the next poll or
// its end, and the indeterminate index; then the outcome for every
// proposal.
func finish(f Facts, rec kv.Intent, cp kv.Attempt, v Finding, r Rules) Decision {
	rec, fx := intent.Apply(rec, intent.Event{Kind: intent.Finding, NowMs: f.Now, Verdict: v.Verdict,
		Attempt: cp.Number, AttemptID: cp.AttemptID,
		PollAtMs: max(f.Now+Backoff(r.Interval, cp.Number+1).Milliseconds(), v.NotBeforeMs)})
	cp.Status, cp.FinishedAtMs = v.AttemptStatus, f.Now
	w := kv.IntentWrites{Record: &rec, Receipt: fx.Receipt, Attempt: &cp, CancelTimer: fx.CancelPoll}
	if p := fx.Poll; p != nil {
		t := kv.PollTimer(r.PollSubject(kv.Hex(rec.Fingerprint)), rec.Fingerprint, p.Attempt, p.AtMs)
		w.Timer = &t
	}
	w.Indeterminate, w.SinceMs = fx.Indeterminate, f.Now
	return Decision{Writes: w, Outcomes: fx.Told, Events: fx.Events, Activity: true, Finding: &v}
}

// AttemptStep is the receipt step of attempt attemptID (ReceiptID's input).
func AttemptStep(attemptID string) string { return intent.AttemptStep(attemptID) }

// OperatorStep is the receipt step of the operator's settlement.
const OperatorStep = intent.OperatorStep

// IndexChange says how the indeterminate index (and the gauge) change when
// next supersedes prev (intent.IndexChange).
func IndexChange(prev, next *schema.Receipt) int { return intent.IndexChange(prev, next) }
