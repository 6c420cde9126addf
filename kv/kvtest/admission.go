package kvtest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// OpenAdmissions opens fresh admission records and returns them with a
// function that opens one more instance over the same storage: what
// another processor sharing the records sees (for a single node, another
// handle on the same store).
type OpenAdmissions func(t *testing.T) (s kv.Admissions, another func() kv.Admissions)

// RunAdmissions is the conformance suite every kv.Admissions backend
// passes: the single-node Pebble store and the shared bucket. The claims
// follow the admission stage's protocol: lock both ids, read both records,
// Admit only what was read absent.
func RunAdmissions(t *testing.T, open OpenAdmissions) {
	ref := schema.ProposalRef{Host: "h", ProposalID: "p1"}
	admitted := func(seq uint64, digest string) kv.Admitted {
		return kv.Admitted{Digest: digest, Seq: seq, AtMs: 10}
	}
	delivery := func(seq uint64) kv.Delivery { return kv.Delivery{ProposalID: ref.ProposalID, Seq: seq, AtMs: 10} }

	t.Run("empty", func(t *testing.T) {
		s, _ := open(t)
		if _, found, err := s.Delivery(ref.Host, "d1"); found || err != nil {
			t.Fatalf("Delivery of nothing: %v %v", found, err)
		}
		if _, found, err := s.Admitted(ref); found || err != nil {
			t.Fatalf("Admitted of nothing: %v %v", found, err)
		}
		if _, found, err := s.LastOutcome(ref); found || err != nil {
			t.Fatalf("LastOutcome of an id nobody took: %v %v", found, err)
		}
	})

	t.Run("admit, repeat, forward", func(t *testing.T) {
		s, another := open(t)
		a := admitted(3, "dg")
		c, err := s.Admit(ref, a, "d1", delivery(3))
		if err != nil || c != (kv.AdmissionClaim{}) {
			t.Fatalf("Admit: %+v, %v", c, err)
		}
		// Its own claim again (a redelivery, or a write that timed out
		// but was stored) has won.
		if c, err := another().Admit(ref, a, "d1", delivery(3)); err != nil || c.Delivery != nil || (c.Admitted != nil && c.Admitted.Seq != 3) {
			t.Fatalf("Admit of the same message again: %+v, %v", c, err)
		}
		r := another()
		if got, found, err := r.Admitted(ref); err != nil || !found || got != a {
			t.Fatalf("Admitted: %+v %v %v, want %+v", got, found, err, a)
		}
		if got, found, err := r.Delivery(ref.Host, "d1"); err != nil || !found || got != delivery(3) {
			t.Fatalf("Delivery: %+v %v %v", got, found, err)
		}
		// Ids are per host.
		if _, found, err := r.Delivery("other", "d1"); found || err != nil {
			t.Fatalf("another host's delivery id: %v %v", found, err)
		}
		if _, found, err := r.Admitted(schema.ProposalRef{Host: "other", ProposalID: ref.ProposalID}); found || err != nil {
			t.Fatalf("another host's proposal id: %v %v", found, err)
		}
		if err := s.Repeat(ref.Host, "d2", delivery(4)); err != nil {
			t.Fatal(err)
		}
		if got, found, err := r.Delivery(ref.Host, "d2"); err != nil || !found || got != delivery(4) {
			t.Fatalf("Delivery of a repeat: %+v %v %v", got, found, err)
		}
		a.Forwarded = true
		if err := s.Forwarded(ref, a); err != nil {
			t.Fatal(err)
		}
		if got, found, err := r.Admitted(ref); err != nil || !found || !got.Forwarded {
			t.Fatalf("Admitted after Forwarded: %+v %v %v", got, found, err)
		}
	})

	t.Run("lock", func(t *testing.T) {
		s, _ := open(t)
		LockExcludes(t, s.Lock, kv.ProposalLockKey(ref), kv.DeliveryLockKey(ref.Host, "d1"))
	})

	// Messages with one proposal id and other content race for it, each on
	// its own instance, by the stage's protocol: exactly one takes the id,
	// and no loser's delivery id stays recorded.
	t.Run("racing claims", func(t *testing.T) {
		_, another := open(t)
		const n = 4
		won := make([]bool, n)
		var wg sync.WaitGroup
		for i := range n {
			s := another()
			wg.Go(func() {
				seq, del := uint64(10+i), fmt.Sprintf("race-%d", i)
				defer s.Lock(kv.ProposalLockKey(ref))()
				defer s.Lock(kv.DeliveryLockKey(ref.Host, del))()
				if _, found, err := s.Delivery(ref.Host, del); err != nil || found {
					t.Errorf("Delivery %s: %v %v", del, found, err)
					return
				}
				if _, found, err := s.Admitted(ref); err != nil || found {
					return // taken already: a reuse, nothing written
				}
				c, err := s.Admit(ref, admitted(seq, fmt.Sprintf("dg-%d", i)), del, delivery(seq))
				if err != nil {
					t.Errorf("Admit: %v", err)
					return
				}
				if c.Delivery != nil {
					t.Errorf("delivery id %s taken by %+v", del, c.Delivery)
				}
				won[i] = c.Admitted == nil || c.Admitted.Seq == seq
			})
		}
		wg.Wait()
		s := another()
		got, found, err := s.Admitted(ref)
		if err != nil || !found {
			t.Fatalf("Admitted: %v %v", found, err)
		}
		winners := 0
		for i, w := range won {
			del := fmt.Sprintf("race-%d", i)
			_, recorded, err := s.Delivery(ref.Host, del)
			if err != nil {
				t.Fatal(err)
			}
			if !w {
				if recorded {
					t.Errorf("the refused message %d's delivery id is recorded", i)
				}
				continue
			}
			winners++
			if got.Seq != uint64(10+i) || !recorded {
				t.Errorf("winner %d: proposal record %+v, delivery recorded %v", i, got, recorded)
			}
		}
		if winners != 1 {
			t.Fatalf("%d messages took the id, want 1 (%v)", winners, won)
		}
	})
}
