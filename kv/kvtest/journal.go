// RunJournal is the conformance suite every kv.Journal backend passes:
// the single-node Pebble journal and the replicated one.
//
// Every write follows the protocol the stages follow: Lock, Load, decide,
// Commit. The conflict cases hold for both kinds of backend: a journal
// whose instances exclude each other with Lock (Pebble: one store, one
// lock table) and a shared one whose Commit is a compare-and-set (two
// processors, each with its own instance).

package kvtest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/intent"
	"github.com/portcullis/portcullis/schema"
)

// Open makes a fresh, empty journal for one subtest. another returns one
// more instance over the same storage: what another processor sharing the
// journal sees (for a single-node journal, another handle on the same
// store).
type OpenJournal func(t *testing.T) (s kv.Journal, another func() kv.Journal)

// Run checks a Store made fresh by open for each subtest.
func RunJournal(t *testing.T, open OpenJournal) {
	fp := "sha256:" + strings.Repeat("ab", 32)
	other := "sha256:" + strings.Repeat("cd", 32)
	id := kv.Identity{
		Fingerprint:    fp,
		IdempotencyKey: kv.Hex(fp),
		Target: schema.Target{
			Provider:    "demo",
			Capability:  "inventory.adjust",
			Operation:   "adjust_stock",
			Environment: "test",
			Referent:    "sku-1",
		},
	}

	t.Run("empty", func(t *testing.T) {
		s, _ := open(t)
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
		s, _ := open(t)
		unlock := s.Lock(fp)
		defer unlock()
		if _, found, err := s.Load(fp); found || err != nil {
			t.Fatalf("Load = %v %v", found, err)
		}
		rec := kv.NewIntent(id, "fake", 100)
		rec.AddProposal(schema.ProposalRef{Host: "h", ProposalID: "p1"})
		rec.AddProposal(schema.ProposalRef{Host: "h", ProposalID: "p1"})
		rec.State, rec.DispatchAttempts, rec.InFlightAtMs = kv.StateInFlight, 1, 100
		rec.InFlightBy, rec.InFlightUntilMs = "p_0123456789abcdef", 12100
		if err := s.Commit(fp, kv.IntentWrites{Record: &rec}); err != nil {
			t.Fatal(err)
		}
		got, found, err := s.Load(fp)
		if err != nil || !found || got.State != kv.StateInFlight || len(got.Proposals) != 1 || got.Identity != id ||
			got.InFlightBy != rec.InFlightBy || got.InFlightUntilMs != rec.InFlightUntilMs {
			t.Fatalf("Load = %+v %v %v", got, found, err)
		}
		// Two receipts, each appended with the record that numbers it.
		for i, status := range []schema.Status{schema.StatusReconciliationRequired, schema.StatusConfirmed} {
			rc := intent.Settle(&got, kv.Verdict{Status: status, NextAction: schema.NextNone, Attempted: true}, "step"+string(rune('a'+i)), nil, nil, 200)
			cp := kv.Attempt{AttemptID: kv.AttemptID(fp, i+1), Number: i + 1, StartedAtMs: 200}
			w := kv.IntentWrites{Record: &got, Receipt: &rc, Attempt: &cp, Indeterminate: 1 - 2*i, SinceMs: 200}
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
		if a, found, err := s.Attempt(fp, kv.AttemptID(fp, 2)); err != nil || !found || a.Number != 2 {
			t.Errorf("Attempt = %+v %v %v", a, found, err)
		}
		if _, found, _ := s.Attempt(other, kv.AttemptID(fp, 2)); found {
			t.Error("attempts leak across fingerprints")
		}
		if rs, _ := s.Receipts(other); len(rs) != 0 {
			t.Error("receipts leak across fingerprints")
		}
	})

	t.Run("ended proposals", func(t *testing.T) {
		s, _ := open(t)
		ref := schema.ProposalRef{Host: "h", ProposalID: "p9"}
		e := kv.Ended{Phase: schema.PhaseAuthorization, Code: schema.CodeGrantExpired, AtMs: 5}
		if err := s.Commit(fp, kv.IntentWrites{Ended: &kv.EndedProposal{Ref: ref, Ended: e}}); err != nil {
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
		s, _ := open(t)
		rec := kv.NewIntent(id, "fake", 1)
		rc := schema.Receipt{Fingerprint: fp}
		for _, w := range []kv.IntentWrites{
			{Receipt: &rc},
			{Record: &rec, Receipt: &rc},
			{Record: &rec, CancelTimer: true, Timer: &kv.Timer{ID: kv.IntentTimerID(fp)}},
		} {
			if err := s.Commit(fp, w); !errors.Is(err, kv.ErrBadWrites) {
				t.Errorf("Commit(%+v) = %v", w, err)
			}
		}
		if _, found, _ := s.Load(fp); found {
			t.Error("a refused commit wrote its record")
		}
	})

	t.Run("lock excludes", func(t *testing.T) {
		s, _ := open(t)
		LockExcludes(t, s.Lock, fp, other)
	})

	t.Run("racing first writers: exactly one wins", func(t *testing.T) {
		s, another := open(t)
		stores := []kv.Journal{s, another(), another()}
		const n = 9
		var wins, conflicts atomic.Int32
		winner := make(chan string, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			st := stores[i%len(stores)]
			wg.Go(func() {
				<-start
				unlock := st.Lock(fp)
				defer unlock()
				_, found, err := st.Load(fp)
				if err != nil {
					t.Error(err)
					return
				}
				if found {
					return // a writer before this one committed, and this one saw it
				}
				rec := kv.NewIntent(id, "fake", 100)
				rec.AddProposal(schema.ProposalRef{Host: "h", ProposalID: fmt.Sprintf("p%d", i)})
				rec.State, rec.DispatchAttempts, rec.InFlightAtMs, rec.InFlightBy = kv.StateInFlight, 1, 100, fmt.Sprintf("w%d", i)
				switch err := st.Commit(fp, kv.IntentWrites{Record: &rec}); {
				case err == nil:
					wins.Add(1)
					winner <- rec.InFlightBy
				case errors.Is(err, kv.ErrConflict):
					conflicts.Add(1)
				default:
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d writers that found no record committed one (%d conflicts), want exactly 1", wins.Load(), conflicts.Load())
		}
		got, found, err := another().Load(fp)
		if w := <-winner; err != nil || !found || got.InFlightBy != w {
			t.Fatalf("record %+v %v %v, want the winner %s's", got, found, err, w)
		}
	})

	t.Run("a commit on a stale load loses, whole", func(t *testing.T) {
		s, another := open(t)
		b := another()
		pA, pB := schema.ProposalRef{Host: "h", ProposalID: "pa"}, schema.ProposalRef{Host: "h", ProposalID: "pb"}
		func() {
			unlock := s.Lock(fp)
			defer unlock()
			if _, _, err := s.Load(fp); err != nil {
				t.Fatal(err)
			}
			rec := kv.NewIntent(id, "fake", 100)
			rec.State, rec.DispatchAttempts, rec.InFlightAtMs = kv.StateInFlight, 1, 100
			if err := s.Commit(fp, kv.IntentWrites{Record: &rec}); err != nil {
				t.Fatal(err)
			}
		}()

		unlock := s.Lock(fp)
		locked := true
		defer func() {
			if locked {
				unlock()
			}
		}()
		recA, _, err := s.Load(fp)
		if err != nil {
			t.Fatal(err)
		}
		bDone := make(chan error, 1)
		go func() {
			u := b.Lock(fp)
			defer u()
			recB, _, err := b.Load(fp)
			if err != nil {
				bDone <- err
				return
			}
			recB.AddProposal(pB)
			bDone <- b.Commit(fp, kv.IntentWrites{Record: &recB})
		}()
		// A settles the dispatch on what it loaded: a receipt, a started
		// attempt, the index.
		recA.AddProposal(pA)
		rc := intent.Settle(&recA, kv.Verdict{Status: schema.StatusReconciliationRequired, NextAction: schema.NextReconcile, Attempted: true}, "dispatch", nil, nil, 200)
		cp := kv.Attempt{AttemptID: kv.AttemptID(fp, 1), Number: 1, StartedAtMs: 200}
		wA := kv.IntentWrites{Record: &recA, Receipt: &rc, Attempt: &cp, Indeterminate: 1, SinceMs: 200}
		select {
		case err := <-bDone:
			// B did not wait for A's Lock: a shared journal. A's load is
			// stale, and none of A's commit may take effect.
			if err != nil {
				t.Fatalf("B's commit: %v", err)
			}
			if err := s.Commit(fp, wA); !errors.Is(err, kv.ErrConflict) {
				t.Fatalf("commit on a stale load = %v, want ErrConflict", err)
			}
			if got, _, _ := b.Load(fp); got.Receipt != nil || len(got.Proposals) != 1 || got.Proposals[0] != pB {
				t.Fatalf("after the stale commit the record is %+v", got)
			}
			if rs, err := b.Receipts(fp); err != nil || len(rs) != 0 {
				t.Errorf("the stale commit's receipt is in the history: %+v %v", rs, err)
			}
			if _, found, err := b.Attempt(fp, cp.AttemptID); err != nil || found {
				t.Errorf("the stale commit's attempt is recorded: %v %v", found, err)
			}
			if idx, err := b.Indeterminates(); err != nil || len(idx) != 0 {
				t.Errorf("the stale commit's fingerprint is listed indeterminate: %+v %v", idx, err)
			}
			// Load again, decide again, commit.
			if recA, _, err = s.Load(fp); err != nil {
				t.Fatal(err)
			}
			recA.AddProposal(pA)
			rc = intent.Settle(&recA, kv.Verdict{Status: schema.StatusReconciliationRequired, NextAction: schema.NextReconcile, Attempted: true}, "dispatch", nil, nil, 200)
			if err := s.Commit(fp, kv.IntentWrites{Record: &recA, Receipt: &rc, Attempt: &cp, Indeterminate: 1, SinceMs: 200}); err != nil {
				t.Fatalf("commit after loading again: %v", err)
			}
			unlock()
			locked = false
		case <-time.After(time.Second):
			// B waits for A's Lock: a journal whose instances exclude
			// each other. A's load cannot be stale.
			if err := s.Commit(fp, wA); err != nil {
				t.Fatal(err)
			}
			unlock()
			locked = false
			if err := <-bDone; err != nil {
				t.Fatalf("B's commit after A's: %v", err)
			}
		}
		got, _, err := another().Load(fp)
		if err != nil || !slices.Contains(got.Proposals, pA) || !slices.Contains(got.Proposals, pB) || got.Receipt == nil {
			t.Fatalf("an update was lost: %+v %v", got, err)
		}
		if rs, err := another().Receipts(fp); err != nil || len(rs) != 1 || rs[0].ReceiptID != got.Receipt.ReceiptID {
			t.Errorf("Receipts = %+v %v", rs, err)
		}
		if idx, err := another().Indeterminates(); err != nil || len(idx) != 1 {
			t.Errorf("Indeterminates = %+v %v", idx, err)
		}
		if _, found, err := another().Attempt(fp, cp.AttemptID); err != nil || !found {
			t.Errorf("Attempt = %v %v", found, err)
		}
	})

	t.Run("a commit without a load expects no record", func(t *testing.T) {
		s, another := open(t)
		rec := kv.NewIntent(id, "fake", 1)
		if err := s.Commit(fp, kv.IntentWrites{Record: &rec}); err != nil {
			t.Fatal(err)
		}
		b := another()
		unlock := b.Lock(fp)
		defer unlock()
		err := b.Commit(fp, kv.IntentWrites{Record: &rec})
		switch {
		case errors.Is(err, kv.ErrConflict):
		case err == nil:
			// A single-node journal has no other writer to lose to.
		default:
			t.Fatal(err)
		}
	})
}
