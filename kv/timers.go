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
