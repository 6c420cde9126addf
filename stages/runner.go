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
	"github.com/prometheus/client_golang/prometheus"

	"github.com/portcullis/portcullis/internal/fault"
	"github.com/portcullis/portcullis/internal/seal"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// OutcomeLog records each proposal's last outcome before it is published
// (kv.Store implements it), so that a repeated delivery can republish it.
// RecordOutcomes need not wait for the disk: the runner calls Flush before
// it acks the input, so that the record is durable before JetStream
// forgets the input (a crash before then redelivers it, and it is recorded
// again).
type OutcomeLog interface {
	RecordOutcomes(outcomes []schema.Outcome) error
	// Flush makes every write committed so far durable; concurrent callers
	// share one fsync.
	Flush() error
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
	// MaxInFlight bounds the inputs handled at once, each in its own
	// goroutine from fetch to ack: a handler that waits (for Pebble's group
	// commit, a provider, its PubAcks) holds one slot, not the stage.
	// Default DefaultMaxInFlight.
	MaxInFlight int
	// Batch is how many messages one pull asks for (the client re-pulls
	// when half are delivered). Default min(MaxInFlight, 128): a message
	// waits in the client's buffer only until a slot frees, and AckWait
	// runs while it waits there.
	Batch int
	// MaxQueued bounds the inputs waiting in bulkhead queues (Bulkheads)
	// across keys. Beyond it an input over its key's limit is redelivered
	// later instead. Default DefaultMaxQueued.
	MaxQueued int
	// AckWait is the server's redelivery timer (and how long a message a
	// crashed processor held waits before redelivery). Default 10s; an
	// input held longer (handled, or queued) is kept alive with InProgress
	// every AckWait/3.
	AckWait time.Duration
	// MaxAttempts is the number of deliveries after which GiveUp is asked
	// instead of Handle. Default 5. The server's MaxDeliver is set higher,
	// so that a give-up whose publish fails is retried too.
	MaxAttempts int
	// Backoff is the redelivery delay after the n-th failed delivery.
	// Default 250ms·2^(n-1), at most 10s.
	Backoff func(n uint64) time.Duration
	// PublishTimeout bounds waiting for PubAcks (and for room among the
	// connection's pending asynchronous publishes). Default 10s.
	PublishTimeout time.Duration
}

// Defaults of RunnerConfig.
const (
	DefaultMaxInFlight = 256
	DefaultMaxQueued   = 4096
)

// MaxDeferrals bounds the redeliveries of one input that found every
// bulkhead queue full. They do not count toward MaxAttempts; after them
// the input is queued whatever the bound.
const MaxDeferrals = 64

func (c *RunnerConfig) defaults() {
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.Batch <= 0 {
		c.Batch = min(c.MaxInFlight, 128)
	}
	if c.MaxQueued <= 0 {
		c.MaxQueued = DefaultMaxQueued
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

// Runner runs one stage: a durable pull consumer with explicit acks, up to
// MaxInFlight inputs handled at once (bulkheads per key, for handlers that
// name them), and the publish-then-ack protocol every stage shares:
//
//   - outcomes are recorded, then every output is published
//     asynchronously under a message id derived from the input;
//   - once every PubAck arrived, Done runs, the store is flushed (writes a
//     handler made without Sync become durable, one fsync shared by every
//     input acked at that moment), and the input is acked;
//   - any failure before that redelivers the input, which republishes the
//     same ids (duplicates the streams drop).
type Runner struct {
	// requested counts RetryAfter redeliveries by stream sequence;
	// deferred counts redeliveries of inputs every bulkhead queue was too
	// full to take. Neither counts toward MaxAttempts.
	requested sync.Map
	deferred  sync.Map
	cfg       RunnerConfig
	deps      Deps
	h         Handler
	log       *slog.Logger
	// consuming is set while Run's message iterator runs (see Consuming).
	consuming atomic.Bool
	live      liveSet
	bulk      *bulkheads
	// counters are the stage's StageMessages series, by result.
	counters map[string]prometheus.Counter
	duration prometheus.Observer
}

// NewRunner creates a runner for a stage.
func NewRunner(cfg RunnerConfig, deps Deps, h Handler) *Runner {
	cfg.defaults()
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	r := &Runner{cfg: cfg, deps: deps, h: h, log: log.With("stage", cfg.Stage),
		bulk:     newBulkheads(cfg.MaxQueued),
		counters: map[string]prometheus.Counter{}}
	for _, res := range metrics.Results() {
		r.counters[res] = deps.Metrics.StageMessages.WithLabelValues(cfg.Stage, res)
	}
	r.duration = deps.Metrics.StageDuration.WithLabelValues(cfg.Stage)
	r.live.flights = map[*flight]struct{}{}
	return r
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

// ConsumerConfig is the durable consumer the runner uses. MaxAckPending
// covers what the runner may hold delivered and unacknowledged: the
// client's buffer, the inputs in flight and those queued in bulkheads.
func (r *Runner) ConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       r.cfg.Stage,
		FilterSubject: r.cfg.FilterSubject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       r.cfg.AckWait,
		MaxDeliver:    2*r.cfg.MaxAttempts + 10 + MaxRequestedRetries + MaxDeferrals,
		MaxAckPending: 2*r.cfg.Batch + r.cfg.MaxInFlight + r.cfg.MaxQueued,
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

// Run consumes until ctx is cancelled, then stops fetching, redelivers the
// inputs queued in bulkheads, lets the inputs in flight finish (handlers
// see workCtx, which outlives ctx) and returns.
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
	if err != nil {
		return err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(r.cfg.Batch), jetstream.PullExpiry(5*time.Second))
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
	beatDone := make(chan struct{})
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		r.heartbeats(beatDone)
	}()
	// MaxInFlight long-lived workers: a worker is an in-flight slot (and
	// its stack, grown once by Pebble and the JSON codecs, is reused).
	work := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	for range r.cfg.MaxInFlight {
		wg.Go(func() {
			for m := range work {
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
		work <- m
	}
	close(work)
	r.consuming.Store(false)
	// Queued inputs are not in flight: redelivered now (here or to another
	// processor), not held through the drain.
	for _, f := range r.bulk.close() {
		r.live.remove(f)
		_ = f.m.Nak()
	}
	wg.Wait()
	close(beatDone)
	<-beating
	return runErr
}

// flight is one input the runner holds, from delivery to ack.
type flight struct {
	m        jetstream.Msg
	in       *Input
	key      string
	start    time.Time
	lastBeat time.Time
	gaveUp   bool
}

// liveSet is every input held, for the heartbeats.
type liveSet struct {
	mu      sync.Mutex
	flights map[*flight]struct{}
}

func (l *liveSet) add(f *flight) {
	l.mu.Lock()
	l.flights[f] = struct{}{}
	l.mu.Unlock()
}

func (l *liveSet) remove(f *flight) {
	l.mu.Lock()
	delete(l.flights, f)
	l.mu.Unlock()
}

// heartbeats keeps every input held longer than AckWait/3 (a long
// handler, a queued input) from being redelivered: one ticker for the
// runner, InProgress for each such input.
func (r *Runner) heartbeats(done <-chan struct{}) {
	every := r.cfg.AckWait / 3
	t := time.NewTicker(every / 2)
	defer t.Stop()
	var due []jetstream.Msg
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			due = due[:0]
			r.live.mu.Lock()
			for f := range r.live.flights {
				if now.Sub(f.lastBeat) >= every {
					f.lastBeat = now
					due = append(due, f.m)
				}
			}
			r.live.mu.Unlock()
			for _, m := range due {
				_ = m.InProgress()
			}
		}
	}
}

// process admits one delivered input, on a worker. A rejected input ends
// here; one over its bulkhead's limit waits in its key's queue, and the
// worker goes back to the fetch loop.
func (r *Runner) process(ctx context.Context, m jetstream.Msg) {
	now := time.Now()
	meta, err := m.Metadata()
	if err != nil {
		r.log.Error("message without JetStream metadata; terminated") // its subject is host-chosen: not logged
		_ = m.Term()
		r.count(metrics.ResultRejected, now)
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
	f := &flight{m: m, in: in, start: now, lastBeat: now}
	r.live.add(f)
	if r.cfg.Internal && !r.deps.Seal.Check(in.Subject, in.Data, in.Header) {
		r.count(r.reject(ctx, m, in), now)
		r.live.remove(f)
		return
	}
	requested, deferred := r.seqCount(&r.requested, in.StreamSeq), r.seqCount(&r.deferred, in.StreamSeq)
	attempts := int64(in.Delivered) - int64(requested) - int64(deferred)
	f.gaveUp = attempts > int64(r.cfg.MaxAttempts) || requested >= MaxRequestedRetries
	var limit int
	if !f.gaveUp {
		// Giving up calls nothing outside: no bulkhead.
		f.key, limit = r.bulkheadOf(in)
	}
	if f.key != "" {
		switch r.bulk.enter(f.key, limit, f, deferred >= MaxDeferrals) {
		case admitQueue:
			return // waits without a worker; a finishing one of its key takes it
		case admitDefer:
			r.deferred.Store(in.StreamSeq, deferred+1)
			r.live.remove(f)
			if err := m.NakWithDelay(Backoff(100*time.Millisecond, 5*time.Second, int(deferred)+1)); err != nil {
				r.log.Warn("nak failed; redelivery after ack wait", "seq", in.StreamSeq, "err", err)
			}
			r.count(metrics.ResultRetry, now)
			return
		}
	}
	r.handle(ctx, f)
}

// handle handles one admitted input end to end, then goes on with the
// next input queued on its bulkhead, if any (it takes over the finished
// input's key slot and this worker). Every path ends in an ack, a delayed
// nak, or (never silently) a give-up outcome.
func (r *Runner) handle(ctx context.Context, f *flight) {
	for f != nil {
		result := r.run(ctx, f)
		r.live.remove(f)
		r.count(result, f.start)
		if f.key == "" {
			return
		}
		if f = r.bulk.leave(f.key); f != nil {
			f.start = time.Now()
		}
	}
}

func (r *Runner) count(result string, start time.Time) {
	r.counters[result].Inc()
	r.duration.Observe(time.Since(start).Seconds())
}

// run handles an input and returns its result label.
func (r *Runner) run(ctx context.Context, f *flight) string {
	m, in := f.m, f.in
	var (
		res Result
		err error
	)
	gaveUp := f.gaveUp
	if gaveUp {
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
		return metrics.ResultRetry
	}
	if err := r.publish(ctx, in, res); err != nil {
		r.retry(m, in, "publish failed", err)
		return metrics.ResultRetry
	}
	if res.Done != nil {
		if err := res.Done(ctx); err != nil {
			r.retry(m, in, "completion failed", err)
			return metrics.ResultRetry
		}
	}
	if err := r.flush(); err != nil {
		r.retry(m, in, "store flush failed", err)
		return metrics.ResultRetry
	}
	if res.RetryAfter > 0 && !gaveUp {
		r.requested.Store(in.StreamSeq, r.seqCount(&r.requested, in.StreamSeq)+1)
		if err := m.NakWithDelay(res.RetryAfter); err != nil {
			r.log.Warn("nak failed; redelivery after ack wait", "seq", in.StreamSeq, "err", err)
		}
		return metrics.ResultRetry
	}
	r.requested.Delete(in.StreamSeq)
	r.deferred.Delete(in.StreamSeq)
	fault.Hit(fault.RunnerAfterPublish)
	if err := m.Ack(); err != nil {
		// The outputs are published under derived ids; a redelivery
		// republishes them as duplicates the streams drop.
		r.log.Warn("ack failed; the message will be redelivered", "seq", in.StreamSeq, "err", err)
	}
	switch {
	case gaveUp:
		r.log.Error("gave up on a message", "seq", in.StreamSeq, "deliveries", in.Delivered)
		return metrics.ResultGaveUp
	case len(res.Outcomes) > 0 || len(res.Replayed) > 0:
		return metrics.ResultOutcome
	case len(res.Next) > 0:
		return metrics.ResultForwarded
	default:
		return metrics.ResultConsumed
	}
}

// flush makes the store's writes so far durable before an ack (see
// OutcomeLog).
func (r *Runner) flush() error {
	if r.deps.Outcomes == nil {
		return nil
	}
	if err := r.deps.Outcomes.Flush(); err != nil && !errors.Is(err, kv.ErrFailed) {
		return err
	}
	// A failed store stops the processor; what it could not flush is
	// redelivered after the restart.
	return nil
}

func (r *Runner) seqCount(m *sync.Map, seq uint64) uint64 {
	if n, ok := m.Load(seq); ok {
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
		f, err := r.deps.JS.PublishMsgAsync(m, jetstream.WithStallWait(r.cfg.PublishTimeout))
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
