package retention_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync/atomic"

	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/intent"
	"github.com/portcullis/portcullis/schema"
)

// clock is a settable Unix-ms clock for the store and the sweeper.
type clock struct{ ms atomic.Int64 }

func (c *clock) Now() int64       { return c.ms.Load() }
func (c *clock) Set(ms int64)     { c.ms.Store(ms) }
func (c *clock) Advance(ms int64) { c.ms.Add(ms) }
func newClock(ms int64) *clock    { c := &clock{}; c.Set(ms); return c }
func fingerprintOf(n int) string {
	h := sha256.Sum256(fmt.Appendf(nil, "intent-%d", n))
	return "sha256:" + hex.EncodeToString(h[:])
}
func refOf(n int) schema.ProposalRef {
	return schema.ProposalRef{Host: "frontdesk", ProposalID: fmt.Sprintf("prop-%09d", n)}
}

// proposal writes, at now, what the stages write for one proposal that is
// admitted, authorized, dispatched and confirmed — with the same key
// layout, record types and sizes, and the same durability as the stages
// (Sync for what a publish or a provider call depends on): admission's
// delivery and admission records, the approval decision, the in-flight
// journal record, the receipt and settled record, the last outcome. sync
// false commits everything NoSync (bulk filling a store for a benchmark).
func proposal(s *pebble.Store, n int, now int64, sync bool) error {
	d := pebble.NoSync
	if sync {
		d = pebble.Sync
	}
	ref, fp := refOf(n), fingerprintOf(n)
	b := s.NewBatch()
	b.PutAdmitted(ref, kv.Admitted{Digest: fp[7:], Seq: uint64(n), AtMs: now})
	b.PutDelivery(ref.Host, "delivery:"+ref.ProposalID, kv.Delivery{ProposalID: ref.ProposalID, Seq: uint64(n), AtMs: now})
	if err := b.Commit(d); err != nil {
		return err
	}
	ap := &kv.Approval{Host: ref.Host, ProposalID: ref.ProposalID, Fingerprint: fp, Referent: "sku-1001", Seq: uint64(n),
		State: kv.StatePermitted, ArrivedAtMs: now, DecidedBy: fmt.Sprintf("ACTIONS_AUTHORIZATION/%d", n), DecidedAtMs: now,
		Evaluations: []schema.PolicyEvaluation{{Layer: "grant", Outcome: "pass"}}}
	b = s.NewBatch()
	b.PutApproval(ref, ap, false, 0)
	if err := b.Commit(d); err != nil {
		return err
	}
	rec := stockIntent(fp, now)
	rec.AddProposal(ref)
	rec.State, rec.DispatchAttempts, rec.InFlightAtMs = kv.StateInFlight, 1, now
	if err := pebble.NewJournal(s).Commit(fp, kv.IntentWrites{Record: &rec}); err != nil {
		return err
	}
	rc := intent.Settle(&rec, kv.Verdict{Status: schema.StatusConfirmed, NextAction: schema.NextNone, Attempted: true,
		ProviderActionID: "inv:" + fp[7:23]}, "dispatch", nil, nil, now)
	if err := pebble.NewJournal(s).Commit(fp, kv.IntentWrites{Record: &rec, Receipt: &rc}); err != nil {
		return err
	}
	o := intent.Outcome(rec, ref, now)
	b = s.NewBatch()
	b.PutOutcome(o)
	return b.Commit(pebble.NoSync) // the runner flushes before the ack
}

// stockIntent is the intent record of the inventory fixture's stock
// adjustment of sku-1001 under fingerprint fp, new at now.
func stockIntent(fp string, now int64) kv.Intent {
	return kv.NewIntent(kv.Identity{
		Fingerprint:    fp,
		IdempotencyKey: fp[7:],
		Target: schema.Target{
			Provider:    "inventory",
			Capability:  "inventory.adjust",
			Operation:   "adjust_stock",
			Environment: "test",
			Referent:    "sku-1001",
		},
	}, "nats", now)
}
