package stages

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/fault"
	"github.com/portcullis/portcullis/subjects"
)

// Deps are what every runner shares.
type Deps struct {
	JS jetstream.JetStream
	// Seal seals every hand-off a stage publishes and checks the input of
	// stages that consume internal subjects.
	Seal     Sealer
	Subjects subjects.Subjects
	Metrics  *metrics.Metrics
	// Outcomes records each proposal's last outcome before it is
	// published (kv.OutcomeLog); nil: none is recorded.
	Outcomes kv.OutcomeLog
	// History is the outcome history the runner's outcomes are appended
	// to and read back from (outcomes.go); nil: a runner whose handler
	// returns no outcomes.
	History kv.OutcomeHistory
	Clock   Clock
	Log     *slog.Logger
	// Last is what the processor knows of the outcome subjects it
	// published to (outcomes.go), shared by its runners; nil: each runner
	// keeps its own.
	Last *LastOutcomes
	// EventShare, if set, decides each incident event's share of the
	// incidents stream: whether it is published at all (a host's events
	// of each phase and code are rationed), and the share it is counted in
	// (its subjects.HostHeader). host is the host of the outcome the
	// incident is part of, "" for an event alone (then the input names
	// it, if anything does). nil: every event is published, attributed to
	// no share.
	EventShare func(host string, in *Input, inc schema.Incident) (share string, publish bool)
	// OnFull, if set, hears of each input whose hand-off a stage's stream
	// refused because it is full: full true once, at its first refusal
	// (the input is kept and the hand-off retried until there is room),
	// then full false once, when its hand-off went through or the input
	// left the runner. A stage is full while any input's refusal is
	// outstanding (readiness and actions_stage_full): one hand-off taken
	// while others still wait does not make room for them.
	OnFull func(stage string, full bool)
	// Room, if set, says whether the processor's disks have room for the
	// writes a stage makes. Without it the stage takes no new input
	// (rather than fail in its store): its fetchers wait, and an input
	// fetched meanwhile goes back to the stream for later (or for another
	// processor).
	Room func() bool
	// Wire, if set, is the connection's write batching (wire.go): a stage
	// hands each input's messages, and the acks that are ready together,
	// to the connection under one hold, so that they go out in one write.
	// nil: every publish and ack is flushed as nats.go flushes it.
	Wire *Wire
}

// Source is one durable consumer a runner reads: a stage reads one per
// host where hosts must not wait behind each other (see Runner.Run).
type Source struct {
	Stream        string
	FilterSubject string
	// Durable is the consumer's name; RunnerConfig.Stage when empty.
	Durable string
	// Host is the host whose messages the source reads ("" when it reads
	// several hosts'): RunnerConfig.Admit's.
	Host string
}

// RunnerConfig configures one stage's consumers.
type RunnerConfig struct {
	// Stage is the `stage` metric label, and the durable consumer's name
	// of a source that names none.
	Stage string
	// Stream and FilterSubject select what the stage consumes, when it
	// has one source; Sources, when it has several.
	Stream        string
	FilterSubject string
	Sources       []Source
	// Internal: the stage consumes internal subjects, so every input must
	// carry a valid seal; one that does not is terminated unread with the
	// INTERNAL_MESSAGE_REJECTED event of Phase.
	Internal bool
	Phase    schema.Phase
	// Codes are Phase's rows when Phase is not one of the closed phases
	// (a stage of a test's own: see engine.Spec.Codes); the runner's
	// INTERNAL_MESSAGE_REJECTED and PROCESSING_FAILED events take their
	// boundary from them, else from the closed table (schema.LookupCode).
	Codes []schema.CodeInfo
	// MaxInFlight bounds the inputs handled at once, each in its own
	// goroutine from fetch to ack: a handler that waits (for Pebble's group
	// commit, a provider, its PubAcks) holds one slot, not the stage.
	// Default DefaultMaxInFlight.
	MaxInFlight int
	// Batch is how many messages one pull of one source asks for (the
	// client re-pulls when half are delivered). Default min(MaxInFlight,
	// 128) shared between the sources, at least 8 each: a message waits in
	// the client's buffer only until a slot frees, and AckWait runs while
	// it waits there.
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
	// MaxAttempts is the number of failures (errors that are not
	// Transient, and handler panics) after which GiveUp is asked instead
	// of Handle. Default 5. Transient errors and unanswered publishes are
	// retried for as long as they last and never count.
	MaxAttempts int
	// Backoff is the redelivery delay after the n-th failure. Default
	// 250ms·2^(n-1), at most 10s.
	Backoff func(n uint64) time.Duration
	// Hold is the wait before the n-th retry of a transient error or an
	// unanswered publish, the input kept. Default 250ms·2^(n-1), at most
	// 5s.
	Hold func(n int) time.Duration
	// ReplayEvery is how often a proposal's recorded outcome is
	// republished at most, however many repeats ask for it (Result.Replayed).
	// It must not exceed the streams' duplicate window. Default 10 minutes.
	ReplayEvery time.Duration
	// PublishTimeout bounds waiting for PubAcks (and for room among the
	// connection's pending asynchronous publishes). Default 10s. A publish
	// without a PubAck in time is an unknown: it is sent again, under the
	// same message id.
	PublishTimeout time.Duration
	// MaxInFlightPerSource bounds the inputs of one source (one host's,
	// where each host has its own) that the runner takes on while another
	// source has inputs in flight, or had within the last second
	// (sharesRecent): one host's burst then shares the
	// stage's workers, and the CPU they use, with every other host's
	// proposals instead of taking them all; a source alone may use every
	// worker. An input waiting in a bulkhead's queue gives its slot back
	// (inputs for other providers go on), and runs on the slot of the
	// input it takes over from. Default DefaultMaxInFlightPerSource.
	MaxInFlightPerSource int
	// Admit, if set, is asked by a source's fetcher before it takes the
	// source's next message, and returns once the source may go on — its
	// host has room in the pipeline — or with ctx's error. Meanwhile the
	// source's messages wait in its own stream, holding no worker.
	Admit func(ctx context.Context, s Source) error
}

// Defaults of RunnerConfig.
const (
	DefaultMaxInFlight          = 256
	DefaultMaxQueued            = 4096
	DefaultMaxInFlightPerSource = 16
)

// MaxDeferrals bounds the redeliveries of one input that found every
// bulkhead queue full. They do not count toward MaxAttempts; after them
// the input is queued whatever the bound.
const MaxDeferrals = 64

func (c *RunnerConfig) defaults() {
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if len(c.Sources) == 0 {
		c.Sources = []Source{{Stream: c.Stream, FilterSubject: c.FilterSubject}}
	}
	c.Sources = slices.Clone(c.Sources)
	for i := range c.Sources {
		if c.Sources[i].Durable == "" {
			c.Sources[i].Durable = c.Stage
		}
	}
	if c.MaxInFlightPerSource <= 0 {
		c.MaxInFlightPerSource = DefaultMaxInFlightPerSource
	}
	c.MaxInFlightPerSource = min(c.MaxInFlightPerSource, c.MaxInFlight)
	if c.Batch <= 0 {
		c.Batch = max(min(c.MaxInFlight, 128)/len(c.Sources), 8)
	}
	if len(c.Sources) > 1 {
		// What a source's iterator buffers waits there with its ack wait
		// running: no more than it may take on while others are busy.
		c.Batch = min(c.Batch, c.MaxInFlightPerSource)
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
	if c.Hold == nil {
		c.Hold = DefaultHold
	}
	if c.ReplayEvery <= 0 {
		c.ReplayEvery = 10 * time.Minute
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = 10 * time.Second
	}
}

// DefaultBackoff is 250ms·2^(n-1), at most 10s.
func DefaultBackoff(n uint64) time.Duration {
	return Backoff(250*time.Millisecond, 10*time.Second, int(min(n, 64)))
}

// DefaultHold is 250ms·2^(n-1), at most 5s.
func DefaultHold(n int) time.Duration {
	return Backoff(250*time.Millisecond, 5*time.Second, min(n, 64))
}

// MaxUnseenDeliveries bounds how often an input may be delivered without
// this process seeing the deliveries (to processors that died on it, or
// before this one restarted) before the runner gives up on it instead of
// handling it again: a message that kills every processor that takes it
// must end. It is above every redelivery the runner asks for itself, so
// that only deliveries lost with a process count toward it.
const MaxUnseenDeliveries = 2*MaxRequestedRetries + MaxDeferrals + 32

// Runner runs one stage: a durable pull consumer with explicit acks, up to
// MaxInFlight inputs handled at once (bulkheads per key, for handlers that
// name them), and the publish-then-ack protocol every stage shares:
//
//   - outcomes are recorded, then every output is published
//     asynchronously under a message id derived from the input;
//   - once every PubAck arrived, Done runs, the store is flushed (writes a
//     handler made without Sync become durable, one fsync shared by every
//     input acked at that moment), and the input is acked;
//   - a transient error (an outage, a race: see Transient) and a publish
//     that got no answer are retried here, the input kept alive with
//     progress acks, for as long as they last — a publish that got no
//     answer may have been stored, so nothing that could contradict it is
//     ever published instead; any other failure redelivers the input,
//     which republishes the same ids (duplicates the streams drop), and
//     only such failures count toward giving up.
type Runner struct {
	cfg  RunnerConfig
	deps Deps
	h    Handler
	log  *slog.Logger
	last *LastOutcomes
	// consuming is set while Run's message iterator runs (see Consuming).
	consuming atomic.Bool
	// stopping is closed when Run stops fetching: held inputs are then
	// released for redelivery instead of retried here.
	stopping chan struct{}
	halted   sync.Once
	live     liveSet
	tallies  tallies
	bulk     *bulkheads
	// acks, while Run runs with a Deps.Wire, is what its acker acks
	// (ack).
	acks chan pendingAck
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
	r := &Runner{cfg: cfg, deps: deps, h: h, log: log.With("stage", cfg.Stage), last: deps.Last,
		bulk:     newBulkheads(cfg.MaxQueued),
		stopping: make(chan struct{}),
		counters: map[string]prometheus.Counter{}}
	for _, res := range metrics.Results() {
		r.counters[res] = deps.Metrics.StageMessages.WithLabelValues(cfg.Stage, res)
	}
	r.duration = deps.Metrics.StageDuration.WithLabelValues(cfg.Stage)
	if r.last == nil {
		r.last = NewLastOutcomes(0)
	}
	r.live.flights = map[inputKey]*flight{}
	r.tallies.byKey = map[inputKey]*tally{}
	return r
}

// Stage is the runner's stage: its durable consumer's name (unless its
// sources name theirs) and its `stage` metric label.
func (r *Runner) Stage() string { return r.cfg.Stage }

// Sources are the consumers the runner reads.
func (r *Runner) Sources() []Source { return r.cfg.Sources }

// Consuming reports whether Run's message iterators are running: true from
// the moment Run has them until Run stops fetching (its context cancelled,
// or an iterator failed). A connection that is down does not clear it; the
// iterators resume by themselves after a reconnect.
func (r *Runner) Consuming() bool { return r.consuming.Load() }

// ConsumerConfig is the durable consumer of source s. MaxAckPending covers
// what the runner may hold of it delivered and unacknowledged: the
// client's buffer, the inputs in flight and those queued in bulkheads.
func (r *Runner) ConsumerConfig(s Source) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       s.Durable,
		FilterSubject: s.FilterSubject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       r.cfg.AckWait,
		// Unbounded: the runner ends every input itself (MaxUnseenDeliveries
		// for one that kills its processors); the server stopping
		// delivery would leave it unanswered.
		MaxDeliver:    -1,
		MaxAckPending: 2*r.cfg.Batch + r.cfg.MaxInFlight + r.cfg.MaxQueued,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// EnsureConsumers creates or updates the runner's durable consumers.
func (r *Runner) EnsureConsumers(ctx context.Context) ([]jetstream.Consumer, error) {
	out := make([]jetstream.Consumer, 0, len(r.cfg.Sources))
	for _, s := range r.cfg.Sources {
		c, err := r.deps.JS.CreateOrUpdateConsumer(ctx, s.Stream, r.ConsumerConfig(s))
		if err != nil {
			return nil, fmt.Errorf("stages: consumer %s on %s: %w", s.Durable, s.Stream, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// Run consumes until ctx is cancelled, then stops fetching, redelivers the
// inputs queued in bulkheads, lets the inputs in flight finish (handlers
// see workCtx, which outlives ctx) and returns.
//
// Each source has a fetcher of its own, and they take turns: a fetcher
// hands over one message at a time and waits behind the others for the
// next free worker, so a source with a deep backlog (one host's burst)
// gets one worker in turn with every other source that has work, never
// all of them.
func (r *Runner) Run(ctx, workCtx context.Context) error {
	cons, err := r.EnsureConsumers(ctx)
	for try := 1; err != nil && ctx.Err() == nil; try++ {
		// The consumers were created at start; JetStream not answering now
		// (a server stopping, a leader moving) is waited out (SPEC §6).
		wait := Backoff(250*time.Millisecond, 5*time.Second, try)
		r.log.Warn("consumer not reachable; trying again", "err", err, "retry", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
			cons, err = r.EnsureConsumers(ctx)
		}
	}
	if ctx.Err() != nil {
		return nil // stopped while starting: nothing was fetched
	}
	if err != nil {
		return err
	}
	its := make([]jetstream.MessagesContext, 0, len(cons))
	stopAll := func() {
		for _, it := range its {
			it.Stop()
		}
	}
	for _, c := range cons {
		it, err := c.Messages(jetstream.PullMaxMessages(r.cfg.Batch), jetstream.PullExpiry(5*time.Second))
		if err != nil || ctx.Err() != nil {
			stopAll()
			if ctx.Err() != nil {
				if it != nil {
					it.Stop()
				}
				return nil
			}
			return fmt.Errorf("stages: %s: messages: %w", r.cfg.Stage, err)
		}
		its = append(its, it)
	}
	r.consuming.Store(true)
	stop := context.AfterFunc(ctx, func() {
		r.consuming.Store(false)
		r.halt()
		for _, it := range its {
			it.Drain()
		}
	})
	defer stop()
	beatDone := make(chan struct{})
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		r.heartbeats(beatDone)
	}()
	var acking sync.WaitGroup
	if r.deps.Wire != nil {
		r.acks = make(chan pendingAck, r.cfg.MaxInFlight)
		acking.Go(func() { r.acker(r.acks) })
	}
	// MaxInFlight long-lived workers: a worker is an in-flight slot (and
	// its stack, grown once by Pebble and the JSON codecs, is reused).
	work := make(chan delivery)
	var wg sync.WaitGroup
	for range r.cfg.MaxInFlight {
		wg.Go(func() {
			for d := range work {
				r.process(workCtx, d)
			}
		})
	}
	var (
		fetchers sync.WaitGroup
		errOnce  sync.Once
		runErr   error
	)
	sh := newShares(len(its), r.cfg.MaxInFlightPerSource)
	for i, it := range its {
		done := func() { sh.give(i, true) }
		fetchers.Go(func() {
			gone := 0 // heartbeat misses in a row with the consumer not found
			for {
				if !r.awaitRoom(ctx) {
					return // stopped while waiting for room: the drain goes on
				}
				if r.cfg.Admit != nil && r.cfg.Admit(ctx, r.cfg.Sources[i]) != nil {
					// Stopping: what the iterator holds is redelivered.
					return
				}
				if !sh.take(ctx, i) {
					return
				}
				m, err := it.Next()
				if err == nil {
					sh.started(i)
				} else {
					sh.give(i, false) // no message came for the slot
				}
				if errors.Is(err, jetstream.ErrNoHeartbeat) {
					if gone = runOf(gone, consumerGone(ctx, cons[i])); gone < 2 {
						// The consumer's server went away or its leader
						// moved (SPEC §6: never a reason to stop). The
						// iterator pulls again by itself.
						r.log.Warn("consumer heartbeats missed; pulling again", "err", err)
						continue
					}
					// Deleted under it (said twice, a pull apart): the
					// iterator may only ever see its pulls go unanswered.
					err = fmt.Errorf("%w: %w", err, jetstream.ErrConsumerNotFound)
				}
				if err != nil {
					if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
						errOnce.Do(func() {
							runErr = fmt.Errorf("stages: %s: next: %w", r.cfg.Stage, err)
							r.consuming.Store(false)
							r.halt()
							stopAll() // one consumer gone stops the stage
						})
					}
					return
				}
				if r.deps.Room != nil && !r.deps.Room() {
					_ = m.NakWithDelay(roomPoll) // fetched as the disk filled
					done()
					continue
				}
				work <- delivery{m: m, done: done}
			}
		})
	}
	fetchers.Wait()
	close(work)
	// Queued inputs are not in flight: redelivered now (here or to another
	// processor), not held through the drain. Closed before Consuming turns
	// false, so that from then on no queued input starts (an input in
	// flight that ends would otherwise hand its key to the next one).
	for _, f := range r.bulk.close() {
		r.live.remove(f)
		_ = f.msg().Nak()
	}
	r.consuming.Store(false)
	r.halt() // an iterator failed, or ctx ended: nothing more will be fetched
	wg.Wait()
	if r.acks != nil {
		close(r.acks) // every input's ack is queued: sent before Run returns
		acking.Wait()
		r.acks = nil
	}
	close(beatDone)
	<-beating
	return runErr
}

// roomPoll is how often a stage waiting for disk room looks again.
const roomPoll = 250 * time.Millisecond

// awaitRoom waits while Deps.Room says there is no room; false when ctx
// ended meanwhile.
func (r *Runner) awaitRoom(ctx context.Context) bool {
	for r.deps.Room != nil && !r.deps.Room() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(roomPoll):
		}
	}
	return true
}

// halt closes stopping, once.
func (r *Runner) halt() { r.halted.Do(func() { close(r.stopping) }) }

// shares are the sources' shares of a runner's workers: while another
// source has inputs in flight, or had within the last sharesRecent, a
// source takes on a new input only below its share
// (RunnerConfig.MaxInFlightPerSource); alone, it may use them all — one
// host's burst shares the stage with the others' proposals without
// idling workers nobody else wants. A fetcher takes its slot before it
// waits for its next message (so that it pulls nothing it may not take
// on); only inputs it has handed on count as in flight.
type shares struct {
	mu      sync.Mutex
	taken   []int       // slots taken, a waiting fetcher's included
	busy    []int       // inputs handed on and not done
	last    []time.Time // when each source's last input in flight was done
	share   int
	changed chan struct{} // closed, and replaced, when a slot frees
}

// sharesRecent is how long a source that had inputs in flight still
// counts as busy: a host that sends steadily, one proposal at a time,
// keeps its share of the workers between its proposals.
const sharesRecent = time.Second

func newShares(sources, share int) *shares {
	return &shares{taken: make([]int, sources), busy: make([]int, sources), last: make([]time.Time, sources),
		share: share, changed: make(chan struct{})}
}

// take waits until source i may take on an input and takes its slot;
// false once ctx ended.
func (s *shares) take(ctx context.Context, i int) bool {
	for {
		s.mu.Lock()
		ok, until := s.may(i, time.Now())
		if ok {
			s.taken[i]++
			s.mu.Unlock()
			return true
		}
		changed := s.changed
		s.mu.Unlock()
		var expired <-chan time.Time
		if !until.IsZero() {
			t := time.NewTimer(time.Until(until))
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-changed:
		case <-expired:
		case <-ctx.Done():
			return false
		}
	}
}

// may reports whether source i may take a slot now; if not only because
// another source was busy recently, until is when that no longer holds.
func (s *shares) may(i int, now time.Time) (ok bool, until time.Time) {
	if s.taken[i] < s.share {
		return true, time.Time{}
	}
	for j := range s.busy {
		switch {
		case j == i:
		case s.busy[j] > 0:
			return false, time.Time{}
		case now.Sub(s.last[j]) < sharesRecent:
			until = s.last[j].Add(sharesRecent)
		}
	}
	return until.IsZero(), until
}

// started counts the input source i's slot was taken for as in flight.
func (s *shares) started(i int) {
	s.mu.Lock()
	s.busy[i]++
	s.mu.Unlock()
}

// give frees a slot of source i: its input is done (was started) or none
// came.
func (s *shares) give(i int, started bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.taken[i]--
	if started {
		s.busy[i]--
		s.last[i] = time.Now()
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// delivery is a message a fetcher hands to a worker, and what frees its
// source's slot once the runner no longer holds it.
type delivery struct {
	m    jetstream.Msg
	done func()
}

// flight is one input the runner holds, from delivery to ack.
type flight struct {
	// done frees the input's slot of its source (delivery.done); nothing
	// for an input that waited in a bulkhead's queue (it gave its slot
	// back there).
	done     func()
	in       *Input
	key      string
	start    time.Time
	lastBeat time.Time
	gaveUp   bool
	// refused is the stage whose stream refused the input's hand-off,
	// while that refusal is outstanding (Deps.OnFull); "" for none.
	refused string
	// m is the input's newest delivery: a redelivery of an input held here
	// replaces it, so that progress acks and the ack go to the delivery
	// the server waits for.
	mu sync.Mutex
	m  jetstream.Msg
}

// inputKey names an input: its stream and sequence (a runner with several
// sources reads several streams).
type inputKey struct {
	stream string
	seq    uint64
}

func keyOf(in *Input) inputKey { return inputKey{in.Stream, in.StreamSeq} }

// consumerGone reports whether JetStream says c no longer exists — not
// merely that it did not answer, which an outage or a leader election
// also looks like.
func consumerGone(ctx context.Context, c jetstream.Consumer) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := c.Info(ctx)
	return errors.Is(err, jetstream.ErrConsumerNotFound)
}

// runOf counts a run: n+1 while ok holds, else 0.
func runOf(n int, ok bool) int {
	if ok {
		return n + 1
	}
	return 0
}

// liveSet is every input held, by key, for the heartbeats and to recognise
// a redelivery of one that is still held.
type liveSet struct {
	mu      sync.Mutex
	flights map[inputKey]*flight
}

// add holds f, unless its input is held already: then f's delivery
// replaces the held one's, and add reports false.
func (l *liveSet) add(f *flight) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if held, ok := l.flights[keyOf(f.in)]; ok {
		held.mu.Lock()
		held.m = f.m
		held.mu.Unlock()
		return false
	}
	l.flights[keyOf(f.in)] = f
	return true
}

func (l *liveSet) remove(f *flight) {
	l.mu.Lock()
	if l.flights[keyOf(f.in)] == f {
		delete(l.flights, keyOf(f.in))
	}
	l.mu.Unlock()
}

// msg is the flight's newest delivery.
func (f *flight) msg() jetstream.Msg {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m
}

// heartbeats keeps every input held longer than AckWait/3 (a long
// handler, a queued input, one held through an outage) from being
// redelivered: one ticker for the runner, InProgress for each such input.
// It also forgets the tallies of inputs long gone.
func (r *Runner) heartbeats(done <-chan struct{}) {
	every := r.cfg.AckWait / 3
	t := time.NewTicker(every / 2)
	defer t.Stop()
	var due []jetstream.Msg
	lastSweep := time.Now()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			due = due[:0]
			r.live.mu.Lock()
			for _, f := range r.live.flights {
				if now.Sub(f.lastBeat) >= every {
					f.lastBeat = now
					due = append(due, f.msg())
				}
			}
			r.live.mu.Unlock()
			for _, m := range due {
				_ = m.InProgress()
			}
			if now.Sub(lastSweep) >= time.Minute {
				lastSweep = now
				r.tallies.sweep(now.Add(-tallyHorizon))
			}
		}
	}
}

// process admits one delivered input, on a worker. A rejected input ends
// here; one over its bulkhead's limit waits in its key's queue, and the
// worker goes back to the fetch loop.
func (r *Runner) process(ctx context.Context, d delivery) {
	m, now := d.m, time.Now()
	meta, err := m.Metadata()
	if err != nil {
		r.log.Error("message without JetStream metadata; terminated") // its subject is host-chosen: not logged
		_ = m.Term()
		r.count(metrics.ResultRejected, now)
		d.done()
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
	t := r.tallies.see(keyOf(in), now)
	f := &flight{m: m, in: in, start: now, lastBeat: now, done: d.done}
	if !r.live.add(f) {
		// Redelivered while held here (its progress acks did not reach
		// the server in time): the held one goes on, and acks this
		// delivery.
		d.done()
		return
	}
	if r.cfg.Internal && !r.deps.Seal.Check(in.Subject, in.Data, in.Header) {
		r.count(r.reject(ctx, f), now)
		r.live.remove(f)
		d.done()
		return
	}
	// Deliveries this process never saw went to processors that did not
	// finish them — killed, or stopped, by this input or by anything else.
	unseen := uint64(0)
	if in.Delivered > t.seen {
		unseen = in.Delivered - t.seen
	}
	f.gaveUp = t.failures >= r.cfg.MaxAttempts || t.requested >= MaxRequestedRetries || unseen >= MaxUnseenDeliveries
	var limit int
	if !f.gaveUp {
		// Giving up calls nothing outside: no bulkhead.
		f.key, limit = r.bulkheadOf(in)
	}
	if f.key != "" {
		switch r.bulk.enter(f.key, r.lane(in), limit, f, t.deferred >= MaxDeferrals) {
		case admitQueue:
			// It waits without a worker, and without its source's slot
			// (a provider that hangs must not keep its host's inputs for
			// other providers from being fetched); a finishing input of
			// its key takes it, and lends it its slot.
			d.done()
			return
		case admitDefer:
			r.tallies.add(keyOf(in), func(t *tally) { t.deferred++ })
			r.live.remove(f)
			if err := m.NakWithDelay(Backoff(100*time.Millisecond, 5*time.Second, int(t.deferred)+1)); err != nil {
				r.log.Warn("nak failed; redelivery after ack wait", "seq", in.StreamSeq, "err", err)
			}
			r.count(metrics.ResultRetry, now)
			d.done()
			return
		}
	}
	r.handle(ctx, f)
}

// lane is in's host, as its subject names it (a stage hand-off's token,
// an ingress subject), or "": its lane in a bulkhead's queue.
func (r *Runner) lane(in *Input) string {
	if _, _, id, ok := r.deps.Subjects.ParseStage(in.Subject); ok {
		if h, _, ok := subjects.ParseProposalToken(id); ok {
			return h
		}
		return ""
	}
	h, _ := r.deps.Subjects.IngressHost(in.Subject)
	return h
}

// handle handles one admitted input end to end, then goes on with the
// next input queued on its bulkhead, if any (it takes over the finished
// input's key slot and this worker). Every path ends in an ack, a delayed
// nak, or (never silently) a give-up outcome.
func (r *Runner) handle(ctx context.Context, f *flight) {
	for f != nil {
		result := r.run(ctx, f)
		r.refusal(f, "") // done with, or handed back: no longer waiting
		r.live.remove(f)
		r.count(result, f.start)
		f.done()
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

// run handles an input and returns its result label: the handler (or
// GiveUp) until it decides, its outputs until JetStream has them, Done,
// then the ack.
func (r *Runner) run(ctx context.Context, f *flight) string {
	in := f.in
	gaveUp := f.gaveUp
	var cause error = ErrRetriesExhausted
	var res Result
	for try := 1; ; try++ {
		var err error
		if gaveUp {
			res, err = r.call(func() (Result, error) { return r.h.GiveUp(ctx, in, cause) })
		} else {
			res, err = r.call(func() (Result, error) { return r.h.Handle(ctx, in) })
			if errors.Is(err, ErrPermanent) {
				gaveUp, cause = true, err
				continue
			}
		}
		if err == nil {
			break
		}
		if Transient(err) {
			if r.hold(f, try, "handler: transient failure", err) {
				continue
			}
			return r.release(f)
		}
		n := r.tallies.fail(keyOf(in))
		switch {
		case !gaveUp && n >= r.cfg.MaxAttempts:
			r.log.Warn("handler failed; giving up", "seq", in.StreamSeq, "failures", n, "err", err)
			gaveUp = true
			continue
		case gaveUp && n >= 2*r.cfg.MaxAttempts:
			return r.abandon(f, "giving up failed", err)
		}
		return r.retry(f, "handler failed", err, n)
	}
	for try := 1; ; try++ {
		err := r.publish(ctx, in, res)
		var full *fullError
		switch {
		case err == nil:
			r.refusal(f, "")
		case errors.As(err, &full):
			r.refusal(f, full.stage(r.deps.Subjects))
		}
		if err == nil {
			break
		}
		if unpublishable(err) {
			// Never stored, and never will be: a failure of this input.
			if n := r.tallies.fail(keyOf(in)); !gaveUp && n < 2*r.cfg.MaxAttempts {
				return r.retry(f, "output cannot be published", err, n)
			}
			return r.abandon(f, "output cannot be published", err)
		}
		// No answer may mean stored: the same outputs again, under the
		// same message ids, until JetStream answers.
		if r.hold(f, try, "publish failed", err) {
			continue
		}
		return r.release(f)
	}
	if res.Done != nil {
		for try := 1; ; try++ {
			_, err := r.call(func() (Result, error) { return Result{}, res.Done(ctx) })
			if err == nil {
				break
			}
			if Transient(err) {
				if r.hold(f, try, "completion: transient failure", err) {
					continue
				}
				return r.release(f)
			}
			// The outputs are out: a redelivery republishes them as
			// duplicates and runs Done again; never a give-up after them.
			if n := r.tallies.fail(keyOf(in)); n < r.cfg.MaxAttempts {
				return r.retry(f, "completion failed", err, n)
			}
			r.log.Error("completion failed; acking without it", "seq", in.StreamSeq, "err", err)
			break
		}
	}
	for try := 1; ; try++ {
		err := r.flush()
		if err == nil {
			break
		}
		if r.hold(f, try, "store flush failed", err) {
			continue
		}
		return r.release(f)
	}
	if res.RetryAfter > 0 && !gaveUp {
		r.tallies.add(keyOf(in), func(t *tally) { t.requested++ })
		if err := f.msg().NakWithDelay(res.RetryAfter); err != nil {
			r.log.Warn("nak failed; redelivery after ack wait", "seq", in.StreamSeq, "err", err)
		}
		return metrics.ResultRetry
	}
	r.tallies.forget(keyOf(in))
	fault.Hit(fault.RunnerAfterPublish)
	r.ack(f.msg(), in.StreamSeq)
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

// pendingAck is an input's ack, queued for the acker.
type pendingAck struct {
	m   jetstream.Msg
	seq uint64
}

// ack acks an input whose outputs JetStream has and whose Done ran. With
// a Deps.Wire the acker sends it, together with the acks of the inputs
// that ended with it; its worker goes on meanwhile (nothing waits for an
// ack: it is a message without reply).
func (r *Runner) ack(m jetstream.Msg, seq uint64) {
	if r.acks != nil {
		r.acks <- pendingAck{m: m, seq: seq}
		return
	}
	r.sendAck(m, seq)
}

func (r *Runner) sendAck(m jetstream.Msg, seq uint64) {
	if err := m.Ack(); err != nil {
		// The outputs are published under derived ids; a redelivery
		// republishes them as duplicates the streams drop.
		r.log.Warn("ack failed; the message will be redelivered", "seq", seq, "err", err)
	}
}

// acker sends the queued acks in rounds, each round's under one hold of
// Deps.Wire: one write. A round is what is queued when the acker wakes and
// after one yield — the inputs one group commit released end within one
// scheduling round. Nothing is held while it waits or yields.
func (r *Runner) acker(acks <-chan pendingAck) {
	round := make([]pendingAck, 0, 64)
	for a := range acks {
		round = append(round[:0], a)
		round = queued(acks, round)
		runtime.Gosched()
		round = queued(acks, round)
		r.deps.Wire.Hold()
		for _, a := range round {
			r.sendAck(a.m, a.seq)
		}
		r.deps.Wire.Release()
	}
}

// queued appends to round what acks holds now, without waiting.
func queued(acks <-chan pendingAck, round []pendingAck) []pendingAck {
	for {
		select {
		case a, ok := <-acks:
			if !ok {
				return round
			}
			round = append(round, a)
		default:
			return round
		}
	}
}

// errPanicked is what a handler that panicked returns: a failure of its
// input, counted like any other, never the end of the processor.
var errPanicked = errors.New("stages: the handler panicked")

// call runs a handler function, turning a panic into errPanicked. The
// panic's value is not logged (it may quote the input); its stack is.
func (r *Runner) call(fn func() (Result, error)) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("handler panicked", "stack", string(debug.Stack()))
			res, err = Result{}, errPanicked
		}
	}()
	return fn()
}

// hold waits before the try-th retry of something that failed for no
// fault of the input, the input kept alive by the heartbeats. It reports
// false, at once, once the runner stops fetching: the caller then
// releases the input to be redelivered.
func (r *Runner) hold(f *flight, try int, what string, err error) bool {
	select {
	case <-r.stopping:
		return false
	default:
	}
	if try == 1 || try&(try-1) == 0 {
		// Errors here are our own wrappings of store, NATS and adapter
		// errors; handlers never put input values in them.
		r.log.Warn(what+"; retrying, the input kept", "seq", f.in.StreamSeq, "try", try, "err", err)
	}
	r.counters[metrics.ResultRetry].Inc()
	t := time.NewTimer(r.cfg.Hold(try))
	defer t.Stop()
	select {
	case <-r.stopping:
		return false
	case <-t.C:
		return true
	}
}

// release hands an input held through a transient failure back to the
// server, for another processor (or this one, restarted) to take.
func (r *Runner) release(f *flight) string {
	if err := f.msg().NakWithDelay(250 * time.Millisecond); err != nil {
		r.log.Warn("nak failed; redelivery after ack wait", "seq", f.in.StreamSeq, "err", err)
	}
	return metrics.ResultRetry
}

// retry redelivers an input after its n-th failure.
func (r *Runner) retry(f *flight, what string, err error, n int) string {
	delay := r.cfg.Backoff(uint64(n))
	r.log.Warn(what+"; will retry", "seq", f.in.StreamSeq, "failures", n, "delay", delay, "err", err)
	if nerr := f.msg().NakWithDelay(delay); nerr != nil {
		r.log.Warn("nak failed; redelivery after ack wait", "seq", f.in.StreamSeq, "err", nerr)
	}
	return metrics.ResultRetry
}

// abandon terminates an input even GiveUp could not end: a
// PROCESSING_FAILED event of the stage's phase if it has one, a log line,
// and the gave_up count. Nothing is published on an outcome subject.
func (r *Runner) abandon(f *flight, what string, err error) string {
	r.log.Error(what+"; the message is terminated without an outcome", "seq", f.in.StreamSeq, "err", err)
	if r.cfg.Phase != "" {
		inc := r.incident(schema.CodeProcessingFailed)
		_ = r.publishUntilAnswered(f, Result{Events: []schema.Incident{inc}})
	}
	r.tallies.forget(keyOf(f.in))
	_ = f.msg().Term()
	return metrics.ResultGaveUp
}

// publishUntilAnswered publishes res, retrying while JetStream does not
// answer; false if the runner stopped first or res cannot be published.
func (r *Runner) publishUntilAnswered(f *flight, res Result) bool {
	for try := 1; ; try++ {
		err := r.publish(context.Background(), f.in, res)
		if err == nil {
			return true
		}
		if unpublishable(err) || !r.hold(f, try, "publish failed", err) {
			return false
		}
	}
}

// refusal records that stage's stream refused f's hand-off ("": no
// refusal of f is outstanding any more), for Deps.OnFull.
func (r *Runner) refusal(f *flight, stage string) {
	if f.refused == stage || r.deps.OnFull == nil {
		return
	}
	if f.refused != "" {
		r.deps.OnFull(f.refused, false)
	}
	f.refused = stage
	if stage != "" {
		r.deps.OnFull(stage, true)
	}
}

// fullError is a publish a stream refused because it is full.
type fullError struct {
	subject string
	err     error
}

func (e *fullError) Error() string { return "publish " + e.subject + ": " + e.err.Error() }
func (e *fullError) Unwrap() error { return e.err }

// stage is the stage the refused subject hands on to ("" if none).
func (e *fullError) stage(s subjects.Subjects) string {
	stage, _, _, _ := s.ParseStage(e.subject)
	return stage
}

// flush makes the store's writes so far durable before an ack (see
// kv.OutcomeLog).
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

// incident is the runner's own event of code in its phase: from
// RunnerConfig.Codes, else the closed table. The pipeline check
// (engine) refuses a phase without both of the runner's codes, so this
// never reaches schema.NewIncident's panic.
func (r *Runner) incident(code schema.Code) schema.Incident {
	for _, c := range r.cfg.Codes {
		if c.Phase == r.cfg.Phase && c.Code == code {
			return schema.Incident{Phase: c.Phase, Code: c.Code, DispatchBoundary: c.Boundary}
		}
	}
	return schema.NewIncident(r.cfg.Phase, code)
}

// reject terminates an internal message whose seal failed, after
// publishing the INTERNAL_MESSAGE_REJECTED event. Its content is never read.
func (r *Runner) reject(_ context.Context, f *flight) string {
	r.log.Error("internal message without a valid seal; terminated unread", "seq", f.in.StreamSeq)
	inc := r.incident(schema.CodeInternalMessageRejected)
	if !r.publishUntilAnswered(f, Result{Events: []schema.Incident{inc}}) {
		return r.release(f)
	}
	r.tallies.forget(keyOf(f.in))
	if err := f.msg().Term(); err != nil {
		r.log.Warn("term failed; the message will be redelivered and rejected again", "seq", f.in.StreamSeq, "err", err)
	}
	return metrics.ResultRejected
}

// tallyHorizon is how long the runner remembers an input it no longer
// holds (its failures, its requested and deferred redeliveries).
const tallyHorizon = 30 * time.Minute

// tally is what the runner remembers of one input between deliveries, in
// memory: a restart forgets it (and then counts only what it sees).
type tally struct {
	seen      uint64 // deliveries this process received
	failures  int    // failures counted toward MaxAttempts
	requested uint64 // RetryAfter redeliveries
	deferred  uint64 // redeliveries because every bulkhead queue was full
	last      time.Time
}

// tallies are the runner's tallies by input.
type tallies struct {
	mu    sync.Mutex
	byKey map[inputKey]*tally
}

// see counts a delivery of k and returns its tally.
func (ts *tallies) see(k inputKey, now time.Time) tally {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.byKey[k]
	if t == nil {
		t = &tally{}
		ts.byKey[k] = t
	}
	t.seen++
	t.last = now
	return *t
}

// add edits k's tally.
func (ts *tallies) add(k inputKey, edit func(t *tally)) tally {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.byKey[k]
	if t == nil {
		t = &tally{}
		ts.byKey[k] = t
	}
	edit(t)
	return *t
}

// fail counts a failure of k and returns its failures so far.
func (ts *tallies) fail(k inputKey) int {
	return ts.add(k, func(t *tally) { t.failures++ }).failures
}

// forget drops k's tally: the input is done.
func (ts *tallies) forget(k inputKey) {
	ts.mu.Lock()
	delete(ts.byKey, k)
	ts.mu.Unlock()
}

// sweep forgets tallies not touched since before: inputs redelivered to
// other processors, or acked there.
func (ts *tallies) sweep(before time.Time) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for k, t := range ts.byKey {
		if t.last.Before(before) {
			delete(ts.byKey, k)
		}
	}
}

// publish records the outcomes, then publishes every output and waits for
// all PubAcks. Message ids derive from the input (stage, stream sequence,
// position), so a redelivered input republishes duplicates the streams drop.
// Outcomes go out in their subjects' order (outcomes.go): each expects the
// last message known on its subject, and one the stream refuses because
// the subject moved on is decided again on what is there — published
// after it, or dropped as stale. Incidents and outcomes are counted once
// their PubAck arrived and was not a duplicate's.
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
	// The input's identity: its stream too, for a runner that reads
	// several (their sequences overlap).
	base := r.cfg.Stage + "/" + in.Stream + "/" + strconv.FormatUint(in.StreamSeq, 10)
	outs, err := r.planOutcomes(ctx, base, res)
	if err != nil {
		return err
	}
	var msgs []*nats.Msg
	var events []schema.Incident
	var eventHosts []string // the host of the outcome each event is part of
	add := func(subject string, data []byte, id string, hdr nats.Header) {
		m := nats.NewMsg(subject)
		m.Data = data
		for k, v := range hdr {
			m.Header[k] = v
		}
		m.Header.Set(jetstream.MsgIDHeader, r.deps.Seal.MsgID(id))
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
	for _, m := range outs {
		msg, err := r.outcomeNATSMsg(m)
		if err != nil {
			return err
		}
		msgs = append(msgs, msg)
	}
	// Every outcome's incidents are events, published or not: a stale
	// outcome's were true when it was decided.
	for _, o := range res.Outcomes {
		events = append(events, o.Incidents...)
		for range o.Incidents {
			eventHosts = append(eventHosts, o.Host)
		}
	}
	events = append(events, res.Events...)
	now := NowMs(r.deps.Clock)
	firstEvent := len(msgs)
	published := events[:0:0]
	for i, inc := range events {
		var hdr nats.Header
		if r.deps.EventShare != nil {
			host := ""
			if i < len(eventHosts) {
				host = eventHosts[i]
			}
			share, ok := r.deps.EventShare(host, in, inc)
			if !ok {
				continue // rationed: counted as suppressed, not published
			}
			hdr = nats.Header{subjects.HostHeader: []string{share}}
		}
		// Ids keep each event's place among them all: a redelivery whose
		// rationing differs publishes no event twice.
		add(r.deps.Subjects.Incident(string(inc.Phase)), schema.MustMarshal(inc.Event(now)), base+"/e"+strconv.Itoa(i), hdr)
		published = append(published, inc)
	}
	if len(outs) > 0 {
		fault.Hit(fault.RunnerBeforeOutcome)
	}
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	// The input's messages in one write (Deps.Wire); released before the
	// PubAcks are awaited.
	r.deps.Wire.Hold()
	for _, m := range msgs {
		f, err := r.deps.JS.PublishMsgAsync(m, jetstream.WithStallWait(r.cfg.PublishTimeout))
		if err != nil {
			r.deps.Wire.Release()
			return fmt.Errorf("publish %s: %w", m.Subject, err)
		}
		futures = append(futures, f)
	}
	r.deps.Wire.Release()
	timeout := time.NewTimer(r.cfg.PublishTimeout)
	defer timeout.Stop()
	var refused []*outcomeMsg
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			switch {
			case ack.Duplicate:
				// Published before (a redelivery): counted then.
			case i >= firstEvent:
				inc := published[i-firstEvent]
				r.deps.Metrics.Incidents.WithLabelValues(string(inc.Phase), string(inc.Code)).Inc()
			case i >= firstOutcome:
				m := outs[i-firstOutcome]
				r.last.Put(m.o.To(), Known{Found: true, Seq: ack.Sequence, Standing: m.o.Standing()})
				r.outcomeStored(m)
			}
		case err := <-f.Err():
			if i >= firstOutcome && i < firstEvent && movedOn(err) {
				refused = append(refused, outs[i-firstOutcome])
				continue
			}
			if streamFull(err) {
				return &fullError{subject: f.Msg().Subject, err: err}
			}
			return fmt.Errorf("publish %s: %w", f.Msg().Subject, err)
		case <-timeout.C:
			return fmt.Errorf("publish %s: no PubAck within %s", f.Msg().Subject, r.cfg.PublishTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, m := range refused {
		stored, err := r.settle(ctx, m)
		if err != nil {
			return err
		}
		if stored {
			r.outcomeStored(m)
		}
	}
	return nil
}

// outcomeStored counts an outcome the stream stored (not a duplicate)
// in the outcomes metric, unless it is a replay (which repeats one
// counted before). Each host's share of the history is kept by
// internal/shares, which reads the stream itself.
func (r *Runner) outcomeStored(m *outcomeMsg) {
	if !m.replay {
		r.deps.Metrics.Outcomes.WithLabelValues(string(m.o.Kind)).Inc()
	}
}
