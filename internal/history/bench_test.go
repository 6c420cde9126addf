package history

import (
	"fmt"
	"testing"
	"time"

	"github.com/portcullis/portcullis/schema"
)

// synthetic is a good history of n intents the size of a long soak's:
// each proposed, dispatched without an answer, reconciled, confirmed,
// its receipts read twice and its activity once.
func synthetic(n int) History {
	r := NewRecorder()
	for i := range n {
		k := fmt.Sprintf("%064x", i)
		fp := "sha256:" + k
		id := fmt.Sprintf("p-%04d", i)
		base := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		tick := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
		r.Add(Event{Op: OpPropose, Proposal: ref(id), Call: tick(0), Return: tick(1)})
		r.Add(Event{Op: OpDispatch, Key: k, Effect: true, Call: tick(5)})
		d := &schema.Receipt{ReceiptID: "rd" + id, IdempotencyKey: k, Status: schema.StatusReconciliationRequired, RecordedAtMs: tick(6).UnixMilli()}
		r.Add(Event{Op: OpOutcome, Proposal: ref(id), Call: tick(7), Return: tick(7), Outcome: &schema.Outcome{ProposalID: id, Host: "frontdesk",
			Kind: schema.KindReconciliationRequired, EffectTruth: schema.TruthIndeterminate, Fingerprint: &fp, Receipt: d}})
		r.Add(Event{Op: OpReadReceipts, Key: k, Call: tick(8), Return: tick(9), Receipts: []string{"rd" + id}, Statuses: []schema.Status{d.Status}})
		r.Add(Event{Op: OpReconcile, Key: k, Attempt: "rcn_" + id, Call: tick(10)})
		c := &schema.Receipt{ReceiptID: "rc" + id, IdempotencyKey: k, Status: schema.StatusConfirmed, RecordedAtMs: tick(11).UnixMilli(),
			Reconciliation: &schema.ReceiptReconcileRef{AttemptID: "rcn_" + id, PreviousReceiptID: "rd" + id}}
		r.Add(Event{Op: OpOutcome, Proposal: ref(id), Call: tick(12), Return: tick(12), Outcome: &schema.Outcome{ProposalID: id, Host: "frontdesk",
			Kind: schema.KindConfirmed, Terminal: true, EffectTruth: schema.TruthPresent, Fingerprint: &fp, Receipt: c}})
		r.Add(Event{Op: OpReadActivity, Key: k, Call: tick(13), Return: tick(14), Status: string(schema.StatusReconciliationRequired)})
		r.Add(Event{Op: OpReadReceipts, Key: k, Call: tick(15), Return: tick(16), Receipts: []string{"rd" + id, "rc" + id},
			Statuses: []schema.Status{d.Status, c.Status}})
	}
	return r.History()
}

func TestSyntheticHistoryIsGood(t *testing.T) {
	if bad, _ := Check(synthetic(50), Options{Ended: true}); len(bad) > 0 {
		t.Fatal(bad)
	}
}

// The check of a long soak's history (1,000 proposals: 9,000 events).
func BenchmarkCheck1000(b *testing.B) {
	h := synthetic(1000)
	b.ResetTimer()
	for b.Loop() {
		if bad, _ := Check(h, Options{Ended: true}); len(bad) > 0 {
			b.Fatal(bad)
		}
	}
}
