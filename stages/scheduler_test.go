package stages_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/stages"
)

// The scheduler sleeps until the earliest timer is due on its clock, wakes
// for a timer added meanwhile, and publishes each due timer sealed.
func TestSchedulerFiresOnItsClock(t *testing.T) {
	r := newRig(t)
	clock := stages.NewManualClock(time.UnixMilli(1_000_000))
	sched := &stages.Scheduler{Store: r.store, JS: r.js, Seal: r.seal, Clock: clock}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sched.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	add := func(id string, dueMs int64) {
		b := r.store.NewBatch()
		b.AddTimer(kv.Timer{ID: id, DueMs: dueMs, Subject: "in." + id, Data: []byte(id), MsgID: id})
		if err := b.Commit(pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	fired := func(want int) []string {
		t.Helper()
		testenv.WaitFor(t, fmt.Sprintf("%d timers fired", want), func() bool { return r.streamMsgs(t, "IN") >= uint64(want) })
		s, _ := r.js.Stream(context.Background(), "IN")
		var ids []string
		for seq := uint64(1); seq <= uint64(want); seq++ {
			m, err := s.GetMsg(context.Background(), seq)
			if err != nil {
				t.Fatal(err)
			}
			if !r.seal.Check(m.Subject, m.Data, m.Header) {
				t.Errorf("timer %s not sealed", m.Data)
			}
			ids = append(ids, string(m.Data))
		}
		return ids
	}
	add("later", 1_000_000+10*60_000) // due in 10 minutes of the clock
	add("now", 1_000_000)             // due now: fires at once, a sync point
	if got := fired(1); got[0] != "now" {
		t.Fatalf("fired %v", got)
	}
	add("soon", 1_000_000+1_000) // earlier than "later": wakes the scheduler
	clock.Advance(time.Second)
	if got := fired(2); got[1] != "soon" {
		t.Fatalf("fired %v", got)
	}
	// The scheduler deletes what it fired once the whole batch is
	// published: then anything wrongly due with "soon" is in the stream.
	testenv.WaitFor(t, `"soon" deleted once fired`, func() bool { _, found, _ := r.store.Timer("soon"); return !found })
	if n := r.streamMsgs(t, "IN"); n != 2 {
		t.Fatalf("%d fired before their time", n)
	}
	clock.Advance(10 * time.Minute)
	if got := fired(3); got[2] != "later" {
		t.Fatalf("fired %v", got)
	}
	if due, ok, _ := r.store.NextTimerDue(); ok {
		t.Errorf("a fired timer is still pending (due %d)", due)
	}
}
