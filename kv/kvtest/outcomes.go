package kvtest

import (
	"context"
	"errors"
	"testing"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// OpenOutcomeHistory opens a fresh outcome history and returns it with a
// function that opens one more instance over the same storage: another
// processor sharing it.
type OpenOutcomeHistory func(t *testing.T) (h kv.OutcomeHistory, another func() kv.OutcomeHistory)

// RunOutcomeHistory is the conformance suite every kv.OutcomeHistory
// backend passes: each proposal's subject is its own; an append is stored
// only after the last message it names (ErrMovedOn otherwise, nothing
// stored), once per message id; Last returns what was stored last, from
// the leader at once and from any replica eventually.
func RunOutcomeHistory(t *testing.T, open OpenOutcomeHistory) {
	ctx := context.Background()
	p1 := schema.ProposalRef{Host: "h", ProposalID: "p-1"}
	p2 := schema.ProposalRef{Host: "h", ProposalID: "p-2"}
	last := func(t *testing.T, h kv.OutcomeHistory, ref schema.ProposalRef, leader bool) (kv.OutcomeEntry, bool) {
		t.Helper()
		e, found, err := h.Last(ctx, ref, leader)
		if err != nil {
			t.Fatalf("Last(%v, leader %v): %v", ref, leader, err)
		}
		return e, found
	}
	appendOK := func(t *testing.T, h kv.OutcomeHistory, ref schema.ProposalRef, data, id string, expect uint64) uint64 {
		t.Helper()
		seq, dup, err := h.Append(ctx, ref, []byte(data), id, expect)
		if err != nil || dup || seq == 0 {
			t.Fatalf("Append(%s after %d) = %d, duplicate %v, %v", id, expect, seq, dup, err)
		}
		return seq
	}

	t.Run("in order, per subject", func(t *testing.T) {
		h, another := open(t)
		for _, leader := range []bool{true, false} {
			if e, found := last(t, h, p1, leader); found {
				t.Fatalf("an empty subject holds %+v (leader %v)", e, leader)
			}
		}
		s1 := appendOK(t, h, p1, "first", "p1/1", 0)
		if e, found := last(t, another(), p1, true); !found || e.Seq != s1 || string(e.Data) != "first" {
			t.Fatalf("Last from the leader = %+v %v, want seq %d", e, found, s1)
		}
		// Another appends after a sequence that is not the last.
		if _, _, err := another().Append(ctx, p1, []byte("stale"), "p1/stale", 0); !errors.Is(err, kv.ErrMovedOn) {
			t.Fatalf("an append after an empty subject that is not: %v, want ErrMovedOn", err)
		}
		s2 := appendOK(t, h, p1, "second", "p1/2", s1)
		// The same append again: refused (its subject moved on, to
		// itself) or a duplicate, as the backend checks first; after
		// what the subject now holds it is a duplicate.
		if seq, dup, err := h.Append(ctx, p1, []byte("second"), "p1/2", s1); !errors.Is(err, kv.ErrMovedOn) && (err != nil || !dup) {
			t.Fatalf("the same append again after its old last = %d, duplicate %v, %v; want ErrMovedOn or a duplicate", seq, dup, err)
		}
		if seq, dup, err := h.Append(ctx, p1, []byte("second"), "p1/2", s2); err != nil || !dup {
			t.Fatalf("the same append again after itself = %d, duplicate %v, %v", seq, dup, err)
		}
		if e, found := last(t, h, p1, true); !found || e.Seq != s2 || string(e.Data) != "second" {
			t.Fatalf("Last = %+v %v, want the second at %d", e, found, s2)
		}
		// Another proposal's subject is its own: empty, whatever p1 holds.
		if _, found := last(t, h, p2, true); found {
			t.Fatal("p2's subject holds p1's outcome")
		}
		appendOK(t, another(), p2, "p2", "p2/1", 0)
		// Any replica answers with the last, eventually (one server: at once).
		if e, found := last(t, h, p1, false); !found || e.Seq != s2 || string(e.Data) != "second" {
			t.Fatalf("Last from any replica = %+v %v, want the second at %d", e, found, s2)
		}
	})
}

// OpenOutcomeLog opens a fresh outcome log and returns it with reopen,
// which closes it and opens it again over the same storage (a restart).
type OpenOutcomeLog func(t *testing.T) (l kv.OutcomeLog, reopen func() kv.OutcomeLog)

// RunOutcomeLog is the conformance suite every kv.OutcomeLog backend
// passes: a proposal's record follows its outcomes in order — a stale one
// (not following what is recorded) leaves it as it is — and what was
// flushed survives a restart.
func RunOutcomeLog(t *testing.T, open OpenOutcomeLog) {
	ref := schema.ProposalRef{Host: "h", ProposalID: "p-1"}
	other := schema.ProposalRef{Host: "h", ProposalID: "p-2"}
	needs := schema.NewOutcome(ref, schema.KindNeedsApproval, 200)
	confirmed := schema.NewOutcome(ref, schema.KindConfirmed, 3_000)
	lastKind := func(t *testing.T, l kv.OutcomeLog, ref schema.ProposalRef) schema.Kind {
		t.Helper()
		o, found, err := l.LastOutcome(ref)
		if err != nil {
			t.Fatalf("LastOutcome(%v): %v", ref, err)
		}
		if !found {
			return ""
		}
		if o.Host != ref.Host || o.ProposalID != ref.ProposalID {
			t.Fatalf("LastOutcome(%v) is %s/%s's", ref, o.Host, o.ProposalID)
		}
		return o.Kind
	}
	record := func(t *testing.T, l kv.OutcomeLog, outs ...schema.Outcome) {
		t.Helper()
		if err := l.RecordOutcomes(outs); err != nil {
			t.Fatalf("RecordOutcomes: %v", err)
		}
	}

	t.Run("in order, stale kept out", func(t *testing.T) {
		l, _ := open(t)
		if k := lastKind(t, l, ref); k != "" {
			t.Fatalf("nothing recorded, found %s", k)
		}
		record(t, l, needs)
		if k := lastKind(t, l, ref); k != schema.KindNeedsApproval {
			t.Fatalf("recorded %s, want %s", k, schema.KindNeedsApproval)
		}
		record(t, l, confirmed)
		if k := lastKind(t, l, ref); k != schema.KindConfirmed {
			t.Fatalf("recorded %s, want %s", k, schema.KindConfirmed)
		}
		// The earlier outcome, published late, does not replace its end.
		record(t, l, needs)
		if k := lastKind(t, l, ref); k != schema.KindConfirmed {
			t.Fatalf("a stale outcome replaced the record: %s", k)
		}
		if k := lastKind(t, l, other); k != "" {
			t.Fatalf("another proposal has %s", k)
		}
	})

	t.Run("flushed, then restarted", func(t *testing.T) {
		l, reopen := open(t)
		record(t, l, needs, schema.NewOutcome(other, schema.KindNeedsApproval, 300))
		if err := l.Flush(); err != nil {
			t.Fatalf("Flush: %v", err)
		}
		if err := l.Flush(); err != nil {
			t.Fatalf("Flush with nothing new: %v", err)
		}
		l = reopen()
		if k := lastKind(t, l, ref); k != schema.KindNeedsApproval {
			t.Fatalf("after a restart: %q, want %s", k, schema.KindNeedsApproval)
		}
		if k := lastKind(t, l, other); k != schema.KindNeedsApproval {
			t.Fatalf("after a restart, the other: %q, want %s", k, schema.KindNeedsApproval)
		}
	})
}
