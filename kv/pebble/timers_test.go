package pebble

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/portcullis/portcullis/kv"
)

// fire takes every timer due at nowMs as the scheduler does: due timers,
// then their deletion.
func fire(t testing.TB, s *Store, nowMs int64) []kv.Timer {
	t.Helper()
	all, err := fireDue(s, nowMs)
	if err != nil {
		t.Fatal(err)
	}
	return all
}

func fireDue(s *Store, nowMs int64) ([]kv.Timer, error) {
	var all []kv.Timer
	for {
		due, err := s.DueTimers(nowMs, 256)
		if err != nil || len(due) == 0 {
			return all, err
		}
		b := s.NewBatch()
		for _, tm := range due {
			b.DeleteFired(tm)
		}
		if err := b.Commit(NoSync); err != nil {
			return all, err
		}
		all = append(all, due...)
	}
}

func arm(t testing.TB, s *Store, timers ...kv.Timer) {
	t.Helper()
	b := s.NewBatch()
	for _, tm := range timers {
		b.AddTimer(tm)
	}
	if err := b.Commit(NoSync); err != nil {
		t.Fatal(err)
	}
}

// TestTimerFloor: once the scans have moved the floor past fired timers, a
// timer armed earlier than the floor (due in the past, or before the
// timers that remain) is still found by both scans.
func TestTimerFloor(t *testing.T) {
	s := open(t)
	arm(t, s, kv.Timer{ID: "a", DueMs: 100}, kv.Timer{ID: "b", DueMs: 200}, kv.Timer{ID: "c", DueMs: 900})
	if got := fire(t, s, 500); len(got) != 2 {
		t.Fatalf("fired %+v, want a and b", got)
	}
	if due, ok, err := s.NextTimerDue(); err != nil || !ok || due != 900 {
		t.Fatalf("NextTimerDue = %d %v %v, want 900", due, ok, err)
	}
	if f, _ := s.timers.read(); f != 900 {
		t.Fatalf("floor %d, want 900: the scans did not move it", f)
	}
	// Earlier than the floor: in the past, and before c.
	arm(t, s, kv.Timer{ID: "late", DueMs: 50}, kv.Timer{ID: "d", DueMs: 600})
	if due, ok, err := s.NextTimerDue(); err != nil || !ok || due != 50 {
		t.Fatalf("NextTimerDue = %d %v %v, want 50", due, ok, err)
	}
	if got := fire(t, s, 700); len(got) != 2 || got[0].ID != "late" || got[1].ID != "d" {
		t.Fatalf("fired %+v, want late and d", got)
	}
	if got := fire(t, s, 1000); len(got) != 1 || got[0].ID != "c" {
		t.Fatalf("fired %+v, want c", got)
	}
	// None left: the floor is past everything, and a new timer lowers it.
	if _, ok, err := s.NextTimerDue(); err != nil || ok {
		t.Fatalf("NextTimerDue ok=%v err=%v with no timer", ok, err)
	}
	arm(t, s, kv.Timer{ID: "e", DueMs: 10})
	if due, ok, err := s.NextTimerDue(); err != nil || !ok || due != 10 {
		t.Fatalf("NextTimerDue = %d %v %v, want 10", due, ok, err)
	}
	if got := fire(t, s, 10); len(got) != 1 {
		t.Fatalf("fired %+v, want e", got)
	}
}

// TestTimerFloorConcurrent: timers armed while the scheduler scans, each
// due anywhere around the scans' time, are all fired: no raise of the
// floor hides one. Under -race it also checks the floor's locking.
func TestTimerFloorConcurrent(t *testing.T) {
	s := open(t)
	const writers, each = 4, 300
	var now sync.Mutex
	nowMs := int64(1000)
	clock := func(step int64) int64 {
		now.Lock()
		defer now.Unlock()
		nowMs += step
		return nowMs
	}
	fired := map[string]int{}
	stop := make(chan struct{})
	var scans sync.WaitGroup
	scans.Go(func() {
		for {
			due, err := fireDue(s, clock(1))
			if err != nil {
				t.Error(err)
				return
			}
			for _, tm := range due {
				fired[tm.ID]++
			}
			if _, _, err := s.NextTimerDue(); err != nil {
				t.Error(err)
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	})
	var arms sync.WaitGroup
	for w := range writers {
		arms.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range each {
				// Due from well in the past to a little ahead of the scans.
				b := s.NewBatch()
				b.AddTimer(kv.Timer{ID: fmt.Sprintf("w%d-%d", w, i), DueMs: clock(0) - 500 + r.Int64N(600)})
				if err := b.Commit(NoSync); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	arms.Wait()
	close(stop)
	scans.Wait()
	for _, tm := range fire(t, s, clock(1000)) {
		fired[tm.ID]++
	}
	if len(fired) != writers*each {
		t.Fatalf("fired %d distinct timers, want %d", len(fired), writers*each)
	}
	for id, n := range fired {
		if n != 1 {
			t.Errorf("timer %s fired %d times", id, n)
		}
	}
	// Nothing left under the floor either: a scan of every timer key.
	left, err := s.count([]byte{prefixTimer})
	if err != nil || left != 0 {
		t.Fatalf("%d timer keys left (err %v)", left, err)
	}
}

// BenchmarkNextTimerAfterFiring: the scheduler's scans once many timers
// have fired and their deletions are still in the store (not compacted):
// with the floor each seeks past them.
func BenchmarkNextTimerAfterFiring(b *testing.B) {
	s := open(b)
	const n = 50000
	for i := 0; i < n; i += 1000 {
		var ts []kv.Timer
		for j := i; j < i+1000; j++ {
			ts = append(ts, kv.Timer{ID: fmt.Sprintf("t%06d", j), DueMs: int64(j)})
		}
		arm(b, s, ts...)
	}
	fire(b, s, n)
	arm(b, s, kv.Timer{ID: "last", DueMs: 2 * n})
	b.ResetTimer()
	for b.Loop() {
		if _, ok, err := s.NextTimerDue(); err != nil || !ok {
			b.Fatal(ok, err)
		}
		if _, err := s.DueTimers(n+1, 256); err != nil {
			b.Fatal(err)
		}
	}
}
