package approvals_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/approvals"
	"github.com/portcullis/portcullis/internal/approvals/approvalstest"
	"github.com/portcullis/portcullis/internal/leaderkv/leaderkvtest"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/internal/timers"
	"github.com/portcullis/portcullis/schema"
)

var buckets atomic.Int64

// replicas opens stores on one bucket, each on its own connection (another
// processor), with its timers in a Pebble store of its own (timers.Local:
// the suite's timer subject is no stage's, which Schedules refuses).
type replicas struct {
	url, bucket string
	n           int
}

func newReplicas(url string, n int) *replicas {
	return &replicas{url: url, bucket: fmt.Sprintf("approvals_%d", buckets.Add(1)), n: n}
}

func (r *replicas) open(t *testing.T) *approvals.Replicated {
	t.Helper()
	_, b := leaderkvtest.Open(t, r.url, approvals.Bucket(r.bucket, r.n, time.Hour))
	s := openKV(t, t.TempDir())
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ap, err := approvals.NewReplicated(ctx, approvals.ReplicatedOptions{KV: b, Timers: timers.Local{Store: s}, Writer: fmt.Sprintf("w%d", buckets.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ap.Close) // before nc.Close (cleanups run last first)
	return ap
}

func TestReplicatedR1(t *testing.T) {
	url := testenv.StartServer(t, "").ClientURL()
	approvalstest.Run(t, func(t *testing.T) approvals.Store { return newReplicas(url, 1).open(t) })
}

func TestReplicatedR3(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster")
	}
	url := testenv.NewCluster(t).URL()
	approvalstest.Run(t, func(t *testing.T) approvals.Store { return newReplicas(url, 3).open(t) })
}

func parkedRecord(ref schema.ProposalRef, exp int64) approvals.Record {
	return approvals.Record{Host: ref.Host, ProposalID: ref.ProposalID, Fingerprint: "sha256:x", Seq: 1, State: approvals.StateParked, ArrivedAtMs: 1, ExpiresAtMs: exp}
}

func waitCount(t *testing.T, s approvals.Store, want int) {
	t.Helper()
	testenv.WaitFor(t, fmt.Sprintf("Count = %d", want), func() bool { return s.Count() == want })
}

// Two processors on one bucket (R3): what one parks the other counts,
// lists and decides; their racing decisions, each under its own Lock after
// its own Load, have exactly one winner; a processor started later counts
// what is parked.
func TestReplicatedProcessors(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster")
	}
	rs := newReplicas(testenv.NewCluster(t).URL(), 3)
	a, b := rs.open(t), rs.open(t)
	refs := []schema.ProposalRef{{Host: "h", ProposalID: "one"}, {Host: "h", ProposalID: "two"}, {Host: "g", ProposalID: "one"}}
	for i, ref := range refs {
		r := parkedRecord(ref, int64(100*(3-i)))
		tm := approvals.ExpiryTimer("subj", ref, r.ExpiresAtMs, approvals.TimerID(ref))
		if err := a.Commit(ref, approvals.Writes{Record: &r, Timer: &tm}); err != nil {
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
		if err := a.Commit(ref, approvals.Writes{Record: &r}); err != nil {
			t.Fatal(err)
		}
		var won atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, s := range []approvals.Store{a, b, a, b} {
			wg.Go(func() {
				unlock := s.Lock(ref)
				defer unlock()
				rec, found, err := s.Load(ref)
				if err != nil || !found {
					t.Errorf("Load: %v %v", found, err)
					return
				}
				<-start
				if !rec.Parked() {
					return // decided before this one loaded
				}
				rec.State, rec.DecidedBy, rec.DecidedAtMs = approvals.StatePermitted, fmt.Sprintf("IN/%d", i), 2
				switch err := s.Commit(ref, approvals.Writes{From: approvals.StateParked, Record: &rec, CancelTimer: true}); {
				case err == nil:
					won.Add(1)
				case !errors.Is(err, approvals.ErrConflict):
					t.Errorf("racing commit: %v", err)
				}
			})
		}
		// Let every goroutine load (the ones that wait on a Lock load
		// after the winner committed and see it decided).
		time.Sleep(20 * time.Millisecond)
		close(start)
		wg.Wait()
		if won.Load() != 1 {
			t.Fatalf("round %d: %d commits won, want 1", round, won.Load())
		}
	}

	// b decides one that a parked; both count it gone.
	rec, _, _ := b.Load(refs[0])
	rec.State, rec.DecidedBy, rec.Code = approvals.StateDenied, "T/1", schema.CodeApprovalTimedOut
	if err := b.Commit(refs[0], approvals.Writes{From: approvals.StateParked, Record: &rec}); err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(refs[0], approvals.Writes{From: approvals.StateParked, Record: &rec}); !errors.Is(err, approvals.ErrConflict) {
		t.Fatalf("deciding again on the other processor: %v", err)
	}
	waitCount(t, a, 2)
	waitCount(t, b, 2)
	if c := rs.open(t); c.Count() != 2 {
		t.Fatalf("Count of a processor started now = %d", c.Count())
	}
}
