// RunApprovals is the conformance suite every kv.Approvals backend
// passes: the single-node Pebble store and any replicated one.

package kvtest

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// Run checks a Store made fresh by open for each subtest.
func RunApprovals(t *testing.T, open func(t *testing.T) kv.Approvals) {
	ref := schema.ProposalRef{Host: "h", ProposalID: "p1"}
	evals := []schema.PolicyEvaluation{{Layer: "managed_policy:org", Outcome: schema.EvalPass}}
	park := func(ref schema.ProposalRef, expiresAtMs int64) kv.Approval {
		return kv.Approval{Host: ref.Host, ProposalID: ref.ProposalID, Fingerprint: "sha256:" + ref.ProposalID,
			Referent: "sku-" + ref.ProposalID, Seq: 3, State: kv.StateParked, ArrivedAtMs: 10, ExpiresAtMs: expiresAtMs, Evaluations: evals}
	}
	timer := func(ref schema.ProposalRef, due int64) *kv.Timer {
		t := kv.ExpiryTimer("timer.subject", ref, due, kv.ApprovalTimerID(ref))
		return &t
	}
	parkWrites := func(ref schema.ProposalRef, expiresAtMs int64) kv.ApprovalWrites {
		r := park(ref, expiresAtMs)
		return kv.ApprovalWrites{From: kv.StateNone, Record: &r, Timer: timer(ref, expiresAtMs)}
	}
	decide := func(r kv.Approval, state kv.ApprovalState, by string) kv.ApprovalWrites {
		r.State, r.DecidedBy, r.DecidedAtMs = state, by, 20
		if state == kv.StateDenied {
			r.Code = schema.CodeApprovalTimedOut
		}
		return kv.ApprovalWrites{From: kv.StateParked, Record: &r, CancelTimer: true}
	}
	commit := func(t *testing.T, s kv.Approvals, ref schema.ProposalRef, w kv.ApprovalWrites) {
		t.Helper()
		if err := s.Commit(ref, w); err != nil {
			t.Fatalf("Commit(%s): %v", ref, err)
		}
	}

	t.Run("empty", func(t *testing.T) {
		s := open(t)
		if _, found, err := s.Load(ref); found || err != nil {
			t.Fatalf("Load of nothing: %v %v", found, err)
		}
		if got, total, err := s.Parked(0); len(got) != 0 || total != 0 || err != nil {
			t.Fatalf("Parked of nothing: %v %d %v", got, total, err)
		}
		if n := s.Count(); n != 0 {
			t.Fatalf("Count = %d", n)
		}
		if err := s.Commit(ref, kv.ApprovalWrites{}); err != nil {
			t.Fatalf("empty writes: %v", err)
		}
	})

	t.Run("park, then decide once", func(t *testing.T) {
		s := open(t)
		commit(t, s, ref, parkWrites(ref, 610))
		got, found, err := s.Load(ref)
		if err != nil || !found || !slices.Equal(got.Evaluations, evals) {
			t.Fatalf("Load = %+v %v %v", got, found, err)
		}
		if want := park(ref, 610); got.State != want.State || got.Seq != want.Seq || got.Fingerprint != want.Fingerprint ||
			got.Referent != want.Referent || got.ArrivedAtMs != want.ArrivedAtMs || got.ExpiresAtMs != want.ExpiresAtMs || got.Ref() != ref {
			t.Fatalf("Load = %+v, want %+v", got, want)
		}
		if n := s.Count(); n != 1 {
			t.Fatalf("Count after parking = %d", n)
		}
		// Re-arming the timer leaves the record and the count alone.
		commit(t, s, ref, kv.ApprovalWrites{From: kv.StateParked, Timer: timer(ref, 620)})
		if n := s.Count(); n != 1 {
			t.Fatalf("Count after re-arming = %d", n)
		}
		// Parking again, or deciding from a state the record is not in,
		// conflicts and writes nothing.
		if err := s.Commit(ref, parkWrites(ref, 999)); !errors.Is(err, kv.ErrConflict) {
			t.Fatalf("parking a parked proposal again: %v", err)
		}
		commit(t, s, ref, decide(got, kv.StateDenied, "AUTH/7"))
		if n := s.Count(); n != 0 {
			t.Fatalf("Count after the decision = %d", n)
		}
		if err := s.Commit(ref, decide(got, kv.StatePermitted, "GRANTS/9")); !errors.Is(err, kv.ErrConflict) {
			t.Fatalf("a second decision: %v", err)
		}
		if err := s.Commit(ref, kv.ApprovalWrites{From: kv.StateParked, Timer: timer(ref, 630)}); !errors.Is(err, kv.ErrConflict) {
			t.Fatalf("re-arming a decided proposal: %v", err)
		}
		got, _, _ = s.Load(ref)
		if got.State != kv.StateDenied || got.DecidedBy != "AUTH/7" || got.Code != schema.CodeApprovalTimedOut || got.ExpiresAtMs != 610 {
			t.Fatalf("decided record = %+v", got)
		}
		if n := s.Count(); n != 0 {
			t.Fatalf("Count after refused commits = %d", n)
		}
		if parked, total, _ := s.Parked(0); len(parked) != 0 || total != 0 {
			t.Fatalf("Parked after the decision = %+v %d", parked, total)
		}
	})

	t.Run("decided on arrival", func(t *testing.T) {
		s := open(t)
		r := park(ref, 0)
		r.State, r.DecidedBy, r.DecidedAtMs = kv.StatePermitted, "AUTH/3", 10
		commit(t, s, ref, kv.ApprovalWrites{Record: &r})
		if n := s.Count(); n != 0 {
			t.Fatalf("Count = %d", n)
		}
		if got, found, _ := s.Load(ref); !found || got.State != kv.StatePermitted || got.DecidedBy != "AUTH/3" {
			t.Fatalf("Load = %+v", got)
		}
		if err := s.Commit(ref, kv.ApprovalWrites{Record: &r}); !errors.Is(err, kv.ErrConflict) {
			t.Fatalf("deciding a new proposal twice: %v", err)
		}
	})

	t.Run("an approval is decided once, whoever races", func(t *testing.T) {
		s := open(t)
		commit(t, s, ref, parkWrites(ref, 610))
		rec, _, _ := s.Load(ref)
		const n = 8
		var won atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				state := kv.StateDenied
				if i%2 == 0 {
					state = kv.StatePermitted
				}
				err := s.Commit(ref, decide(rec, state, "IN/"+string(rune('a'+i))))
				switch {
				case err == nil:
					won.Add(1)
				case !errors.Is(err, kv.ErrConflict):
					t.Errorf("racing commit: %v", err)
				}
			})
		}
		close(start)
		wg.Wait()
		if won.Load() != 1 {
			t.Fatalf("%d commits won, want 1", won.Load())
		}
		if c := s.Count(); c != 0 {
			t.Fatalf("Count = %d", c)
		}
	})

	t.Run("parked list", func(t *testing.T) {
		s := open(t)
		for _, p := range []struct {
			ref schema.ProposalRef
			exp int64
		}{
			{schema.ProposalRef{Host: "h", ProposalID: "late"}, 900},
			{schema.ProposalRef{Host: "h", ProposalID: "soon"}, 300},
			{schema.ProposalRef{Host: "g", ProposalID: "tie"}, 500},
			{schema.ProposalRef{Host: "h", ProposalID: "tie"}, 500},
			{schema.ProposalRef{Host: "h\x00x", ProposalID: "odd\x00id"}, 700},
			{schema.ProposalRef{Host: "h", ProposalID: "decided"}, 100},
		} {
			commit(t, s, p.ref, parkWrites(p.ref, p.exp))
		}
		d, _, _ := s.Load(schema.ProposalRef{Host: "h", ProposalID: "decided"})
		commit(t, s, d.Ref(), decide(d, kv.StateDenied, "T/1"))
		ids := func(rs []kv.Approval) []string {
			var out []string
			for _, r := range rs {
				out = append(out, r.Host+"/"+r.ProposalID)
			}
			return out
		}
		got, total, err := s.Parked(0)
		if err != nil || total != 5 || s.Count() != 5 {
			t.Fatalf("total %d, count %d, %v", total, s.Count(), err)
		}
		if want := []string{"h/soon", "g/tie", "h/tie", "h\x00x/odd\x00id", "h/late"}; !slices.Equal(ids(got), want) {
			t.Errorf("order %q, want %q", ids(got), want)
		}
		if got[0].Referent != "sku-soon" || got[0].ExpiresAtMs != 300 || got[0].Fingerprint != "sha256:soon" {
			t.Errorf("first = %+v", got[0])
		}
		got, total, err = s.Parked(3)
		if err != nil || total != 5 || !slices.Equal(ids(got), []string{"h/soon", "g/tie", "h/tie"}) {
			t.Errorf("limit 3: %q total %d %v", ids(got), total, err)
		}
		// A decision takes the proposal off the list.
		soon, _, _ := s.Load(schema.ProposalRef{Host: "h", ProposalID: "soon"})
		commit(t, s, soon.Ref(), decide(soon, kv.StatePermitted, "G/1"))
		if got, total, _ := s.Parked(1); total != 4 || len(got) != 1 || got[0].ProposalID != "tie" || s.Count() != 4 {
			t.Errorf("after a decision: %q total %d count %d", ids(got), total, s.Count())
		}
	})

	t.Run("hosts do not share proposal ids", func(t *testing.T) {
		s := open(t)
		other := schema.ProposalRef{Host: "other", ProposalID: ref.ProposalID}
		commit(t, s, ref, parkWrites(ref, 610))
		if _, found, _ := s.Load(other); found {
			t.Fatal("a record leaks to another host's proposal of the same id")
		}
		commit(t, s, other, parkWrites(other, 610))
		if s.Count() != 2 {
			t.Fatalf("Count = %d", s.Count())
		}
	})

	t.Run("inconsistent writes are refused whole", func(t *testing.T) {
		s := open(t)
		r := park(ref, 610)
		noDeadline := park(ref, 0)
		undecided := park(ref, 610)
		undecided.State = kv.StateDenied
		odd := park(ref, 610)
		odd.State = "maybe"
		other := schema.ProposalRef{Host: "h", ProposalID: "p2"}
		for name, w := range map[string]kv.ApprovalWrites{
			"timer added and cancelled":    {Record: &r, Timer: timer(ref, 610), CancelTimer: true},
			"another proposal's timer":     {Record: &r, Timer: timer(other, 610)},
			"another proposal's record":    {Record: func() *kv.Approval { o := park(other, 610); return &o }()},
			"parked without a deadline":    {Record: &noDeadline},
			"decided by nobody":            {Record: &undecided},
			"unknown state":                {Record: &odd},
			"a timer without a record":     {Timer: timer(ref, 610)},
			"a decision changed":           {From: kv.StateDenied, Record: &r},
			"parked after waiting already": {From: kv.StateParked, Record: &r},
		} {
			if err := s.Commit(ref, w); !errors.Is(err, kv.ErrBadWrites) {
				t.Errorf("%s: Commit = %v", name, err)
			}
		}
		if _, found, _ := s.Load(ref); found || s.Count() != 0 {
			t.Error("a refused commit wrote its record")
		}
	})

	t.Run("lock excludes", func(t *testing.T) {
		s := open(t)
		other := schema.ProposalRef{Host: "other", ProposalID: ref.ProposalID}
		LockExcludes(t, s.Lock, ref, other)
	})
}
