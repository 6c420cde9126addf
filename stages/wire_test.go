package stages_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// batchWrites runs a runner on a connection of its own, dialed through a
// Wire that counts its writes, over n inputs fetched together, each
// handing on perInput messages; with batch the runner holds the Wire
// (Deps.Wire), without it the Wire only counts. It returns the writes the
// runner's connection made from the start of the runner until every
// input was acked, and the messages the runner sent meanwhile (hand-offs
// and acks).
func batchWrites(t *testing.T, n, perInput int, batch, oneByOne bool) (writes uint64, msgs int) {
	t.Helper()
	r := newRig(t)
	wire := &stages.Wire{}
	nc := testenv.Connect(t, r.srv, wire.Option())
	wire.Attach(nc)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if !oneByOne {
		for i := range n {
			r.publish(t, "in."+strconv.Itoa(i), "x")
		}
	}
	deps := stages.Deps{JS: js, Seal: r.seal, Subjects: r.subj, Metrics: r.metrics, Outcomes: r.store, Clock: stages.SystemClock{}}
	if batch {
		deps.Wire = wire
	}
	runner := stages.NewRunner(stages.RunnerConfig{Stage: subjects.StageGrounding, Stream: "IN", FilterSubject: "in.>", Batch: n},
		deps, funcHandler{handle: func(_ context.Context, in *stages.Input) (stages.Result, error) {
			// A little work, as a stage's handler does: the inputs fetched
			// together end at different moments, not in one burst.
			for start := time.Now(); time.Since(start) < 50*time.Microsecond; {
			}
			var res stages.Result
			for j := range perInput {
				res.Next = append(res.Next, stages.Message{Subject: "next." + strconv.Itoa(j), Data: in.Data})
			}
			return res, nil
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	before := wire.Writes()
	go func() { done <- runner.Run(ctx, context.Background()) }()
	forwarded := r.metrics.StageMessages.WithLabelValues(subjects.StageGrounding, metrics.ResultForwarded)
	if oneByOne {
		testenv.WaitFor(t, "the runner consuming", runner.Consuming)
		for i := range n {
			r.publish(t, "in."+strconv.Itoa(i), "x")
			testenv.WaitFor(t, "the input forwarded", func() bool { return testutil.ToFloat64(forwarded) >= float64(i+1) })
		}
	}
	testenv.WaitFor(t, "every input forwarded", func() bool { return testutil.ToFloat64(forwarded) >= float64(n) })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	writes = wire.Writes() - before // Run returns once its acks are written
	r.waitPendingAcks(t, 0)
	if got := r.streamMsgs(t, "NEXT"); got != uint64(n*perInput) {
		t.Fatalf("NEXT holds %d messages, want %d", got, n*perInput)
	}
	return writes, n*perInput + n
}

// A stage's inputs fetched together go out in a few writes: each input's
// hand-offs in one, and the acks ready together in one. Without the
// Wire's holds (the runner as it was) nats.go's flusher, woken at every
// message, writes them about one by one.
func TestRunnerBatchesWrites(t *testing.T) {
	const n, perInput = 64, 1
	unbatched, msgs := batchWrites(t, n, perInput, false, false)
	batched, _ := batchWrites(t, n, perInput, true, false)
	t.Logf("%d inputs, %d messages sent: %d writes unbatched, %d batched", n, msgs, unbatched, batched)
	// Measured without -race: 71 writes unbatched, 8 to 12 batched. The
	// race detector slows every goroutine so much that nats.go's flusher
	// coalesces as much by itself (13 to 32 writes either way): there
	// only the bound of an input's own writes holds.
	bound := uint64(n / 2)
	if raceEnabled {
		bound = 2*n + 16
	}
	if batched > bound {
		t.Errorf("%d writes for %d inputs (%d messages), want at most %d", batched, n, msgs, bound)
	}
}

// What a hold keeps goes out in one write at its release, in order, however
// long the hold and however often nats.go's flusher wrote meanwhile; and
// nothing waits for a release beyond MaxDelay.
func TestWireHoldsWrites(t *testing.T) {
	s := testenv.StartServer(t, "")
	sub := testenv.Connect(t, s)
	got, err := sub.SubscribeSync("w.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	wire := &stages.Wire{MaxDelay: time.Minute}
	nc := testenv.Connect(t, s, wire.Option())
	wire.Attach(nc)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	receive := func(want string) {
		t.Helper()
		m, err := got.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("waiting for %s: %v", want, err)
		}
		if m.Subject != want {
			t.Fatalf("received %s, want %s", m.Subject, want)
		}
	}

	before := wire.Writes()
	wire.Hold()
	for i := range 10 {
		if err := nc.Publish("w."+strconv.Itoa(i), nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // the flusher writes each, into the hold
	}
	if _, err := got.NextMsg(20 * time.Millisecond); err == nil {
		t.Fatal("a message went out during the hold")
	}
	wire.Release()
	for i := range 10 {
		receive("w." + strconv.Itoa(i))
	}
	if n := wire.Writes() - before; n != 1 {
		t.Errorf("%d writes for 10 messages under one hold, want 1", n)
	}

	// Without a hold, each goes as nats.go flushes it.
	before = wire.Writes()
	for i := range 3 {
		if err := nc.Publish("w.free"+strconv.Itoa(i), nil); err != nil {
			t.Fatal(err)
		}
		receive("w.free" + strconv.Itoa(i))
	}
	if n := wire.Writes() - before; n != 3 {
		t.Errorf("%d writes for 3 messages apart, want 3", n)
	}

	// A hold never released: MaxDelay lets the bytes out.
	short := &stages.Wire{MaxDelay: 20 * time.Millisecond}
	nc2 := testenv.Connect(t, s, short.Option())
	short.Attach(nc2)
	short.Hold()
	start := time.Now()
	if err := nc2.Publish("w.late", nil); err != nil {
		t.Fatal(err)
	}
	receive("w.late")
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a held write went out after %v; MaxDelay is 20ms", d)
	}
	if err := nc2.Publish("w.later", nil); err != nil {
		t.Fatal(err)
	}
	receive("w.later") // the hold expired: writes go through until it ends
	short.Release()
}

// A hand-off whose PubAck is lost (the stream stores it and says nothing:
// NoAck) is published again under the same message id until its PubAck
// comes, the input kept: stored once, handled once, never failed.
func TestRunnerRepublishesWhenPubAckLost(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	cfg := jetstream.StreamConfig{Name: "MUTE", Subjects: []string{"mute.>"}, Duplicates: time.Minute, NoAck: true}
	if _, err := r.js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	r.run(t, funcHandler{
		handle: func(_ context.Context, in *stages.Input) (stages.Result, error) {
			calls.Add(1)
			return stages.Result{Next: []stages.Message{{Subject: "mute.p1", Data: in.Data}}}, nil
		},
		giveUp: func(context.Context, *stages.Input, error) (stages.Result, error) {
			t.Error("gave up on an input whose hand-off was stored")
			return stages.Result{}, nil
		},
	}, stages.RunnerConfig{MaxAttempts: 1, Hold: func(int) time.Duration { return 10 * time.Millisecond },
		PublishTimeout: 100 * time.Millisecond})
	r.publish(t, "in.1", "hand-off")
	retries := r.metrics.StageMessages.WithLabelValues(subjects.StageGrounding, metrics.ResultRetry)
	testenv.WaitFor(t, "the hand-off published again while its PubAcks are lost", func() bool { return testutil.ToFloat64(retries) >= 3 })
	if n := r.streamMsgs(t, "MUTE"); n != 1 {
		t.Fatalf("MUTE holds %d messages while PubAcks are lost, want the one hand-off (the same message id each time)", n)
	}
	if n := r.pendingAcks(t); n != 1 {
		t.Errorf("%d inputs unacked while the hand-off's PubAck is lost, want 1 (kept)", n)
	}
	cfg.NoAck = false
	if _, err := r.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	r.quiesce(t)
	if n := r.streamMsgs(t, "MUTE"); n != 1 {
		t.Errorf("MUTE holds %d messages, want the one hand-off", n)
	}
	s, err := r.js.Stream(ctx, "MUTE")
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if id := m.Header.Get(jetstream.MsgIDHeader); id == "" {
		t.Error("the hand-off was stored without a message id")
	}
	if calls.Load() != 1 {
		t.Errorf("handled %d times, want once: the outputs are retried, not the decision", calls.Load())
	}
	r.counted(t, metrics.ResultForwarded, 1)
	r.counted(t, metrics.ResultGaveUp, 0)
}
