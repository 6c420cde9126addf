// Timers: where Portcullis's durable timers live: a message
// (kv.Timer) to publish on a stage's timer subject once it falls due —
// reconciliation polls, operator announcements and approval expiries.
// Timers is the interface; there are two homes.
//
//   - Local: the processor's own Pebble store, fired by stages.Scheduler
//     (single node). The Pebble journal and approval store write their
//     timers in the same atomic batch as the rest of a step, not through
//     this interface.
//   - Schedules: nats-server message scheduling (ADR-51) on the stage's
//     timers stream, for processors that share a JetStream cluster. The server
//     publishes the timer message at its due time, once, whichever
//     processors are alive — or none: it waits in the stream for the
//     stage's consumer.
//
// # Why server-side schedules, not a replicated timer bucket
//
// The alternative was a replicated KV bucket of timers that every
// processor scans, claiming a due timer with a compare-and-set (a lease on
// the timer), publishing it and deleting it. That needs a claim protocol,
// lease expiry for claimers that die, a scan or watch per processor and
// three or four replicated writes per timer. A schedule is one replicated
// write: the stream leader keeps the schedules (rebuilt from the stream by
// a new leader) and fires each into the stream through the same raft log.
// Checked with nats-server v2.15.2 and nats.go v1.55.0 on an in-process R3
// cluster (stream AllowMsgSchedules, header `Nats-Schedule: @at <RFC 3339
// time>` with sub-second precision, `Nats-Schedule-Target`):
//
//   - a schedule fires once at its time (±5 ms; the server's timer has a
//     250 ms floor, so one already due fires 250 ms after it is stored);
//   - the fired message keeps the schedule message's headers except the
//     scheduling ones, Nats-Msg-Id and Nats-Expected-*: the seal of
//     internal messages (Actions-Internal-Mac) passes through unchanged;
//   - a second schedule on the same subject replaces the first (one fires);
//   - the schedule message is purged when it fires (Nats-Schedule-Next:
//     purge on the fired message);
//   - 200 schedules across a stream leader step-down followed by the new
//     leader's shutdown: all fired, none twice.
//
// Constraints it brings: the schedule and its target must be in one stream,
// and a stream with schedules cannot use DiscardNew (nor turn schedules
// off again). So each Scheduled stage's timers have a stream of their own
// (subjects.TimersStream: the timer subjects and
// `<prefix>.schedule.<stage>.>`, outside its consumer's filter), which
// allows schedules and discards its oldest messages when full, while the
// stage's hand-offs stay in a stream that refuses when full
// (engine.StreamConfigs). The due time is the
// server's clock, not the processor's: tests with a manual clock use Local.
//
// A timer is armed before the journal's compare-and-set that makes its
// step take effect, so that a crash between the two leaves an extra timer,
// never a missing one. A stage ignores a timer its journal has moved past
// (stale, or armed by a step that lost its compare-and-set to one that
// armed its own), and waits — redelivery with growing delays — for one
// that came before the commit that armed it is visible.
// There is no Cancel for the same reason: a cancelled timer would have to
// be cancelled after the commit and could race the next one, while a stale
// one costs one ignored message.

package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/subjects"
)

// Schedules arms timers as nats-server message schedules in the timers
// stream (subjects.TimersStream) of the stage whose timer subject a timer
// targets. That stream must take the stage's Schedules subjects and allow
// message schedules.
type Schedules struct {
	JS       jetstream.JetStream
	Subjects subjects.Subjects
	// Seal seals the timer message for its target subject.
	Seal Sealer
	// Legacy are the stages whose own stream takes their schedules (made
	// so by an earlier version: engine's legacyScheduled).
	Legacy map[string]bool
}

var _ kv.Timers = (*Schedules)(nil)

// Headers of nats-server message scheduling (ADR-51).
const (
	headerSchedule       = "Nats-Schedule"
	headerScheduleTarget = "Nats-Schedule-Target"
)

// ScheduleID is the subject token of a timer's schedule: the same for the
// same ID and MsgID (arming again replaces the schedule), different for
// another MsgID (another poll of the same fingerprint is another timer).
func ScheduleID(t kv.Timer) string {
	h := sha256.Sum256([]byte(t.ID + "\x00" + t.MsgID))
	return hex.EncodeToString(h[:16])
}

// Arm publishes t's schedule message and waits for its PubAck.
func (s *Schedules) Arm(ctx context.Context, t kv.Timer) error {
	stage, kind, _, ok := s.Subjects.ParseStage(t.Subject)
	if !ok || kind != subjects.KindTimer {
		return fmt.Errorf("timers: %s is not a stage timer subject", t.Subject)
	}
	m := nats.NewMsg(s.Subjects.Schedule(stage, ScheduleID(t)))
	m.Data = t.Data
	s.Seal.Seal(t.Subject, t.Data, m.Header)
	m.Header.Set(headerSchedule, "@at "+time.UnixMilli(t.DueMs).UTC().Format(time.RFC3339Nano))
	m.Header.Set(headerScheduleTarget, t.Subject)
	// No Nats-Msg-Id: arming the same timer again within the duplicate
	// window must replace it, not be dropped as a duplicate. A retried
	// publish stores a second schedule on the same subject, which replaces
	// the first.
	stream := s.Subjects.TimersStream(stage)
	if s.Legacy[stage] {
		stream = s.Subjects.StageStream(stage)
	}
	if _, err := s.JS.PublishMsg(ctx, m, jetstream.WithExpectStream(stream)); err != nil {
		return fmt.Errorf("timers: arm %s: %w", t.ID, err)
	}
	return nil
}

// Sealer seals a message for its subject (the processor's seal.Sealer):
// a stage accepts only timers sealed by a processor.
type Sealer interface {
	Seal(subject string, body []byte, hdr nats.Header)
}
