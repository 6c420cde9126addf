package reconciliation

import (
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/intent"
)

// SettleFacts are what an operator's settlement decides from: the
// fingerprint's record as loaded under its lock, and the operator's
// finding (validated by the shell: a fingerprint, one evidence reference).
type SettleFacts struct {
	Fingerprint string
	Record      kv.Intent
	Found       bool
	// Present is the operator's finding: the effect exists (CONFIRMED) or
	// not (REJECTED).
	Present     bool
	EvidenceRef string
	// Examined is the receipt id the operator examined (the one `processor
	// reconcile list` showed): the finding is about that dispatch, and is
	// refused (ErrSuperseded) when the latest receipt is another — the
	// intent may have been dispatched again meanwhile (reconciliation's
	// "lost in flight"), and a finding about an earlier dispatch says
	// nothing of the later one (found by the simulation, internal/sim).
	// "": whichever receipt is the latest (a command without --receipt).
	Examined string
	// ObservedAtMs is when the operator looked at the provider: an
	// absence observed before the dispatch's request expired (not_after_ms
	// plus the clock skew, Rules.AbsentAfter) is refused (ErrTooEarly),
	// however late it is sent, as Step does not believe the provider's own
	// absence before then (found by the simulation, internal/sim). 0: not
	// given (a command without --observed-at), and the finding is not held
	// to the fence (internal/sim's finding 5).
	ObservedAtMs int64
	// Operator is the configured name of the operator who signed the
	// request ("" for an unsigned one, accepted only in development).
	Operator string
	Now      int64
}

// Settlement is what one settlement step decides: Writes to commit
// (Sync) — the record, its receipt linked to the previous one, the
// announce timer and the indeterminate index — or Refused, and then
// nothing is written.
type Settlement struct {
	Writes kv.IntentWrites
	// Refused is ErrNotFound (no receipt: none yet, or an intent reopened
	// for dispatch), ErrNotIndeterminate (the latest receipt is not
	// reconciliation_required; wrapping ErrTooEarly for an absence
	// observed before the dispatch's request expired) or ErrSuperseded (it
	// is not the one examined).
	Refused error
}

// Settle decides an operator's settlement of an indeterminate effect
// (SPEC §3 Reconciliation, `processor reconcile resolve`): the intent's
// Operator event (intent.Apply), and the announce timer it arms. Only a record
// whose latest receipt is reconciliation_required can be settled, polling
// or exhausted: its pending poll is left to find the record settled. An
// absence observed before the dispatch's not_after_ms plus the clock skew
// (Rules.AbsentAfter) is refused when the facts say when it was observed,
// as reconciliation does not conclude it from the provider before then:
// the request may still arrive and be acted on. The
// receipt names the operator and the operator's attempt id
// (kv.OperatorAttemptID); the announce timer, due now, is committed with
// it so that the outcome reaches every proposal even if the processor
// dies right after the commit (Step announces it). On a shared journal
// the shell compares the record it loaded: a settlement never lands over
// a poll or a dispatch that changed the record since (kv.ErrConflict:
// load again and settle again, or be refused).
func Settle(f SettleFacts, r Rules) Settlement {
	if !f.Found {
		return Settlement{Refused: ErrNotFound}
	}
	rec, fx := intent.Apply(f.Record, intent.Event{Kind: intent.Operator, NowMs: f.Now, Present: f.Present,
		EvidenceRef: f.EvidenceRef, Operator: f.Operator, Examined: f.Examined, ObservedAtMs: f.ObservedAtMs,
		AbsentAfterMs: r.AbsentAfter(f.Record)})
	if fx.Refused != nil {
		return Settlement{Refused: fx.Refused}
	}
	t := kv.AnnounceTimer(r.PollSubject(kv.Hex(f.Fingerprint)), f.Fingerprint, OperatorStep, f.Now)
	return Settlement{Writes: kv.IntentWrites{Record: &rec, Receipt: fx.Receipt, Timer: &t, Indeterminate: fx.Indeterminate}}
}
