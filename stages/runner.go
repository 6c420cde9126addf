package stages

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/fault"
	"github.com/portcullis/portcullis/internal/seal"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// OutcomeLog records each proposal's last outcome before it is published
// (kv.Store implements it), so that a repeated delivery can republish it.
type OutcomeLog interface {
	RecordOutcomes(outcomes []schema.Outcome) error
}

// Deps are what every runner shares.
type Deps struct {
	JS jetstream.JetStream
	// Seal seals every hand-off a stage publishes and checks the input of
	// stages that consume internal subjects.
	Seal     *seal.Sealer
	Subjects subjects.Subjects
	Metrics  *metrics.Metrics
	Outcomes OutcomeLog
	Clock    Clock
	Log      *slog.Logger
}

// RunnerConfig configures one stage's consumer.
type RunnerConfig struct {
	// Stage is the durable consumer name and the `stage` metric label.
	Stage string
	// Stream and FilterSubject select what the stage consumes.
	Stream        string
	FilterSubject string
	// Internal: the stage consumes internal subjects, so every input must
	// carry a valid seal; one that does not is terminated unread with the
	// INTERNAL_MESSAGE_REJECTED event of Phase.
	Internal bool
	Phase    schema.Phase
	// Workers handle messages concurrently. Default 4.
	Workers int
	// AckWait is the server's redelivery timer (and how long a message a
	// crashed processor held waits before redelivery). Default 10s; a handler
	// running longer is kept alive with InProgress every AckWait/3.
	AckWait time.Duration
	// MaxAttempts is the number of deliveries after which GiveUp is asked
	// instead of Handle. Default 5. The server's MaxDeliver is set higher,
	// so that a give-up whose publish fails is retried too.
	MaxAttempts int
	// Backoff is the redelivery delay after the n-th failed delivery.
	// Default 250ms·2^(n-1), at most 10s.
	Backoff func(n uint64) time.Duration
	// PublishTimeout bounds waiting for PubAcks. Default 10s.
	PublishTimeout time.Duration
}

func (c *RunnerConfig) defaults() {
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.AckWait <= 0 {
		c.AckWait = 10 * time.Second
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
	if c.Backoff == nil {
		c.Backoff = DefaultBackoff
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = 10 * time.Second
	}
}

// DefaultBackoff is 250ms·2^(n-1), at most 10s.
func DefaultBackoff(n uint64) time.Duration {
	return Backoff(250*time.Millisecond, 10*time.Second, int(min(n, 64)))
}

// Runner runs one stage: a durable pull consumer with explicit acks, a pool
// of workers, and the publish-then-ack protocol every stage shares.
type Runner struct {
	// requested counts RetryAfter redeliveries by stream sequence.
	requested sync.Map
	cfg       RunnerConfig
	deps      Deps
	h         Handler
	log       *slog.Logger
	// consuming is set while Run's message iterator runs (see Consuming).
	consuming atomic.Bool
}

// NewRunner creates a runner for a stage.
func NewRunner(cfg RunnerConfig, deps Deps, h Handler) *Runner {
	cfg.defaults()
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	return &Runner{cfg: cfg, deps: deps, h: h, log: log.With("stage", cfg.Stage)}
}

// Stage is the runner's stage: its durable consumer's name and its
// `stage` metric label.
func (r *Runner) Stage() string { return r.cfg.Stage }

// Stream is the stream the runner's consumer reads.
func (r *Runner) Stream() string { return r.cfg.Stream }

// Consuming reports whether Run's message iterator is running: true from
// the moment Run has it until Run stops fetching (its context cancelled, or
// the iterator failed). A connection that is down does not clear it; the
// iterator resumes by itself after a reconnect.
func (r *Runner) Consuming() bool { return r.consuming.Load() }

// ConsumerConfig is the durable consumer the runner uses.
func (r *Runner) ConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       r.cfg.Stage,
		FilterSubject: r.cfg.FilterSubject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       r.cfg.AckWait,
		MaxDeliver:    2*r.cfg.MaxAttempts + 10 + MaxRequestedRetries,
		MaxAckPending: max(64, 8*r.cfg.Workers),
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// EnsureConsumer creates or updates the stage's durable consumer.
func (r *Runner) EnsureConsumer(ctx context.Context) (jetstream.Consumer, error) {
	c, err := r.deps.JS.CreateOrUpdateConsumer(ctx, r.cfg.Stream, r.ConsumerConfig())
	if err != nil {
		return nil, fmt.Errorf("stages: consumer %s on %s: %w", r.cfg.Stage, r.cfg.Stream, err)
	}
	return c, nil
}

// Run consumes until ctx is cancelled, then stops fetching, lets the
// workers finish the messages they hold (handlers see workCtx, which
// outlives ctx) and returns.
func (r *Runner) Run(ctx, workCtx context.Context) error {
	cons, err := r.EnsureConsumer(ctx)
	for try := 1; err != nil && ctx.Err() == nil; try++ {
		// The consumer was created at start; JetStream not answering now
		// (a server stopping, a leader moving) is waited out (SPEC §6).
		wait := Backoff(250*time.Millisecond, 5*time.Second, try)
		r.log.Warn("consumer not reachable; trying again", "err", err, "retry", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
			cons, err = r.EnsureConsumer(ctx)
		}
	}
	if ctx.Err() != nil {
		return nil // stopped while starting: nothing was fetched
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(r.cfg.Workers), jetstream.PullExpiry(5*time.Second))
	if ctx.Err() != nil {
		if it != nil {
			it.Stop()
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("stages: %s: messages: %w", r.cfg.Stage, err)
	}
	r.consuming.Store(true)
	stop := context.AfterFunc(ctx, func() {
		r.consuming.Store(false)
		it.Drain()
	})
	defer stop()
	msgs := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	for range r.cfg.Workers {
		wg.Go(func() {
			for m := range msgs {
				r.process(workCtx, m)
			}
		})
	}
	var runErr error
	for {
		m, err := it.Next()
		if errors.Is(err, jetstream.ErrNoHeartbeat) {
			// The consumer's server went away or its leader moved (SPEC §6:
			// never a reason to stop). The iterator pulls again by itself.
			r.log.Warn("consumer heartbeats missed; pulling again", "err", err)
			continue
		}
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				runErr = fmt.Errorf("stages: %s: next: %w", r.cfg.Stage, err)
				it.Stop()
			}
			break
		}
		msgs <- m
	}
	r.consuming.Store(false)
	close(msgs)
	wg.Wait()
	return runErr
}

// process handles one message end to end. Every path ends in an ack, a
// delayed nak, or (never silently) a give-up outcome.
func (r *Runner) process(ctx context.Context, m jetstream.Msg) {
	start := time.Now()
	result := metrics.ResultRetry
	defer func() {
		r.deps.Metrics.StageMessages.WithLabelValues(r.cfg.Stage, result).Inc()
		r.deps.Metrics.StageDuration.WithLabelValues(r.cfg.Stage).Observe(time.Since(start).Seconds())
	}()
	meta, err := m.Metadata()
	if err != nil {
		r.log.Error("message without JetStream metadata; terminated") // its subject is host-chosen: not logged
		_ = m.Term()
		return
	}
	in := &Input{
		Subject:   m.Subject(),
		Data:      m.Data(),
		Header:    m.Headers(),
		Stream:    meta.Stream,
		StreamSeq: meta.Sequence.Stream,
		Delivered: meta.NumDelivered,
	}
	stopBeat := r.heartbeat(m)
	defer stopBeat()
	if r.cfg.Internal && !r.deps.Seal.Check(in.Subject, in.Data, in.Header) {
		result = r.reject(ctx, m, in)
		return
	}

	var res Result
	gaveUp := false
	requested := r.requestedRetries(in.StreamSeq)
	if in.Delivered-requested > uint64(r.cfg.MaxAttempts) || requested >= MaxRequestedRetries {
		gaveUp = true
		res, err = r.h.GiveUp(ctx, in, ErrRetriesExhausted)
	} else {
		res, err = r.h.Handle(ctx, in)
		if err != nil && errors.Is(err, ErrPermanent) {
			gaveUp = true
			res, err = r.h.GiveUp(ctx, in, err)
		}
	}
	if err != nil {
		r.retry(m, in, "handler failed", err)
		return
	}
	if err := r.publish(ctx, in, res); err != nil {
		r.retry(m, in, "publish failed", err)
		return
	}
	if res.Done != nil {
		if err := res.Done(ctx); err != nil {
			r.retry(m, in, "completion failed", err)
			return
		}
	}
	if res.RetryAfter > 0 && !gaveUp {
		r.requested.Store(in.StreamSeq, requested+1)
		if err := m.NakWithDelay(res.RetryAfter); err != nil {
			r.log.Warn("nak failed; redelivery after ack wait", "seq", in.StreamSeq, "err", err)
		}
		result = metrics.ResultRetry
		return
	}
	r.requested.Delete(in.StreamSeq)
	fault.Hit(fault.RunnerAfterPublish)
	if err := m.Ack(); err != nil {
		// The outputs are published under derived ids; a redelivery
		// republishes them as duplicates the streams drop.
		r.log.Warn("ack failed; the message will be redelivered", "seq", in.StreamSeq, "err", err)
	}
	switch {
	case gaveUp:
		result = metrics.ResultGaveUp
		r.log.Error("gave up on a message", "seq", in.StreamSeq, "deliveries", in.Delivered)
	case len(res.Outcomes) > 0 || len(res.Replayed) > 0:
		result = metrics.ResultOutcome
	case len(res.Next) > 0:
		result = metrics.ResultForwarded
	default:
		result = metrics.ResultConsumed
	}
}

// requestedRetries counts the RetryAfter redeliveries of an input so far.
func (r *Runner) requestedRetries(seq uint64) uint64 {
	if n, ok := r.requested.Load(seq); ok {
		return n.(uint64)
	}
	return 0
}

// reject terminates an internal message whose seal failed, after
// publishing the INTERNAL_MESSAGE_REJECTED event. Its content is never read.
func (r *Runner) reject(ctx context.Context, m jetstream.Msg, in *Input) string {
	r.log.Error("internal message without a valid seal; terminated unread", "seq", in.StreamSeq)
	inc := schema.NewIncident(r.cfg.Phase, schema.CodeInternalMessageRejected)
	if err := r.publish(ctx, in, Result{Events: []schema.Incident{inc}}); err != nil {
		r.retry(m, in, "publish failed", err)
		return metrics.ResultRetry
	}
	if err := m.Term(); err != nil {
		r.log.Warn("term failed; the message will be redelivered and rejected again", "seq", in.StreamSeq, "err", err)
	}
	return metrics.ResultRejected
}

func (r *Runner) retry(m jetstream.Msg, in *Input, what string, err error) {
	delay := r.cfg.Backoff(in.Delivered)
	// Errors here are our own wrappings of store, NATS and adapter errors;
	// handlers never put input values in them.
	r.log.Warn(what+"; will retry", "seq", in.StreamSeq, "delivered", in.Delivered, "delay", delay, "err", err)
	if nerr := m.NakWithDelay(delay); nerr != nil {
		r.log.Warn("nak failed; redelivery after ack wait", "seq", in.StreamSeq, "err", nerr)
	}
}

// heartbeat keeps a long-running message from being redelivered.
func (r *Runner) heartbeat(m jetstream.Msg) (stop func()) {
	every := r.cfg.AckWait / 3
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	}()
	return func() { close(done) }
}

// publish records the outcomes, then publishes every output and waits for
// all PubAcks. Message ids derive from the input (stage, stream sequence,
// position), so a redelivered input republishes duplicates the streams drop.
// Incidents and outcomes are counted once their PubAck arrived and was not
// a duplicate's.
func (r *Runner) publish(ctx context.Context, in *Input, res Result) error {
	if len(res.Outcomes) > 0 && !res.Unrecorded && r.deps.Outcomes != nil {
		if err := r.deps.Outcomes.RecordOutcomes(res.Outcomes); errors.Is(err, kv.ErrFailed) {
			// The record only serves repeated deliveries; a store that failed
			// must not also swallow the outcome (CHECKPOINT_FAILED among
			// them). The processor stops on a failed store.
			r.log.Error("outcome not recorded: store failed; publishing it anyway", "seq", in.StreamSeq)
		} else if err != nil {
			return fmt.Errorf("record outcomes: %w", err)
		}
	}
	base := r.cfg.Stage + "/" + strconv.FormatUint(in.StreamSeq, 10)
	var msgs []*nats.Msg
	var events []schema.Incident
	add := func(subject string, data []byte, id string, hdr nats.Header) {
		m := nats.NewMsg(subject)
		m.Data = data
		for k, v := range hdr {
			m.Header[k] = v
		}
		m.Header.Set(jetstream.MsgIDHeader, id)
		msgs = append(msgs, m)
	}
	for i, n := range res.Next {
		id := n.MsgID
		if id == "" {
			id = base + "/n" + strconv.Itoa(i)
		}
		add(n.Subject, n.Data, id, n.Header)
		r.deps.Seal.Seal(n.Subject, n.Data, msgs[len(msgs)-1].Header)
	}
	firstOutcome := len(msgs)
	for i, o := range res.Outcomes {
		data, err := schema.Marshal(o)
		if err != nil {
			return fmt.Errorf("encode outcome: %w", err)
		}
		add(r.deps.Subjects.Outcome(o.Host, o.ProposalID), data, base+"/o"+strconv.Itoa(i), nil)
		events = append(events, o.Incidents...)
	}
	for i, o := range res.Replayed {
		data, err := schema.Marshal(o)
		if err != nil {
			return fmt.Errorf("encode outcome: %w", err)
		}
		add(r.deps.Subjects.Outcome(o.Host, o.ProposalID), data, base+"/r"+strconv.Itoa(i), nil)
	}
	events = append(events, res.Events...)
	now := NowMs(r.deps.Clock)
	firstEvent := len(msgs)
	for i, inc := range events {
		add(r.deps.Subjects.Incident(string(inc.Phase)), schema.MustMarshal(inc.Event(now)), base+"/e"+strconv.Itoa(i), nil)
	}
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		f, err := r.deps.JS.PublishMsgAsync(m)
		if err != nil {
			return fmt.Errorf("publish %s: %w", m.Subject, err)
		}
		futures = append(futures, f)
	}
	timeout := time.NewTimer(r.cfg.PublishTimeout)
	defer timeout.Stop()
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			switch {
			case ack.Duplicate:
				// Published before (a redelivery): counted then.
			case i >= firstEvent:
				inc := events[i-firstEvent]
				r.deps.Metrics.Incidents.WithLabelValues(string(inc.Phase), string(inc.Code)).Inc()
			case i >= firstOutcome && i < firstOutcome+len(res.Outcomes):
				// Replayed outcomes repeat one counted before: not counted.
				r.deps.Metrics.Outcomes.WithLabelValues(string(res.Outcomes[i-firstOutcome].Kind)).Inc()
			}
		case err := <-f.Err():
			return fmt.Errorf("publish %s: %w", f.Msg().Subject, err)
		case <-timeout.C:
			return fmt.Errorf("publish %s: no PubAck within %s", f.Msg().Subject, r.cfg.PublishTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
