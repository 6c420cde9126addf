package kv

import "context"

// Timers arms durable timers: kv/pebble's Store (the processor's timer
// table, which stages.Scheduler fires) on one node, kv/jetstream's
// Schedules (nats-server message schedules) on a cluster.
type Timers interface {
	// Arm schedules t: its message (t.Data, sealed for t.Subject) is
	// published on t.Subject at t.DueMs, or at once if that is past.
	// Arming a timer with the same ID and MsgID again replaces it; a timer
	// with another MsgID is another timer. A timed-out Arm may have armed.
	Arm(ctx context.Context, t Timer) error
}

// TimerQueue is a timer table its processor fires itself (kv/pebble's
// Store; JetStream's Schedules fire on their own and need none): the
// scheduler (stages.Scheduler) publishes what is due, then deletes it. A
// crash between the two fires the timer again, under the same message id.
type TimerQueue interface {
	Timers
	// DueTimers returns up to limit timers due at or before nowMs,
	// earliest first.
	DueTimers(nowMs int64, limit int) ([]Timer, error)
	// NextTimerDue returns the due time of the earliest timer; ok false
	// when there is none.
	NextTimerDue() (dueMs int64, ok bool, err error)
	// TimerAdded receives (at most one pending signal) after a write that
	// added a timer, which may be earlier than the earliest known.
	TimerAdded() <-chan struct{}
	// DeleteFired removes timers that were published. It need not be
	// durable: a deletion lost in a crash only fires the timer again.
	// A timer re-armed since under its ID with another due time is kept.
	DeleteFired(fired []Timer) error
}

// fireBatch is how many due timers FireDue reads at a time.
const fireBatch = 256

// FireDue publishes every timer of q due at or before nowMs, earliest
// first, and deletes what it published: the store's half of a scheduler
// (stages.Scheduler publishes, sealed, on JetStream). A publish error
// stops it, returned as it is, after the timers published before it are
// deleted. A crash between a publish and its deletion publishes the timer
// again, under the same MsgID.
func FireDue(q TimerQueue, nowMs int64, publish func(Timer) error) error {
	for {
		due, err := q.DueTimers(nowMs, fireBatch)
		if err != nil || len(due) == 0 {
			return err
		}
		var fired []Timer
		for _, t := range due {
			if err := publish(t); err != nil {
				if derr := q.DeleteFired(fired); derr != nil {
					return derr
				}
				return err
			}
			fired = append(fired, t)
		}
		if err := q.DeleteFired(fired); err != nil {
			return err
		}
		if len(due) < fireBatch {
			return nil
		}
	}
}
