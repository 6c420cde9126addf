package reconciliation_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/reconciliation"
)

// TestSettle: an operator's settlement, decided alone — what it refuses,
// and what it writes for each finding on a record still polling or
// exhausted.
func TestSettle(t *testing.T) {
	rc := schema.StatusReconciliationRequired
	exhausted := waiting(rc, 3)
	exhausted.ReconcileExhausted = true
	polling := waiting(rc, 1)
	polling.ReconcileNextAtMs = 4000
	// leased: its dispatch's request expires at 6000 (not_after_ms); the
	// clocks may be skew apart.
	leased := waiting(rc, 1)
	leased.InFlightUntilMs = 6000
	facts := func(rec kv.Intent, present bool) reconciliation.SettleFacts {
		return reconciliation.SettleFacts{Fingerprint: fpA, Record: rec, Found: true, Present: present,
			EvidenceRef: "ticket:OPS-1", Operator: "alice", Now: 7000}
	}
	for _, c := range []struct {
		name   string
		f      reconciliation.SettleFacts
		refuse error
		status schema.Status
		kind   schema.Kind
	}{
		{name: "no record", f: reconciliation.SettleFacts{Fingerprint: fpA, Present: true, EvidenceRef: "ticket:1", Now: 7000}, refuse: reconciliation.ErrNotFound},
		{name: "a record without a receipt (in flight, or reopened for dispatch)", f: facts(inFlight(), true), refuse: reconciliation.ErrNotFound},
		{name: "confirmed already", f: facts(waiting(schema.StatusConfirmed, 1), false), refuse: reconciliation.ErrNotIndeterminate},
		{name: "acknowledged: verification is not indeterminate", f: facts(waiting(schema.StatusAcknowledged, 1), true), refuse: reconciliation.ErrNotIndeterminate},
		{name: "settled by an operator before", f: facts(settledByOperator(), true), refuse: reconciliation.ErrNotIndeterminate},
		{name: "another receipt than the one examined", f: examined(facts(polling, false), kv.ReceiptID(fpA, "interrupted")), refuse: reconciliation.ErrSuperseded},
		{name: "the receipt examined", f: examined(facts(polling, false), polling.Receipt.ReceiptID), status: schema.StatusRejected, kind: schema.KindRejected},
		{name: "present while polling", f: facts(polling, true), status: schema.StatusConfirmed, kind: schema.KindConfirmed},
		{name: "absent while polling", f: facts(polling, false), status: schema.StatusRejected, kind: schema.KindRejected},
		{name: "absent, observed before the request expired", f: observed(at(facts(leased, false), 6000), 6000), refuse: reconciliation.ErrTooEarly},
		{name: "absent, observed at the fence", f: observed(at(facts(leased, false), 6000+skew), 6000+skew), refuse: reconciliation.ErrNotIndeterminate},
		{name: "absent, observed after the fence", f: observed(at(facts(leased, false), 6001+skew), 6001+skew), status: schema.StatusRejected, kind: schema.KindRejected},
		{name: "absent, observed before the fence, sent after it", f: observed(at(facts(leased, false), 9000), 6500), refuse: reconciliation.ErrTooEarly},
		{name: "absent before the fence, not said when observed (Resolve today)", f: at(facts(leased, false), 6000), status: schema.StatusRejected, kind: schema.KindRejected},
		{name: "present, observed before the request expired", f: observed(at(facts(leased, true), 5000), 5000), status: schema.StatusConfirmed, kind: schema.KindConfirmed},
		{name: "present once exhausted", f: facts(exhausted, true), status: schema.StatusConfirmed, kind: schema.KindConfirmed},
		{name: "absent once exhausted", f: facts(exhausted, false), status: schema.StatusRejected, kind: schema.KindRejected},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := rules()
			rs.ClockSkew = skew * time.Millisecond
			s := reconciliation.Settle(c.f, rs)
			if c.refuse != nil {
				if !errors.Is(s.Refused, c.refuse) || !s.Writes.Empty() {
					t.Fatalf("settlement = %+v; want refused with %v, nothing written", s, c.refuse)
				}
				return
			}
			if s.Refused != nil {
				t.Fatalf("refused: %v", s.Refused)
			}
			w, prev := s.Writes, c.f.Record.Receipt
			rec, r := w.Record, w.Receipt
			if rec == nil || r == nil || w.Attempt != nil || w.CancelTimer || w.Ended != nil {
				t.Fatalf("writes = %+v; want the record, its receipt and the announce timer", w)
			}
			if r.Status != c.status || r.NextAction != schema.NextNone || r.ErrorCode != string(schema.CodeOperatorResolved) ||
				!slices.Equal(r.EvidenceRefs, []string{"ticket:OPS-1"}) || (c.status == schema.StatusConfirmed && !r.DispatchAttempted) ||
				r.RecordedAtMs != c.f.Now || r.ReceiptID != kv.ReceiptID(fpA, reconciliation.OperatorStep) {
				t.Errorf("receipt = %+v", r)
			}
			if l := r.Reconciliation; l == nil || l.AttemptID != kv.OperatorAttemptID(fpA) || l.PreviousReceiptID != prev.ReceiptID || l.Operator != "alice" {
				t.Errorf("link = %+v; want the operator's attempt id, the previous receipt and the operator", l)
			}
			if rec.Resolution != kv.ResolvedByOperator || rec.Latest.Kind != c.kind || !rec.Latest.Terminal || rec.ReconcileNextAtMs != 0 ||
				rec.ReceiptSeq != c.f.Record.ReceiptSeq+1 || rec.Receipt == nil || rec.Receipt.ReceiptID != r.ReceiptID || rec.NeedsWork() {
				t.Errorf("record = %+v", rec)
			}
			want := kv.AnnounceTimer("t."+kv.Hex(fpA), fpA, reconciliation.OperatorStep, c.f.Now)
			if tm := w.Timer; tm == nil || tm.ID != want.ID || tm.MsgID != want.MsgID || tm.DueMs != c.f.Now || tm.Subject != want.Subject || string(tm.Data) != string(want.Data) {
				t.Errorf("timer = %+v; want the announcement due now, %+v", w.Timer, want)
			}
			if w.Indeterminate != -1 {
				t.Errorf("indeterminate index change %d; want -1", w.Indeterminate)
			}
			if c.f.Record.Receipt.ReceiptID != prev.ReceiptID || c.f.Record.Resolution != "" {
				t.Error("Settle changed the facts' record")
			}
		})
	}
}

// settledByOperator is a record an operator settled (CONFIRMED).
func settledByOperator() kv.Intent {
	rec := waiting(schema.StatusReconciliationRequired, 3)
	s := reconciliation.Settle(reconciliation.SettleFacts{Fingerprint: fpA, Record: rec, Found: true, Present: true,
		EvidenceRef: "ticket:0", Now: 6000}, rules())
	return *s.Writes.Record
}

const skew = 2000 // ms

func at(f reconciliation.SettleFacts, nowMs int64) reconciliation.SettleFacts {
	f.Now = nowMs
	return f
}

func observed(f reconciliation.SettleFacts, atMs int64) reconciliation.SettleFacts {
	f.ObservedAtMs = atMs
	return f
}

func examined(f reconciliation.SettleFacts, receiptID string) reconciliation.SettleFacts {
	f.Examined = receiptID
	return f
}
