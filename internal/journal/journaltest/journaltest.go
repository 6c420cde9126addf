// Package journaltest is the conformance suite every journal.Store backend
// passes: the single-node Pebble journal and any replicated one.
package journaltest

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/journal"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// Run checks a Store made fresh by open for each subtest.
func Run(t *testing.T, open func(t *testing.T) journal.Store) {
	fp := "sha256:" + strings.Repeat("ab", 32)
	other := "sha256:" + strings.Repeat("cd", 32)
	id := journal.Identity{Fingerprint: fp, IdempotencyKey: journal.Hex(fp), Provider: "demo", Capability: "inventory.adjust",
		Operation: "adjust_stock", Environment: "test", Referent: "sku-1"}

	t.Run("empty", func(t *testing.T) {
		s := open(t)
		if _, found, err := s.Load(fp); found || err != nil {
			t.Fatalf("Load of nothing: %v %v", found, err)
		}
		if _, found, err := s.Attempt(fp, "rcn_x_1"); found || err != nil {
			t.Fatalf("Attempt of nothing: %v %v", found, err)
		}
		if rs, err := s.Receipts(fp); len(rs) != 0 || err != nil {
			t.Fatalf("Receipts of nothing: %v %v", rs, err)
		}
		if _, _, err := s.Load("sha256:xyz"); err == nil {
			t.Error("Load accepted a malformed fingerprint")
		}
	})

	t.Run("commit and read back", func(t *testing.T) {
		s := open(t)
		rec := journal.New(id, "fake", 100)
		rec.AddProposal(schema.ProposalRef{Host: "h", ProposalID: "p1"})
		rec.AddProposal(schema.ProposalRef{Host: "h", ProposalID: "p1"})
		rec.State, rec.DispatchAttempts, rec.InFlightAtMs = journal.StateInFlight, 1, 100
		if err := s.Commit(fp, journal.Writes{Record: &rec}); err != nil {
			t.Fatal(err)
		}
		got, found, err := s.Load(fp)
		if err != nil || !found || got.State != journal.StateInFlight || len(got.Proposals) != 1 || got.Identity != id {
			t.Fatalf("Load = %+v %v %v", got, found, err)
		}
		// Two receipts, each appended with the record that numbers it.
		for i, status := range []schema.Status{schema.StatusReconciliationRequired, schema.StatusConfirmed} {
			rc := got.Settle(journal.Verdict{Status: status, NextAction: schema.NextNone, Attempted: true}, "step"+string(rune('a'+i)), nil, nil, 200)
			cp := journal.Attempt{AttemptID: journal.AttemptID(fp, i+1), Number: i + 1, StartedAtMs: 200}
			w := journal.Writes{Record: &got, Receipt: &rc, Attempt: &cp, Indeterminate: 1 - 2*i, SinceMs: 200}
			if err := s.Commit(fp, w); err != nil {
				t.Fatal(err)
			}
			idx, err := s.Indeterminates()
			if err != nil || (i == 0) != (len(idx) == 1) || (i == 0 && (idx[0].Fingerprint != fp || idx[0].SinceMs != 200)) {
				t.Fatalf("after receipt %d, index %+v %v", i+1, idx, err)
			}
			if n, err := s.CountIndeterminate(); err != nil || n != len(idx) {
				t.Fatalf("after receipt %d, count %d %v", i+1, n, err)
			}
		}
		rs, err := s.Receipts(fp)
		if err != nil || len(rs) != 2 || rs[0].Status != schema.StatusReconciliationRequired || rs[1].Status != schema.StatusConfirmed ||
			rs[1].RecordedAtMs <= rs[0].RecordedAtMs {
			t.Fatalf("Receipts = %+v %v", rs, err)
		}
		got, _, _ = s.Load(fp)
		if got.ReceiptSeq != 2 || got.Receipt == nil || got.Receipt.ReceiptID != rs[1].ReceiptID || got.Latest.Kind != schema.KindConfirmed {
			t.Errorf("record after two receipts: %+v", got)
		}
		if a, found, err := s.Attempt(fp, journal.AttemptID(fp, 2)); err != nil || !found || a.Number != 2 {
			t.Errorf("Attempt = %+v %v %v", a, found, err)
		}
		if _, found, _ := s.Attempt(other, journal.AttemptID(fp, 2)); found {
			t.Error("attempts leak across fingerprints")
		}
		if rs, _ := s.Receipts(other); len(rs) != 0 {
			t.Error("receipts leak across fingerprints")
		}
	})

	t.Run("ended proposals", func(t *testing.T) {
		s := open(t)
		ref := schema.ProposalRef{Host: "h", ProposalID: "p9"}
		e := kv.Ended{Phase: schema.PhaseAuthorization, Code: schema.CodeGrantExpired, AtMs: 5}
		if err := s.Commit(fp, journal.Writes{Ended: &journal.EndedProposal{Ref: ref, Ended: e}}); err != nil {
			t.Fatal(err)
		}
		if got, found, err := s.Ended(ref); err != nil || !found || got != e {
			t.Fatalf("Ended = %+v %v %v", got, found, err)
		}
		if _, found, _ := s.Load(fp); found {
			t.Error("ending a proposal wrote the fingerprint's record")
		}
		if _, found, _ := s.Ended(schema.ProposalRef{Host: "other", ProposalID: "p9"}); found {
			t.Error("an end leaks to another host's proposal of the same id")
		}
	})

	t.Run("inconsistent writes are refused whole", func(t *testing.T) {
		s := open(t)
		rec := journal.New(id, "fake", 1)
		rc := schema.Receipt{Fingerprint: fp}
		for _, w := range []journal.Writes{
			{Receipt: &rc},
			{Record: &rec, Receipt: &rc},
			{Record: &rec, CancelTimer: true, Timer: &kv.Timer{ID: journal.TimerID(fp)}},
		} {
			if err := s.Commit(fp, w); !errors.Is(err, journal.ErrBadWrites) {
				t.Errorf("Commit(%+v) = %v", w, err)
			}
		}
		if _, found, _ := s.Load(fp); found {
			t.Error("a refused commit wrote its record")
		}
	})

	t.Run("lock excludes", func(t *testing.T) {
		s := open(t)
		unlock := s.Lock(fp)
		var wg sync.WaitGroup
		got := make(chan string, 2)
		wg.Go(func() {
			u := s.Lock(fp)
			got <- "same"
			u()
		})
		wg.Go(func() {
			u := s.Lock(other)
			got <- "other"
			u()
		})
		select {
		case v := <-got:
			if v != "other" {
				t.Fatal("a second Lock of the same fingerprint did not wait")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Lock of another fingerprint waited")
		}
		unlock()
		if v := <-got; v != "same" {
			t.Fatal(v)
		}
		wg.Wait()
	})
}
