package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/portcullis/portcullis/kv"
	kvjs "github.com/portcullis/portcullis/kv/jetstream"
	"github.com/portcullis/portcullis/kv/kvtest"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// replicas opens stores on one bucket, each on its own connection (another
// processor), with its timers in a Pebble store of its own (pebble.Store.Arm:
// the suite's timer subject is no stage's, which Schedules refuses).
type replicas struct {
	url, bucket string
	n           int
}

func newReplicas(url string, n int) *replicas {
	return &replicas{url: url, bucket: fmt.Sprintf("approvals_%d", buckets.Add(1)), n: n}
}

func (r *replicas) open(t *testing.T) *kvjs.Approvals {
	t.Helper()
	_, b := kvtest.OpenBucket(t, r.url, kvjs.ApprovalsBucket(r.bucket, r.n, time.Hour))
	s, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ap, err := kvjs.NewApprovals(ctx, kvjs.ApprovalsOptions{KV: b, Timers: s, Writer: fmt.Sprintf("w%d", buckets.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ap.Close) // before nc.Close (cleanups run last first)
	return ap
}

func TestApprovalsR1(t *testing.T) { testApprovals(t, 1) }
func TestApprovalsR3(t *testing.T) { testApprovals(t, 3) }

func testApprovals(t *testing.T, replicas int) {
	url := servers(t, replicas)
	kvtest.RunApprovals(t, func(t *testing.T) kv.Approvals { return newReplicas(url, replicas).open(t) })
}

func parkedRecord(ref schema.ProposalRef, exp int64) kv.Approval {
	return kv.Approval{Host: ref.Host, ProposalID: ref.ProposalID, Fingerprint: "sha256:x", Seq: 1, State: kv.StateParked, ArrivedAtMs: 1, ExpiresAtMs: exp}
}

func waitCount(t *testing.T, s kv.Approvals, want int) {
	t.Helper()
	testenv.WaitFor(t, fmt.Sprintf("Count = %d", want), func() bool { return s.Count() == want })
}

// Two processors on one bucket (R3): what one parks the other counts,
// lists and decides; their racing decisions, each under its own Lock after
// its own Load, have exactly one winner; a processor started later counts
// what is parked.
func TestApprovalsProcessors(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster")
	}
	rs := newReplicas(testenv.NewCluster(t).URL(), 3)
	a, b := rs.open(t), rs.open(t)
	refs := []schema.ProposalRef{{Host: "h", ProposalID: "one"}, {Host: "h", ProposalID: "two"}, {Host: "g", ProposalID: "one"}}
	for i, ref := range refs {
		r := parkedRecord(ref, int64(100*(3-i)))
		tm := kv.ExpiryTimer("subj", ref, r.ExpiresAtMs, kv.ApprovalTimerID(ref))
		if err := a.Commit(ref, kv.ApprovalWrites{Record: &r, Timer: &tm}); err != nil {
			t.Fatal(err)
		}
	}
	if a.Count() != 3 {
		t.Fatalf("Count on the parking processor = %d", a.Count())
	}
	waitCount(t, b, 3)
	got, total, err := b.Parked(0)
	if err != nil || total != 3 || len(got) != 3 || got[0].Host != "g" || got[2].ProposalID != "one" || got[2].Host != "h" {
		t.Fatalf("Parked on the other = %+v %d %v", got, total, err)
	}

	// Racing decisions of one proposal, from both processors, several
	// rounds each: exactly one wins.
	for round := range 5 {
		ref := schema.ProposalRef{Host: "race", ProposalID: fmt.Sprint(round)}
		r := parkedRecord(ref, 500)
		if err := a.Commit(ref, kv.ApprovalWrites{Record: &r}); err != nil {
			t.Fatal(err)
		}
		var won, loaded atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, s := range []kv.Approvals{a, b, a, b} {
			wg.Go(func() {
				unlock := s.Lock(ref)
				defer unlock()
				rec, found, err := s.Load(ref)
				if err != nil || !found {
					t.Errorf("Load: %v %v", found, err)
					return
				}
				loaded.Add(1)
				<-start
				if !rec.Parked() {
					return // decided before this one loaded
				}
				rec.State, rec.DecidedBy, rec.DecidedAtMs = kv.StatePermitted, fmt.Sprintf("IN/%d", i), 2
				switch err := s.Commit(ref, kv.ApprovalWrites{From: kv.StateParked, Record: &rec, CancelTimer: true}); {
				case err == nil:
					won.Add(1)
				case !errors.Is(err, kv.ErrConflict):
					t.Errorf("racing commit: %v", err)
				}
			})
		}
		// Both processors have loaded the parked record before either
		// commits (the second goroutine of each waits on its Lock, and
		// loads after the winner committed: it sees it decided).
		testenv.WaitFor(t, "a loader on each processor", func() bool { return loaded.Load() >= 2 })
		close(start)
		wg.Wait()
		if won.Load() != 1 {
			t.Fatalf("round %d: %d commits won, want 1", round, won.Load())
		}
	}

	// b decides one that a parked; both count it gone.
	rec, _, _ := b.Load(refs[0])
	rec.State, rec.DecidedBy, rec.Code = kv.StateDenied, "T/1", schema.CodeApprovalTimedOut
	if err := b.Commit(refs[0], kv.ApprovalWrites{From: kv.StateParked, Record: &rec}); err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(refs[0], kv.ApprovalWrites{From: kv.StateParked, Record: &rec}); !errors.Is(err, kv.ErrConflict) {
		t.Fatalf("deciding again on the other processor: %v", err)
	}
	waitCount(t, a, 2)
	waitCount(t, b, 2)
	if c := rs.open(t); c.Count() != 2 {
		t.Fatalf("Count of a processor started now = %d", c.Count())
	}
}
