package stages

import (
	"slices"
	"testing"
)

// TestBulkheadLanesTakeTurns: inputs queued for one key come out one lane
// (host) at a time, each lane in arrival order, so a host's burst queued
// first delays another host's input by a turn, not by the burst.
func TestBulkheadLanesTakeTurns(t *testing.T) {
	b := newBulkheads(100)
	in := func(id string) *flight { return &flight{key: id} }
	if got := b.enter("p", "b", 1, in("running"), false); got != admitRun {
		t.Fatalf("first input: %v", got)
	}
	for _, id := range []string{"b1", "b2", "b3", "b4"} {
		if got := b.enter("p", "b", 1, in(id), false); got != admitQueue {
			t.Fatalf("%s: %v", id, got)
		}
	}
	b.enter("p", "a", 1, in("a1"), false)
	b.enter("p", "c", 1, in("c1"), false)
	b.enter("p", "a", 1, in("a2"), false)
	var order []string
	for f := b.leave("p"); f != nil; f = b.leave("p") {
		order = append(order, f.key)
	}
	if want := []string{"b1", "a1", "c1", "b2", "a2", "b3", "b4"}; !slices.Equal(order, want) {
		t.Errorf("queue order %v, want %v", order, want)
	}
	if b.queued != 0 || b.active["p"] != 0 {
		t.Errorf("after the queue emptied: %d queued, %d active", b.queued, b.active["p"])
	}
	// Another key is not held up by p's queue.
	if got := b.enter("q", "a", 1, in("q1"), false); got != admitRun {
		t.Errorf("another key: %v", got)
	}
}
