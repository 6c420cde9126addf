package reconciliation

import (
	"fmt"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
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
	// for dispatch) or ErrNotIndeterminate (the latest receipt is not
	// reconciliation_required).
	Refused error
}

// Settle decides an operator's settlement of an indeterminate effect
// (SPEC §3 Reconciliation, `processor reconcile resolve`). Only a record
// whose latest receipt is reconciliation_required can be settled, polling
// or exhausted: its pending poll is left to find the record settled. The
// receipt names the operator and the operator's attempt id
// (kv.OperatorAttemptID); the announce timer, due now, is committed with
// it so that the outcome reaches every proposal even if the processor
// dies right after the commit (Step announces it). On a shared journal
// the shell compares the record it loaded: a settlement never lands over
// a poll or a dispatch that changed the record since (kv.ErrConflict:
// load again and settle again, or be refused).
func Settle(f SettleFacts, r Rules) Settlement {
	rec := f.Record
	if !f.Found || rec.Receipt == nil {
		return Settlement{Refused: ErrNotFound}
	}
	prev := rec.Receipt
	if prev.Status != schema.StatusReconciliationRequired {
		return Settlement{Refused: fmt.Errorf("%w: its latest receipt is %s", ErrNotIndeterminate, prev.Status)}
	}
	v := Operator(prev, f.Present, f.EvidenceRef, f.Operator)
	link := &schema.ReceiptReconcileRef{AttemptID: kv.OperatorAttemptID(f.Fingerprint), PreviousReceiptID: prev.ReceiptID, Operator: f.Operator}
	rc := rec.Settle(v.Verdict, OperatorStep, link, nil, f.Now)
	rec.ReconcileNextAtMs = 0
	t := kv.AnnounceTimer(r.PollSubject(kv.Hex(f.Fingerprint)), f.Fingerprint, OperatorStep, f.Now)
	return Settlement{Writes: kv.IntentWrites{Record: &rec, Receipt: &rc, Timer: &t, Indeterminate: -1}}
}
