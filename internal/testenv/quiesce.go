package testenv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// Quiesce waits until the pipeline has nothing left to do at the clock's
// current time, so that a test can then assert what happened — and, above
// all, what did not: no second outcome, no provider call, no event. After
// Quiesce returns:
//
//   - no durable timer (approval expiry, reconciliation poll) is due at
//     Clock.Now() without having fired: with a stages.ManualClock, Advance
//     and then Quiesce, and the processor's own scheduler fires what fell
//     due (Quiesce does not fire timers itself, so a scheduler that failed
//     to wake would be caught, not papered over);
//   - every stage's durable consumer (Env.StageConsumers: those of the
//     processor's own pipeline, a stage inserted with WithEngine too) has delivered the
//     last message its filter selects in its stream, and has nothing
//     pending and nothing unacknowledged. (Consumer info alone is not
//     enough: a consumer learns of a stored message a moment after its
//     PubAck, and meanwhile reports nothing pending.) A message waiting for
//     a delayed redelivery — a transient failure's backoff, or a provider
//     nobody answered inside its unavailable_retry window (RetryAfter) — is
//     unacknowledged, so Quiesce waits for it to be handled;
//   - the Recorder has handled every outcome and incident event the stages
//     published (Recorder.Flush).
//
// A message is never invisible between stages: a stage acks its input only
// after every hand-off, outcome and event it produced was stored (PubAck),
// so the message is pending at the next consumer, or still unacknowledged
// at this one. Quiesce reads the consumers in pipeline order (a stage
// before the stages it hands on to), and only a pass that finds the timers
// and every consumer idle twice in a row counts, so that a timer firing
// between two reads is seen too.
//
// What Quiesce does not wait for: a timer due later (time must pass first;
// advance a manual clock, or wait for the outcome with Recorder.Wait), and
// work that is not a stage's, such as a test's own goroutines. For a
// processor in another process (StartProcess) only the consumers and the
// Recorder are checked: its timers are in its own store.
//
// Quiesce fails the test after WaitTimeout, naming what is still busy.
func (e *Env) Quiesce(t testing.TB) {
	t.Helper()
	e.QuiesceWithin(t, WaitTimeout)
}

// QuiesceWithin is Quiesce with its own timeout: a crash test whose dead
// processor held messages waits out their ack wait before they come back.
func (e *Env) QuiesceWithin(t testing.TB, timeout time.Duration) {
	t.Helper()
	quiesce(t, timeout, e.JS, e.StageConsumers(), e.dueTimer, e.Recorder)
}

// StageConsumers lists the durable consumers Quiesce waits on, in
// pipeline order: the running processor's, from its stage table (a stage
// a test inserted through WithEngine's Pipeline included), or when it is
// stopped those its options' table makes. For a processor in another
// process (StartProcess) they are the default pipeline's.
func (e *Env) StageConsumers() []StageConsumer {
	return consumersOf(e.slot.consumers(e.Subjects, e.Config))
}

// QuiesceFailure is QuiesceWithin for a test of what Quiesce waits on: it
// returns the failure Quiesce would report after timeout, naming what is
// still busy, or "" once everything is idle.
func (e *Env) QuiesceFailure(timeout time.Duration) (msg string) {
	tb, stop := Standalone()
	defer stop()
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	e.QuiesceWithin(tb, timeout)
	return ""
}

// QuiesceConsumers is Quiesce for a rig without an Env (one runner on
// streams of its own, say): it waits until every consumer has delivered
// and had acknowledged everything its filter selects, twice in a row,
// then flushes rec (nil: none). The consumers must exist. It fails the
// test after WaitTimeout.
func QuiesceConsumers(t testing.TB, js jetstream.JetStream, rec *Recorder, consumers ...StageConsumer) {
	t.Helper()
	quiesce(t, WaitTimeout, js, consumers, nil, rec)
}

// QuiesceConsumersWithin is QuiesceConsumers with its own timeout.
func QuiesceConsumersWithin(t testing.TB, timeout time.Duration, js jetstream.JetStream, rec *Recorder, consumers ...StageConsumer) {
	t.Helper()
	quiesce(t, timeout, js, consumers, nil, rec)
}

// quiesce polls until timers (nil: none) and every consumer are idle twice
// in a row, then flushes rec.
func quiesce(t testing.TB, timeout time.Duration, js jetstream.JetStream, consumers []StageConsumer, timers func() (string, bool), rec *Recorder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+10*time.Second)
	defer cancel()
	deadline := time.Now().Add(timeout)
	streams := map[string]jetstream.Stream{}
	for quiet := 0; quiet < 2; {
		busy, err := busy(ctx, js, consumers, timers, streams)
		if err != nil {
			// JetStream not answering for a moment (a leader being
			// elected after a partition heals: 503 "temporarily
			// unavailable", a timeout) is not a verdict: asked again
			// until the deadline, and only then a failure.
			if time.Now().After(deadline) {
				t.Fatalf("testenv: Quiesce: %v", err)
			}
			quiet = 0
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if busy == "" {
			quiet++
			continue
		}
		quiet = 0
		if time.Now().After(deadline) {
			t.Fatalf("testenv: Quiesce: not idle after %s: %s", timeout, busy)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if rec != nil {
		rec.FlushWithin(t, max(time.Until(deadline), time.Second))
	}
}

// busy returns what is not idle, or "" when nothing is. streams caches
// the stream handles.
func busy(ctx context.Context, js jetstream.JetStream, consumers []StageConsumer, timers func() (string, bool), streams map[string]jetstream.Stream) (string, error) {
	if timers != nil {
		if due, ok := timers(); ok {
			return due, nil
		}
	}
	for _, c := range consumers {
		cons, err := js.Consumer(ctx, c.Stream, c.Name)
		if err != nil {
			return "", fmt.Errorf("consumer %s on %s: %w", c.Name, c.Stream, err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return "", fmt.Errorf("consumer %s on %s: %w", c.Name, c.Stream, err)
		}
		if info.NumPending != 0 || info.NumAckPending != 0 {
			return fmt.Sprintf("consumer %s (stream %s) has %d pending and %d unacknowledged (%d of them redelivered)",
				c.Name, c.Stream, info.NumPending, info.NumAckPending, info.NumRedelivered), nil
		}
		// A consumer learns of a stored message a moment after its PubAck:
		// until then it reports nothing pending. Compare with the stream.
		last, err := lastSeq(ctx, js, streams, c.Stream, info.Config)
		if err != nil {
			return "", err
		}
		if info.Delivered.Stream < last {
			return fmt.Sprintf("consumer %s (stream %s) has not yet seen stream message %d (delivered up to %d)",
				c.Name, c.Stream, last, info.Delivered.Stream), nil
		}
	}
	return "", nil
}

// lastSeq is the sequence of the last message in stream that the
// consumer's filter selects (0: none).
func lastSeq(ctx context.Context, js jetstream.JetStream, streams map[string]jetstream.Stream, name string, cfg jetstream.ConsumerConfig) (uint64, error) {
	s, ok := streams[name]
	if !ok {
		var err error
		if s, err = js.Stream(ctx, name); err != nil {
			return 0, fmt.Errorf("stream %s: %w", name, err)
		}
		streams[name] = s
	}
	filters := cfg.FilterSubjects
	if cfg.FilterSubject != "" {
		filters = append(filters, cfg.FilterSubject)
	}
	if len(filters) == 0 {
		info, err := s.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("stream %s: %w", name, err)
		}
		return info.State.LastSeq, nil
	}
	var last uint64
	for _, f := range filters {
		m, err := s.GetLastMsgForSubject(ctx, f)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("stream %s: last message on %s: %w", name, f, err)
		}
		last = max(last, m.Sequence)
	}
	return last, nil
}

// dueTimer describes a timer of the in-process processor that is due and
// has not fired yet.
func (e *Env) dueTimer() (string, bool) {
	p := e.Processor()
	if p == nil {
		return "", false
	}
	select {
	case <-p.Done():
		return "", false // stopped by itself (its store is closed)
	default:
	}
	now := stages.NowMs(e.Clock)
	due, err := p.Store().DueTimers(now, 1)
	if err != nil || len(due) == 0 {
		return "", false
	}
	return fmt.Sprintf("timer %s due at %d ms has not fired (clock at %d ms)", due[0].ID, due[0].DueMs, now), true
}

// A StageConsumer is one stage's durable consumer and the stream it reads.
type StageConsumer struct {
	Name, Stream string
}

// StageConsumers lists every durable consumer of the default pipeline
// for configuration c (engine.Consumers: the stage table; with each host's
// consumers where hosts have their own) in pipeline order: a consumer comes
// before every consumer it hands messages on to (hosts feed admission and
// grants; admission feeds grounding, grounding authorization;
// authorization and grants feed dispatch; a Scheduled stage's timers
// consumer comes after it; dispatch, reconciliation and the operator
// reach reconciliation through its timers).
func StageConsumers(s subjects.Subjects, c *config.Config) []StageConsumer {
	return consumersOf(engine.Consumers(s, c, engine.Pipeline(), nil))
}

func consumersOf(rs []engine.Consumer) []StageConsumer {
	var out []StageConsumer
	for _, r := range rs {
		for _, src := range r.Sources {
			out = append(out, StageConsumer{Name: src.Durable, Stream: src.Stream})
		}
	}
	return out
}
