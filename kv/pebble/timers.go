package pebble

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync"

	"github.com/portcullis/portcullis/kv"
)

func timerKey(dueMs int64, id string) []byte {
	k := appendUint64([]byte{prefixTimer}, timerDue(dueMs))
	return appendString(k, id)
}

// timerDue is a due time as timer keys order it.
func timerDue(dueMs int64) uint64 { return uint64(max(dueMs, 0)) }

// timerFloor is a due time before which no timer is pending, so that the
// scheduler's scans (DueTimers, NextTimerDue) seek past the deletions of
// the timers already fired instead of stepping over each of them: Pebble
// keeps a deleted key's tombstone until a compaction reaches it, and every
// proposal that arms a timer leaves one at the front of the timer keys.
// Without the floor, draining 100,000 queued proposals spent 5 % of all
// CPU there, each scan longer than the one before (BENCHMARKS.md).
//
// A scan raises the floor to the first pending timer it found, but only
// if no commit added a timer since the scan read the floor (gen); a commit
// that added timers lowers it to their earliest after it is durable and
// before it wakes the scheduler. A scan whose snapshot missed such a timer
// therefore either saw gen move and raises nothing, or raised the floor
// before the commit lowered it again.
type timerFloor struct {
	mu  sync.Mutex
	due uint64 // no pending timer is due before it
	gen uint64 // commits that added timers
}

func (f *timerFloor) read() (due, gen uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.due, f.gen
}

// lower follows a commit that added timers, the earliest due at due.
func (f *timerFloor) lower(due uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.due = min(f.due, due)
	f.gen++
}

// raise moves the floor up to due, found by a scan that read gen, unless a
// timer was added since.
func (f *timerFloor) raise(gen, due uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gen == gen && due > f.due {
		f.due = due
	}
}

func timerIndexKey(id string) []byte { return appendString([]byte{prefixTimerIndex}, id) }

// AddTimer schedules t, replacing a timer with the same ID. Callers
// serialize timers of one ID (they hold the key lock of what it is for).
func (b *Batch) AddTimer(t kv.Timer) {
	if due := timerDue(t.DueMs); !b.addsTimer || due < b.earliestTimer {
		b.earliestTimer = due
	}
	b.addsTimer = true
	b.CancelTimer(t.ID)
	b.set(timerKey(t.DueMs, t.ID), t)
	b.set(timerIndexKey(t.ID), t.DueMs)
}

// CancelTimer removes the timer with this ID, if any.
func (b *Batch) CancelTimer(id string) {
	if b.err != nil {
		return
	}
	var due int64
	found, err := b.s.get(timerIndexKey(id), &due)
	if err != nil {
		b.err = err
		return
	}
	if found {
		b.delete(timerKey(due, id))
		b.delete(timerIndexKey(id))
	}
}

// DeleteFired removes a timer that was published. It leaves the id's index
// entry alone: reading the index here and committing later could drop the
// entry of a timer re-armed in between. A stale index entry points at
// nothing and goes with the id's next AddTimer or CancelTimer.
func (b *Batch) DeleteFired(t kv.Timer) {
	b.delete(timerKey(t.DueMs, t.ID))
}

// DueTimers returns up to limit timers due at or before nowMs, earliest first.
func (s *Store) DueTimers(nowMs int64, limit int) ([]kv.Timer, error) {
	var out []kv.Timer
	floor, gen := s.timers.read()
	now := timerDue(nowMs)
	if floor > now {
		return nil, nil
	}
	lower := appendUint64([]byte{prefixTimer}, floor)
	upper := appendUint64([]byte{prefixTimer}, now+1)
	err := s.scanRange(lower, upper, func(_, val []byte) (bool, error) {
		var t kv.Timer
		if err := decode(val, &t); err != nil {
			return false, err
		}
		out = append(out, t)
		return len(out) < limit, nil
	})
	switch {
	case err != nil:
	case len(out) == 0:
		s.timers.raise(gen, now+1)
	default:
		s.timers.raise(gen, timerDue(out[0].DueMs))
	}
	return out, err
}

// TimerAdded receives (at most one pending signal) after a commit that
// added a timer: the scheduler sleeps until the earliest timer, and a new
// one may be earlier.
func (s *Store) TimerAdded() <-chan struct{} { return s.timerAdded }

// NextTimerDue returns the due time of the earliest timer.
func (s *Store) NextTimerDue() (dueMs int64, ok bool, err error) {
	floor, gen := s.timers.read()
	if floor == math.MaxUint64 {
		return 0, false, nil
	}
	lower := appendUint64([]byte{prefixTimer}, floor)
	err = s.scanRange(lower, prefixEnd([]byte{prefixTimer}), func(key, _ []byte) (bool, error) {
		if len(key) < 9 {
			return false, fmt.Errorf("%w: timer key", ErrCorrupt)
		}
		dueMs, ok = int64(binary.BigEndian.Uint64(key[1:9])), true
		return false, nil
	})
	switch {
	case err != nil:
	case ok:
		s.timers.raise(gen, uint64(dueMs))
	default:
		s.timers.raise(gen, math.MaxUint64)
	}
	return dueMs, ok, err
}

// Timer returns the pending timer with this ID.
func (s *Store) Timer(id string) (kv.Timer, bool, error) {
	var due int64
	found, err := s.get(timerIndexKey(id), &due)
	if err != nil || !found {
		return kv.Timer{}, false, err
	}
	var t kv.Timer
	found, err = s.get(timerKey(due, id), &t)
	return t, found, err
}

var _ kv.TimerQueue = (*Store)(nil)

// DeleteFired removes timers that were published (kv.TimerQueue), without
// waiting for the disk: losing the deletion only republishes a fired
// timer, which the stream's duplicate window or the stage's own checks
// absorb.
func (s *Store) DeleteFired(fired []kv.Timer) error {
	if len(fired) == 0 {
		return nil
	}
	b := s.NewBatch()
	for _, t := range fired {
		b.DeleteFired(t)
	}
	return b.Commit(NoSync)
}

// Arm adds t to the timer table with Sync (kv.Timers): the scheduler
// fires it. A timer with the same ID replaces the pending one.
func (s *Store) Arm(_ context.Context, t kv.Timer) error {
	b := s.NewBatch()
	b.AddTimer(t)
	if err := b.Commit(Sync); err != nil {
		return fmt.Errorf("timers: arm %s: %w", t.ID, err)
	}
	return nil
}
