package sim

import (
	"errors"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/stages/reconciliation"
)

// ---- reconciliation: Stage.Resolve, the operator's command ----

// resolveLoad is Resolve's load under the lock.
func (t *task) resolveLoad() {
	w, o := t.w, t.w.op
	rec, found, err := t.p.store.Load(fp)
	if err != nil {
		t.resolveEnd(err)
		return
	}
	if w.cfg.Bug == BugSettleStale {
		rec, found = o.looked, true // planted: the record as the operator saw it, not as loaded
	}
	t.sf = reconciliation.SettleFacts{Fingerprint: fp, Record: rec, Found: found, Present: o.present,
		EvidenceRef: "ticket:sim-ops", Operator: "ops", Now: t.now()}
	if !w.cfg.UnboundOperator {
		// The operator's clock is the serving processor's here (both
		// within approval.clock_skew of the provider's).
		t.sf.Examined, t.sf.ObservedAtMs = o.looked.Receipt.ReceiptID, o.lookedAt+t.p.skew
	}
	t.next("resolve settle", t.resolveSettle)
}

// resolveSettle is Resolve's step and commit (on a conflict: load again).
func (t *task) resolveSettle() {
	w, f := t.w, t.sf
	s := reconciliation.Settle(f, reconcileRules())
	if s.Refused != nil {
		t.resolveEnd(s.Refused)
		return
	}
	if w.cfg.Bug == BugSettleNoAnnounce {
		s.Writes.Timer = nil // planted: the settlement without its announcement
	}
	err := t.p.store.Commit(fp, s.Writes)
	w.armed()
	switch {
	case errors.Is(err, kv.ErrConflict) && t.conflicts < maxConflicts:
		t.conflicts++
		w.tracef("p%d resolve: conflict, reload", t.p.id)
		t.next("resolve reload", t.resolveLoad)
		return
	case err != nil:
		t.resolveEnd(err)
		return
	}
	rec, rc := s.Writes.Record, s.Writes.Receipt
	w.settlements = append(w.settlements, settlement{at: w.now, lookedAt: w.op.lookedAt,
		receiptID: rc.ReceiptID, kind: rec.Latest.Kind, absentAt: reconcileRules().AbsentAfter(w.op.looked),
		examined: f.Record.Receipt.ReceiptID == w.op.looked.Receipt.ReceiptID})
	w.tracef("p%d resolve: committed %s (%s)", t.p.id, rc.Status, rc.ReceiptID[:12])
	t.next("resolve answer", func() { t.resolveEnd(nil) })
}

// resolveEnd unlocks and answers the operator.
func (t *task) resolveEnd(err error) {
	if t.unlock != nil {
		t.unlock()
		t.unlock = nil
	}
	t.w.operatorAnswer(err)
}
