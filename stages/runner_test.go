package stages_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kvjs "github.com/portcullis/portcullis/kv/jetstream"
	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/seal"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// funcHandler adapts functions to stages.Handler.
type funcHandler struct {
	handle func(ctx context.Context, in *stages.Input) (stages.Result, error)
	giveUp func(ctx context.Context, in *stages.Input, cause error) (stages.Result, error)
}

func (h funcHandler) Handle(ctx context.Context, in *stages.Input) (stages.Result, error) {
	return h.handle(ctx, in)
}

func (h funcHandler) GiveUp(ctx context.Context, in *stages.Input, cause error) (stages.Result, error) {
	return h.giveUp(ctx, in, cause)
}

type rig struct {
	srv     *server.Server
	wire    *stages.Wire // the runners' Deps.Wire
	seal    *seal.Sealer
	js      jetstream.JetStream
	subj    subjects.Subjects
	store   *pebble.Store
	metrics *metrics.Metrics
	rec     *testenv.Recorder
	// runner is the one run started last.
	runner *stages.Runner
	// clocks numbers ackWaitsPass's consumers.
	clocks atomic.Int32
	// room is the runners' Deps.Room (nil: none).
	room func() bool
}

func newRig(t *testing.T) *rig {
	t.Helper()
	s := testenv.StartServer(t, "")
	// The runners batch their writes as the processor's do.
	wire := &stages.Wire{}
	nc := testenv.Connect(t, s, wire.Option())
	wire.Attach(nc)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subj := subjects.Default()
	ctx := context.Background()
	outcomes := kvjs.OutcomeStream(subj)
	outcomes.Duplicates = time.Minute
	for _, sc := range []jetstream.StreamConfig{
		{Name: "IN", Subjects: []string{"in.>"}},
		{Name: "NEXT", Subjects: []string{"next.>"}, Duplicates: time.Minute},
		outcomes,
		{Name: subj.IncidentsStream(), Subjects: []string{subj.Incidents()}, Duplicates: time.Minute},
	} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	store, err := pebble.Open(filepath.Join(t.TempDir(), "store"), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	sealer, err := seal.New(make([]byte, seal.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return &rig{srv: s, wire: wire, seal: sealer, js: js, subj: subj, store: store, metrics: metrics.New(nil, nil), rec: testenv.Record(t, nc, subj)}
}

// run starts a runner for stage "grounding" on stream IN, waits until it
// consumes, and returns a function that drains it and waits.
func (r *rig) run(t *testing.T, h stages.Handler, cfg stages.RunnerConfig) func() {
	t.Helper()
	cfg.Stage, cfg.Stream, cfg.FilterSubject = subjects.StageGrounding, "IN", "in.>"
	runner := stages.NewRunner(cfg, stages.Deps{
		JS: r.js, Wire: r.wire, Seal: r.seal, Subjects: r.subj, Metrics: r.metrics, Outcomes: r.store, Clock: stages.SystemClock{}, Room: r.room,
		History: &kvjs.OutcomeHistory{JS: r.js, Subjects: r.subj},
	}, h)
	r.runner = runner
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runner.Run(ctx, context.Background()) }()
	testenv.WaitFor(t, "the runner consuming", runner.Consuming) // its consumer exists
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("runner: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func (r *rig) publish(t *testing.T, subject, data string) {
	t.Helper()
	if _, err := r.js.Publish(context.Background(), subject, []byte(data)); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) streamMsgs(t *testing.T, stream string) uint64 {
	t.Helper()
	s, err := r.js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// ackWaitsPass returns once ackWait has run out n times on the server's
// clock: it holds a message of its own on a consumer with that ack wait,
// unacknowledged, until the server has redelivered it n times. A test that
// must show nothing happened "for longer than the ack wait" waits for this
// event, not for a sleep.
func (r *rig) ackWaitsPass(t *testing.T, ackWait time.Duration, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := r.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "CLOCK", Subjects: []string{"clock.>"}}); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("clock%d", r.clocks.Add(1))
	cons, err := r.js.CreateConsumer(ctx, "CLOCK", jetstream.ConsumerConfig{
		Durable: name, FilterSubject: "clock." + name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.publish(t, "clock."+name, "tick")
	delivered := uint64(0)
	testenv.WaitFor(t, fmt.Sprintf("%v of ack wait to run out %d times", ackWait, n), func() bool {
		msg, err := cons.Next(jetstream.FetchMaxWait(ackWait))
		if err != nil {
			return false
		}
		if md, err := msg.Metadata(); err == nil {
			delivered = md.NumDelivered
		}
		return delivered > uint64(n)
	})
}

// quiesce waits until the runner's consumer has handled and acked
// everything in IN, and the recorder everything published.
func (r *rig) quiesce(t *testing.T) {
	t.Helper()
	testenv.QuiesceConsumers(t, r.js, r.rec, testenv.StageConsumer{Name: subjects.StageGrounding, Stream: "IN"})
}

// counted checks actions_stage_messages_total for a result. The runner
// counts a message just after acking it: wait for the count to arrive, then
// check it did not go past.
func (r *rig) counted(t *testing.T, result string, want float64) {
	t.Helper()
	c := r.metrics.StageMessages.WithLabelValues(subjects.StageGrounding, result)
	testenv.WaitFor(t, fmt.Sprintf("%s counted %v times", result, want), func() bool { return testutil.ToFloat64(c) >= want })
	if got := testutil.ToFloat64(c); got != want {
		t.Errorf("%s = %v, want %v", result, got, want)
	}
}

func (r *rig) pendingAcks(t *testing.T) int {
	t.Helper()
	c, err := r.js.Consumer(context.Background(), "IN", subjects.StageGrounding)
	if err != nil {
		return -1
	}
	info, err := c.Info(context.Background())
	if err != nil {
		return -1
	}
	return info.NumAckPending
}

// deliveries is how many times the server has delivered IN's messages to
// the runner's consumer, redeliveries included (the consumer sequence).
func (r *rig) deliveries(t *testing.T) uint64 {
	t.Helper()
	c, err := r.js.Consumer(context.Background(), "IN", subjects.StageGrounding)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.Delivered.Consumer
}

// waitPendingAcks waits until the consumer has want inputs unacked and
// none undelivered.
func (r *rig) waitPendingAcks(t *testing.T, want int) {
	t.Helper()
	testenv.WaitFor(t, fmt.Sprintf("consumer settled to %d pending acks", want), func() bool {
		c, err := r.js.Consumer(context.Background(), "IN", subjects.StageGrounding)
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumAckPending == want && info.NumPending == 0
	})
}

func failure(pid string, code schema.Code) schema.Outcome {
	return schema.FailureOutcome(schema.ProposalRef{Host: testenv.HostName, ProposalID: pid}, schema.NewIncident(schema.PhaseGrounding, code), 1)
}

func TestRunnerPublishesRecordsAndAcks(t *testing.T) {
	r := newRig(t)
	r.run(t, funcHandler{handle: func(_ context.Context, in *stages.Input) (stages.Result, error) {
		pid := string(in.Data)
		if pid == "bad" {
			return stages.Result{Outcomes: []schema.Outcome{failure(pid, schema.CodeDiscriminatorMissing)}}, nil
		}
		return stages.Result{Next: []stages.Message{{Subject: "next." + pid, Data: in.Data}}}, nil
	}}, stages.RunnerConfig{})
	r.publish(t, "in.1", "good")
	r.publish(t, "in.2", "bad")
	o := r.rec.Wait(t, "bad", testenv.Terminal)
	if o.Kind != schema.KindNeedsClarification || o.Incidents[0].Code != schema.CodeDiscriminatorMissing {
		t.Errorf("outcome %+v", o)
	}
	r.rec.WaitEvent(t, schema.PhaseGrounding, schema.CodeDiscriminatorMissing)
	r.quiesce(t)
	if n := r.streamMsgs(t, "NEXT"); n != 1 {
		t.Errorf("next stream has %d messages", n)
	}
	if rec, found, err := r.store.LastOutcome(testenv.Ref("bad")); err != nil || !found || rec.Kind != o.Kind {
		t.Errorf("outcome not recorded: %+v %v %v", rec, found, err)
	}
	r.counted(t, metrics.ResultForwarded, 1)
	if got := testutil.ToFloat64(r.metrics.Incidents.WithLabelValues(string(schema.PhaseGrounding), string(schema.CodeDiscriminatorMissing))); got != 1 {
		t.Errorf("incidents = %v", got)
	}
	if got := testutil.ToFloat64(r.metrics.Outcomes.WithLabelValues(string(schema.KindNeedsClarification))); got != 1 {
		t.Errorf("outcomes = %v", got)
	}
}

// Without room on the processor's disk (Deps.Room false) the runner takes
// no input: one fetched just as the disk filled goes back to the stream,
// again and again, unhandled; with room again it is handled, once.
func TestRunnerWaitsForRoom(t *testing.T) {
	r := newRig(t)
	var full atomic.Bool
	var asked atomic.Int32
	r.room = func() bool { asked.Add(1); return !full.Load() }
	var handled atomic.Int32
	r.run(t, funcHandler{handle: func(_ context.Context, in *stages.Input) (stages.Result, error) {
		handled.Add(1)
		return stages.Result{Next: []stages.Message{{Subject: "next.1", Data: in.Data}}}, nil
	}}, stages.RunnerConfig{})
	// The fetcher has looked for room and gone on to wait in Next when the
	// disk fills (on a busy machine it may not have got that far when run
	// returns: then it would wait for room before fetching, and nothing
	// would be fetched to give back).
	testenv.WaitFor(t, "the fetcher past its room check", func() bool { return asked.Load() > 0 })
	full.Store(true)
	r.publish(t, "in.1", "a")
	testenv.WaitFor(t, "the input fetched, given back and delivered again", func() bool { return r.deliveries(t) >= 2 })
	if n := handled.Load(); n != 0 {
		t.Fatalf("handled %d times without room", n)
	}
	full.Store(false)
	r.quiesce(t)
	if n := handled.Load(); n != 1 {
		t.Errorf("handled %d times once there was room, want 1", n)
	}
	r.counted(t, metrics.ResultForwarded, 1)
}

// A failure after publishing redelivers the input; the republished outputs
// carry the same message ids, so each stream holds them once.
func TestRunnerRepublishIsDeduplicated(t *testing.T) {
	r := newRig(t)
	var doneCalls atomic.Int32
	r.run(t, funcHandler{handle: func(_ context.Context, in *stages.Input) (stages.Result, error) {
		return stages.Result{
			Next:     []stages.Message{{Subject: "next.x", Data: in.Data}},
			Outcomes: []schema.Outcome{failure("p", schema.CodeDiscriminatorMismatch)},
			Done: func(context.Context) error {
				if doneCalls.Add(1) < 3 {
					return errors.New("not yet")
				}
				return nil
			},
		}, nil
	}}, stages.RunnerConfig{Backoff: func(uint64) time.Duration { return 10 * time.Millisecond }})
	r.publish(t, "in.1", "x")
	r.quiesce(t)
	if doneCalls.Load() != 3 {
		t.Errorf("done ran %d times", doneCalls.Load())
	}
	for stream, want := range map[string]uint64{"NEXT": 1, r.subj.OutcomesStream(): 1, r.subj.IncidentsStream(): 1} {
		if n := r.streamMsgs(t, stream); n != want {
			t.Errorf("%s holds %d messages, want %d", stream, n, want)
		}
	}
	if got := testutil.ToFloat64(r.metrics.Incidents.WithLabelValues(string(schema.PhaseGrounding), string(schema.CodeDiscriminatorMismatch))); got != 1 {
		t.Errorf("a republished incident was counted again: %v", got)
	}
	if got := testutil.ToFloat64(r.metrics.Outcomes.WithLabelValues(string(schema.KindNeedsClarification))); got != 1 {
		t.Errorf("a republished outcome was counted again: %v", got)
	}
}

// A replayed outcome (an earlier one, published again for a repeated
// delivery) is not counted as a new outcome.
func TestRunnerDoesNotCountReplayedOutcomes(t *testing.T) {
	r := newRig(t)
	r.run(t, funcHandler{handle: func(_ context.Context, in *stages.Input) (stages.Result, error) {
		o := failure(string(in.Data), schema.CodeDiscriminatorMismatch)
		if string(in.Data) == "again" {
			return stages.Result{Replayed: []schema.Outcome{o}}, nil
		}
		return stages.Result{Outcomes: []schema.Outcome{o}}, nil
	}}, stages.RunnerConfig{})
	r.publish(t, "in.1", "first")
	r.publish(t, "in.2", "again")
	r.rec.Wait(t, "first", testenv.Terminal)
	r.rec.Wait(t, "again", testenv.Terminal)
	r.quiesce(t)
	if got := testutil.ToFloat64(r.metrics.Outcomes.WithLabelValues(string(schema.KindNeedsClarification))); got != 1 {
		t.Errorf("outcomes = %v, want 1 (the replay not counted)", got)
	}
}

// Consuming is set while the runner's iterator runs, and cleared when Run
// stops fetching: cancelled, or the iterator failed (its consumer deleted).
func TestRunnerConsuming(t *testing.T) {
	r := newRig(t)
	runner := stages.NewRunner(stages.RunnerConfig{Stage: subjects.StageGrounding, Stream: "IN", FilterSubject: "in.>"}, stages.Deps{
		JS: r.js, Seal: r.seal, Subjects: r.subj, Metrics: r.metrics, Outcomes: r.store, Clock: stages.SystemClock{},
		History: &kvjs.OutcomeHistory{JS: r.js, Subjects: r.subj},
	}, funcHandler{handle: func(context.Context, *stages.Input) (stages.Result, error) { return stages.Result{}, nil }})
	if src := runner.Sources(); runner.Consuming() || runner.Stage() != subjects.StageGrounding || len(src) != 1 || src[0].Stream != "IN" || src[0].Durable != subjects.StageGrounding {
		t.Fatalf("before Run: consuming %v, stage %q, sources %+v", runner.Consuming(), runner.Stage(), src)
	}
	start := func() (context.CancelFunc, chan error) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- runner.Run(ctx, context.Background()) }()
		t.Cleanup(func() { cancel(); <-done })
		testenv.WaitFor(t, "consuming", runner.Consuming)
		return cancel, done
	}
	cancel, done := start()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil // for the cleanup
	if runner.Consuming() {
		t.Error("still consuming after Run returned")
	}

	_, done = start()
	if err := r.js.DeleteConsumer(context.Background(), "IN", subjects.StageGrounding); err != nil {
		t.Fatal(err)
	}
	err := <-done
	done <- nil
	if err == nil {
		t.Error("Run returned no error for a deleted consumer")
	}
	if runner.Consuming() {
		t.Error("still consuming after the iterator failed")
	}
}

func TestRunnerRetriesThenGivesUp(t *testing.T) {
	r := newRig(t)
	var attempts atomic.Int32
	var cause error
	var mu sync.Mutex
	r.run(t, funcHandler{
		handle: func(_ context.Context, in *stages.Input) (stages.Result, error) {
			switch string(in.Data) {
			case "flaky":
				if attempts.Add(1) < 3 {
					return stages.Result{}, errors.New("store unavailable")
				}
				return stages.Result{Outcomes: []schema.Outcome{failure("flaky", schema.CodeDiscriminatorMismatch)}}, nil
			case "poison":
				return stages.Result{}, fmt.Errorf("cannot decode: %w", stages.ErrPermanent)
			default:
				return stages.Result{}, errors.New("always failing")
			}
		},
		giveUp: func(_ context.Context, in *stages.Input, c error) (stages.Result, error) {
			mu.Lock()
			if string(in.Data) == "broken" {
				cause = c
			}
			mu.Unlock()
			return stages.Result{Outcomes: []schema.Outcome{failure(string(in.Data), schema.CodeProcessingFailed)}}, nil
		},
	}, stages.RunnerConfig{MaxAttempts: 3, Backoff: func(uint64) time.Duration { return 10 * time.Millisecond }})
	r.publish(t, "in.1", "flaky")
	r.publish(t, "in.2", "broken")
	r.publish(t, "in.3", "poison")
	if o := r.rec.Wait(t, "flaky", testenv.Terminal); o.Incidents[0].Code != schema.CodeDiscriminatorMismatch {
		t.Errorf("flaky: %+v", o)
	}
	if o := r.rec.Wait(t, "broken", testenv.Terminal); o.Incidents[0].Code != schema.CodeProcessingFailed {
		t.Errorf("broken: %+v", o)
	}
	if o := r.rec.Wait(t, "poison", testenv.Terminal); o.Incidents[0].Code != schema.CodeProcessingFailed {
		t.Errorf("poison: %+v", o)
	}
	r.quiesce(t)
	mu.Lock()
	if !errors.Is(cause, stages.ErrRetriesExhausted) {
		t.Errorf("give-up cause = %v", cause)
	}
	mu.Unlock()
	r.counted(t, metrics.ResultGaveUp, 2)
	if got := testutil.ToFloat64(r.metrics.StageMessages.WithLabelValues(subjects.StageGrounding, metrics.ResultRetry)); got < 4 {
		t.Errorf("retry = %v, want ≥ 4", got)
	}
}

// Draining lets a handler that is mid-message finish and ack.
func TestRunnerDrainFinishesInFlight(t *testing.T) {
	r := newRig(t)
	started := make(chan struct{})
	release := make(chan struct{})
	stop := r.run(t, funcHandler{handle: func(_ context.Context, in *stages.Input) (stages.Result, error) {
		close(started)
		<-release
		return stages.Result{Outcomes: []schema.Outcome{failure("slow", schema.CodeDiscriminatorMismatch)}}, nil
	}}, stages.RunnerConfig{MaxInFlight: 1})
	r.publish(t, "in.1", "slow")
	<-started
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	testenv.WaitFor(t, "the drain to begin", func() bool { return !r.runner.Consuming() })
	close(release)
	<-stopped
	r.rec.Wait(t, "slow", testenv.Terminal)
	r.quiesce(t)
}

// A long handler is kept alive with InProgress: no redelivery while it runs.
func TestRunnerHeartbeatPreventsRedelivery(t *testing.T) {
	r := newRig(t)
	var calls atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	r.run(t, funcHandler{handle: func(_ context.Context, in *stages.Input) (stages.Result, error) {
		if calls.Add(1) == 1 {
			close(started)
		}
		<-release // real work, three ack waits long: only heartbeats keep it
		return stages.Result{}, nil
	}}, stages.RunnerConfig{MaxInFlight: 2, AckWait: 500 * time.Millisecond})
	r.publish(t, "in.1", "x")
	<-started
	r.ackWaitsPass(t, 500*time.Millisecond, 3)
	close(release)
	r.quiesce(t) // a redelivery would be handled by the second worker before this returns
	if calls.Load() != 1 {
		t.Errorf("handled %d times", calls.Load())
	}
	// Not only handled once: never redelivered (a redelivery of a held
	// input is absorbed by the runner, but another processor's would not).
	if n := r.deliveries(t); n != 1 {
		t.Errorf("delivered %d times, want 1", n)
	}
}

// A stage that consumes internal subjects acts only on sealed messages: an
// unsealed or wrongly sealed one is terminated unread with the
// INTERNAL_MESSAGE_REJECTED event, and hand-offs it publishes are sealed.
func TestRunnerRejectsUnsealedInternalMessages(t *testing.T) {
	r := newRig(t)
	var handled atomic.Int64
	r.run(t, funcHandler{handle: func(_ context.Context, in *stages.Input) (stages.Result, error) {
		handled.Add(1)
		return stages.Result{Next: []stages.Message{{Subject: "next." + string(in.Data), Data: in.Data}}}, nil
	}, giveUp: func(context.Context, *stages.Input, error) (stages.Result, error) {
		t.Error("GiveUp asked for a rejected message")
		return stages.Result{}, nil
	}}, stages.RunnerConfig{Internal: true, Phase: schema.PhaseGrounding})

	r.publish(t, "in.forged", "forged")
	other, _ := seal.New(append(make([]byte, seal.KeySize-1), 1))
	m := nats.NewMsg("in.othersealed")
	m.Data = []byte("othersealed")
	other.Seal(m.Subject, m.Data, m.Header)
	if _, err := r.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	moved := nats.NewMsg("in.moved") // a genuine seal on another subject
	moved.Data = []byte("moved")
	r.seal.Seal("in.sealed", moved.Data, moved.Header)
	if _, err := r.js.PublishMsg(context.Background(), moved); err != nil {
		t.Fatal(err)
	}
	good := nats.NewMsg("in.sealed")
	good.Data = []byte("sealed")
	r.seal.Seal(good.Subject, good.Data, good.Header)
	if _, err := r.js.PublishMsg(context.Background(), good); err != nil {
		t.Fatal(err)
	}
	r.quiesce(t)
	if next, rejected := r.streamMsgs(t, "NEXT"), r.rec.CountEvents(schema.PhaseGrounding, schema.CodeInternalMessageRejected); next != 1 || rejected != 3 {
		t.Fatalf("next=%d rejected events=%d, want 1 and 3", next, rejected)
	}
	if n := handled.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1 (only the sealed message)", n)
	}
	r.counted(t, metrics.ResultRejected, 3)
	// The hand-off is sealed for the next stage.
	s, _ := r.js.Stream(context.Background(), "NEXT")
	msg, err := s.GetMsg(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if !r.seal.Check(msg.Subject, msg.Data, msg.Header) {
		t.Error("hand-off not sealed")
	}
	for _, e := range r.rec.Events() {
		if e.Code == schema.CodeInternalMessageRejected && (e.Phase != schema.PhaseGrounding || e.DispatchBoundary != schema.BoundaryNotInvoked) {
			t.Errorf("event = %+v", e)
		}
	}
}

func countEvents(rec *testenv.Recorder, code schema.Code) int {
	n := 0
	for _, e := range rec.Events() {
		if e.Code == code {
			n++
		}
	}
	return n
}

// keyed is a handler whose inputs ("<key>/<id>") belong to bulkhead key
// with the given limit; inputs of key "slow" block until released.
type keyed struct {
	funcHandler
	limit int
}

func (k keyed) Bulkhead(in *stages.Input) (string, int) {
	key, _, _ := strings.Cut(string(in.Data), "/")
	return key, k.limit
}

// A saturated bulkhead holds no worker: with one worker and the slow key's
// limit taken by a handler that does not return, inputs of the slow key
// queue, and those of another key are handled at once; released, the
// queued ones run in arrival order, each once.
func TestRunnerBulkheadIsolatesKeys(t *testing.T) {
	r := newRig(t)
	release := make(chan struct{})
	var mu sync.Mutex
	var order []string
	var slowRunning, slowMax atomic.Int32
	h := keyed{limit: 2, funcHandler: funcHandler{handle: func(_ context.Context, in *stages.Input) (stages.Result, error) {
		id := string(in.Data)
		if strings.HasPrefix(id, "slow/") {
			n := slowRunning.Add(1)
			for {
				m := slowMax.Load()
				if n <= m || slowMax.CompareAndSwap(m, n) {
					break
				}
			}
			<-release
			slowRunning.Add(-1)
		}
		mu.Lock()
		order = append(order, id)
		mu.Unlock()
		return stages.Result{Outcomes: []schema.Outcome{failure(strings.ReplaceAll(id, "/", "-"), schema.CodeDiscriminatorMismatch)}}, nil
	}}}
	r.run(t, h, stages.RunnerConfig{MaxInFlight: 3})
	for i := range 6 {
		r.publish(t, fmt.Sprintf("in.%d", i), fmt.Sprintf("slow/%d", i))
	}
	testenv.WaitFor(t, "two slow inputs running", func() bool { return slowRunning.Load() == 2 })
	for i := range 5 {
		r.publish(t, fmt.Sprintf("in.f%d", i), fmt.Sprintf("fast/%d", i))
	}
	for i := range 5 {
		r.rec.Wait(t, fmt.Sprintf("fast-%d", i), testenv.Terminal)
	}
	if n := r.rec.Outcomes("slow-0"); len(n) != 0 {
		t.Fatal("a slow input finished before its release")
	}
	close(release)
	for i := range 6 {
		r.rec.Wait(t, fmt.Sprintf("slow-%d", i), testenv.Terminal)
	}
	r.waitPendingAcks(t, 0)
	if m := slowMax.Load(); m != 2 {
		t.Errorf("slow inputs at once: %d, want the limit 2", m)
	}
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]int{}
	for _, id := range order {
		seen[id]++
	}
	if len(order) != 11 || len(seen) != 11 {
		t.Errorf("handled %v, want each of the 11 inputs once", order)
	}
}

// Queued inputs are kept alive like handled ones: with an ack wait shorter
// than their wait, none is redelivered (handled twice).
func TestRunnerBulkheadQueueHeartbeats(t *testing.T) {
	r := newRig(t)
	var calls atomic.Int32
	release := make(chan struct{})
	h := keyed{limit: 1, funcHandler: funcHandler{handle: func(_ context.Context, in *stages.Input) (stages.Result, error) {
		calls.Add(1)
		<-release
		return stages.Result{}, nil
	}}}
	r.run(t, h, stages.RunnerConfig{AckWait: 500 * time.Millisecond})
	for i := range 3 {
		r.publish(t, fmt.Sprintf("in.%d", i), "k/x")
	}
	// One handled, two queued behind it, for two ack waits.
	testenv.WaitFor(t, "one handled, two queued", func() bool { return calls.Load() == 1 && r.pendingAcks(t) == 3 })
	r.ackWaitsPass(t, 500*time.Millisecond, 2)
	close(release)
	testenv.WaitFor(t, "all handled", func() bool { return calls.Load() >= 3 })
	r.waitPendingAcks(t, 0)
	if n := calls.Load(); n != 3 {
		t.Errorf("handled %d times, want 3 (a queued input was redelivered)", n)
	}
	if n := r.deliveries(t); n != 3 {
		t.Errorf("delivered %d times, want 3 (a queued input was redelivered)", n)
	}
}

// Beyond MaxQueued, an input over its key's limit is redelivered later
// instead of queued, and such redeliveries do not count as attempts: it is
// handled normally once its key has room, never given up.
func TestRunnerBulkheadOverflowDefers(t *testing.T) {
	r := newRig(t)
	release := make(chan struct{})
	var handled atomic.Int32
	h := keyed{limit: 1, funcHandler: funcHandler{
		handle: func(_ context.Context, in *stages.Input) (stages.Result, error) {
			if string(in.Data) == "k/first" {
				<-release
			}
			handled.Add(1)
			return stages.Result{}, nil
		},
		giveUp: func(context.Context, *stages.Input, error) (stages.Result, error) {
			t.Error("gave up on a deferred input")
			return stages.Result{}, nil
		},
	}}
	r.run(t, h, stages.RunnerConfig{MaxQueued: 1, MaxAttempts: 2})
	r.publish(t, "in.0", "k/first")
	testenv.WaitFor(t, "first running", func() bool { return r.pendingAcks(t) == 1 })
	for i := range 3 {
		r.publish(t, fmt.Sprintf("in.%d", i+1), "k/later")
	}
	// One queued, two deferred, redelivered more often than MaxAttempts
	// (each deferral is counted as a retry).
	retries := r.metrics.StageMessages.WithLabelValues(subjects.StageGrounding, metrics.ResultRetry)
	testenv.WaitFor(t, "both deferred inputs redelivered more than MaxAttempts times", func() bool {
		return testutil.ToFloat64(retries) >= 2*(2+1)
	})
	close(release)
	testenv.WaitFor(t, "all handled", func() bool { return handled.Load() == 4 })
	r.waitPendingAcks(t, 0)
	if got := testutil.ToFloat64(r.metrics.StageMessages.WithLabelValues(subjects.StageGrounding, metrics.ResultGaveUp)); got != 0 {
		t.Errorf("gave_up = %v", got)
	}
}

// Stopping redelivers queued inputs at once (they were never in flight)
// and lets the handled ones finish: started again, the runner gets them
// back well before their ack wait would have run out.
func TestRunnerDrainRedeliversQueued(t *testing.T) {
	r := newRig(t)
	release := make(chan struct{})
	var started atomic.Int32
	h := keyed{limit: 1, funcHandler: funcHandler{handle: func(_ context.Context, in *stages.Input) (stages.Result, error) {
		started.Add(1)
		<-release
		return stages.Result{}, nil
	}}}
	cfg := stages.RunnerConfig{AckWait: time.Minute}
	stop := r.run(t, h, cfg)
	for i := range 3 {
		r.publish(t, fmt.Sprintf("in.%d", i), "k/x")
	}
	testenv.WaitFor(t, "queued", func() bool { return started.Load() == 1 && r.pendingAcks(t) == 3 })
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	testenv.WaitFor(t, "the drain to begin", func() bool { return !r.runner.Consuming() })
	close(release)
	<-stopped
	if n := started.Load(); n != 1 {
		t.Errorf("%d inputs handled while stopping, want only the one in flight", n)
	}
	r.run(t, h, cfg)
	// WaitFor's bound is far below the minute of ack wait.
	testenv.WaitFor(t, "queued inputs redelivered at once", func() bool { return r.pendingAcks(t) == 0 && started.Load() == 3 })
}

// An outage never ends an input: transient errors (JetStream not
// answering, a write whose outcome is unknown, a race lost) are retried
// with the input kept, however many there are, and never count toward
// giving up. The input is delivered once.
func TestRunnerTransientErrorsNeverCount(t *testing.T) {
	r := newRig(t)
	var calls atomic.Int32
	transient := []error{
		jetstream.ErrNoStreamResponse, nats.ErrTimeout, context.DeadlineExceeded, nats.ErrNoResponders,
		fmt.Errorf("record: %w", stages.ErrTransient), nats.ErrConnectionReconnecting,
	}
	r.run(t, funcHandler{
		handle: func(_ context.Context, in *stages.Input) (stages.Result, error) {
			n := int(calls.Add(1))
			if n <= 3*len(transient) {
				return stages.Result{}, fmt.Errorf("stage: %w", transient[n%len(transient)])
			}
			if in.Delivered != 1 {
				t.Errorf("delivered %d times: the input was not kept", in.Delivered)
			}
			return stages.Result{Outcomes: []schema.Outcome{failure("outage", schema.CodeDiscriminatorMismatch)}}, nil
		},
		giveUp: func(context.Context, *stages.Input, error) (stages.Result, error) {
			t.Error("gave up on an input that only met transient errors")
			return stages.Result{}, nil
		},
	}, stages.RunnerConfig{MaxAttempts: 2, Hold: func(int) time.Duration { return 5 * time.Millisecond }})
	r.publish(t, "in.1", "x")
	if o := r.rec.Wait(t, "outage", testenv.Terminal); o.Incidents[0].Code != schema.CodeDiscriminatorMismatch {
		t.Errorf("outcome: %+v", o)
	}
	r.quiesce(t)
	r.counted(t, metrics.ResultGaveUp, 0)
}

// A hand-off whose publish gets no answer ("no response from stream":
// the next stream has no leader, or is not there) may have been stored:
// it is published again under the same message id until JetStream
// answers, the input kept, and the stage never gives up on it — giving up
// then would announce a failure that the next stage could contradict
// (issue 19: grounding's five short retries, then PROCESSING_FAILED for
// proposals the provider confirmed).
func TestRunnerRetriesUnansweredHandOffUntilStored(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	if _, err := r.js.CreateStream(ctx, jetstream.StreamConfig{Name: "LATER", Subjects: []string{"later.>"}, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := r.js.DeleteStream(ctx, "LATER"); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	r.run(t, funcHandler{
		handle: func(_ context.Context, in *stages.Input) (stages.Result, error) {
			calls.Add(1)
			return stages.Result{Next: []stages.Message{{Subject: "later.p1", Data: in.Data}}}, nil
		},
		giveUp: func(context.Context, *stages.Input, error) (stages.Result, error) {
			t.Error("gave up while its hand-off may have been stored")
			return stages.Result{Outcomes: []schema.Outcome{failure("p1", schema.CodeProcessingFailed)}}, nil
		},
	}, stages.RunnerConfig{MaxAttempts: 1, Hold: func(int) time.Duration { return 20 * time.Millisecond },
		PublishTimeout: 200 * time.Millisecond})
	r.publish(t, "in.1", "hand-off")
	retries := r.metrics.StageMessages.WithLabelValues(subjects.StageGrounding, metrics.ResultRetry)
	testenv.WaitFor(t, "the hand-off retried while the next stream is away", func() bool { return testutil.ToFloat64(retries) >= 5 })
	if _, err := r.js.CreateStream(ctx, jetstream.StreamConfig{Name: "LATER", Subjects: []string{"later.>"}, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	r.quiesce(t)
	if n := r.streamMsgs(t, "LATER"); n != 1 {
		t.Errorf("LATER holds %d messages, want the one hand-off", n)
	}
	if calls.Load() != 1 {
		t.Errorf("handled %d times, want once: the outputs are retried, not the decision", calls.Load())
	}
	r.counted(t, metrics.ResultForwarded, 1)
	r.counted(t, metrics.ResultGaveUp, 0)
}

// A handler that panics fails its input, counted like any other failure;
// the processor goes on, and the input ends with GiveUp's outcome.
func TestRunnerRecoversHandlerPanics(t *testing.T) {
	r := newRig(t)
	r.run(t, funcHandler{
		handle: func(context.Context, *stages.Input) (stages.Result, error) {
			var m map[string]int
			m["boom"]++ // a nil map write: a bug, not an input's fault
			return stages.Result{}, nil
		},
		giveUp: func(_ context.Context, in *stages.Input, cause error) (stages.Result, error) {
			if !errors.Is(cause, stages.ErrRetriesExhausted) {
				t.Errorf("cause = %v", cause)
			}
			return stages.Result{Outcomes: []schema.Outcome{failure("panics", schema.CodeProcessingFailed)}}, nil
		},
	}, stages.RunnerConfig{MaxAttempts: 2, Backoff: func(uint64) time.Duration { return 10 * time.Millisecond }})
	r.publish(t, "in.1", "x")
	r.rec.Wait(t, "panics", testenv.Terminal)
	r.quiesce(t)
	r.counted(t, metrics.ResultGaveUp, 1)
}

// Stopping a runner releases an input held through an outage at once
// (for another processor to take) instead of holding the drain.
func TestRunnerStopReleasesHeldInput(t *testing.T) {
	r := newRig(t)
	var calls atomic.Int32
	stop := r.run(t, funcHandler{handle: func(context.Context, *stages.Input) (stages.Result, error) {
		calls.Add(1)
		return stages.Result{}, jetstream.ErrNoStreamResponse
	}}, stages.RunnerConfig{Hold: func(int) time.Duration { return time.Hour }})
	r.publish(t, "in.1", "x")
	testenv.WaitFor(t, "the input held", func() bool { return calls.Load() == 1 })
	stop() // returns only once every worker is done: the held input did not keep it
	r.run(t, funcHandler{handle: func(context.Context, *stages.Input) (stages.Result, error) {
		return stages.Result{Outcomes: []schema.Outcome{failure("released", schema.CodeDiscriminatorMismatch)}}, nil
	}}, stages.RunnerConfig{})
	r.rec.Wait(t, "released", testenv.Terminal)
	r.quiesce(t)
}

// TestRunnerSourceShares: with several sources (a host each), a source
// takes on at most MaxInFlightPerSource inputs while another has inputs
// in flight, so that another's input is handled at once while the first
// one's burst waits in its own stream; alone, a source may use every
// worker; and a source Admit holds back waits there without a worker.
func TestRunnerSourceShares(t *testing.T) {
	r := newRig(t)
	releaseA, releaseB := make(chan struct{}), make(chan struct{})
	var running, most atomic.Int32
	var aRunning atomic.Int32
	h := funcHandler{handle: func(_ context.Context, in *stages.Input) (stages.Result, error) {
		id := string(in.Data)
		switch {
		case id == "a-slow":
			aRunning.Add(1)
			<-releaseA
			aRunning.Add(-1)
		case strings.HasPrefix(id, "b-"):
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			<-releaseB
			running.Add(-1)
		}
		return stages.Result{Outcomes: []schema.Outcome{failure(id, schema.CodeDiscriminatorMismatch)}}, nil
	}}
	admitC := make(chan struct{})
	r.run(t, h, stages.RunnerConfig{MaxInFlight: 8, MaxInFlightPerSource: 2,
		Sources: []stages.Source{
			{Stream: "IN", FilterSubject: "in.a.>", Durable: "grounding_a", Host: "a"},
			{Stream: "IN", FilterSubject: "in.b.>", Durable: "grounding_b", Host: "b"},
			{Stream: "IN", FilterSubject: "in.c.>", Durable: "grounding_c", Host: "c"},
		},
		Admit: func(ctx context.Context, s stages.Source) error {
			if s.Host != "c" {
				return nil
			}
			select {
			case <-admitC:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	})
	r.publish(t, "in.a.slow", "a-slow")
	testenv.WaitFor(t, "a's input running", func() bool { return aRunning.Load() == 1 })
	for i := range 6 {
		r.publish(t, fmt.Sprintf("in.b.%d", i), fmt.Sprintf("b-%d", i))
	}
	r.publish(t, "in.c.0", "c-0")
	testenv.WaitFor(t, "two of b's inputs running", func() bool { return running.Load() == 2 })
	r.publish(t, "in.a.0", "a-0")
	r.rec.Wait(t, "a-0", testenv.Terminal)
	if m := most.Load(); m != 2 {
		t.Errorf("b's inputs at once while a's run: %d, want its share 2", m)
	}
	if outs := r.rec.Outcomes("c-0"); len(outs) != 0 {
		t.Errorf("c's input handled while its source was held back: %+v", outs)
	}
	// a done: b alone takes on every input it has.
	close(releaseA)
	testenv.WaitFor(t, "b alone running all six", func() bool { return running.Load() == 6 })
	close(admitC)
	r.rec.Wait(t, "c-0", testenv.Terminal)
	close(releaseB)
	for i := range 6 {
		r.rec.Wait(t, fmt.Sprintf("b-%d", i), testenv.Terminal)
	}
}
