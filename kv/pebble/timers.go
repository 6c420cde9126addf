package pebble

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/portcullis/portcullis/kv"
)

func timerKey(dueMs int64, id string) []byte {
	k := appendUint64([]byte{prefixTimer}, uint64(max(dueMs, 0)))
	return appendString(k, id)
}

func timerIndexKey(id string) []byte { return appendString([]byte{prefixTimerIndex}, id) }

// AddTimer schedules t, replacing a timer with the same ID. Callers
// serialize timers of one ID (they hold the key lock of what it is for).
func (b *Batch) AddTimer(t kv.Timer) {
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
	upper := appendUint64([]byte{prefixTimer}, uint64(max(nowMs, 0))+1)
	err := s.scanRange([]byte{prefixTimer}, upper, func(_, val []byte) (bool, error) {
		var t kv.Timer
		if err := decode(val, &t); err != nil {
			return false, err
		}
		out = append(out, t)
		return len(out) < limit, nil
	})
	return out, err
}

// TimerAdded receives (at most one pending signal) after a commit that
// added a timer: the scheduler sleeps until the earliest timer, and a new
// one may be earlier.
func (s *Store) TimerAdded() <-chan struct{} { return s.timerAdded }

// NextTimerDue returns the due time of the earliest timer.
func (s *Store) NextTimerDue() (dueMs int64, ok bool, err error) {
	err = s.scan([]byte{prefixTimer}, func(key, _ []byte) (bool, error) {
		if len(key) < 9 {
			return false, fmt.Errorf("%w: timer key", ErrCorrupt)
		}
		dueMs, ok = int64(binary.BigEndian.Uint64(key[1:9])), true
		return false, nil
	})
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

var _ kv.Timers = (*Store)(nil)

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
