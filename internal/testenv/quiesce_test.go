package testenv_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// Quiesce does not return while a stage holds a message, and says which.
func TestQuiesceNamesTheBusyConsumer(t *testing.T) {
	env := testenv.New(t)
	release := make(chan struct{})
	var calls atomic.Int64
	env.Fakes["demo"].OnDispatch(func(ctx context.Context, _ schema.DispatchRequest) (schema.AdapterReply, error) {
		calls.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed}, nil
	})
	env.PublishSigned(t, testenv.Granted(t, testenv.Lumber("prop-held"), "sku-1001", env.Clock.Now()), env.Host)
	// Once dispatch holds it (before, Quiesce would name an earlier stage
	// on a slow machine).
	testenv.WaitFor(t, "the provider called", func() bool { return calls.Load() > 0 })
	msg := env.QuiesceFailure(300 * time.Millisecond)
	if !strings.Contains(msg, "not idle after 300ms") || !strings.Contains(msg, "consumer dispatch") {
		t.Fatalf("Quiesce with dispatch holding a message reported %q", msg)
	}
	close(release)
	env.Quiesce(t)
	if outs := env.Recorder.Outcomes("prop-held"); len(outs) != 1 || outs[0].Kind != schema.KindConfirmed {
		t.Fatalf("after Quiesce: outcomes %+v, want one CONFIRMED", outs)
	}
}

// Everything a burst leads to is recorded once Quiesce returns, without
// waiting for any outcome first.
func TestQuiesceAfterABurst(t *testing.T) {
	env := testenv.New(t)
	const n = 30
	for i := range n {
		id := fmt.Sprintf("prop-%02d", i)
		p := testenv.Set(testenv.Lumber(id), "intent.payload", map[string]any{"quantity": i + 1})
		if i%2 == 0 {
			p = testenv.Granted(t, p, "sku-1001", env.Clock.Now())
		}
		env.PublishSigned(t, p, env.Host)
	}
	env.Quiesce(t)
	for i := range n {
		id := fmt.Sprintf("prop-%02d", i)
		want := schema.KindConfirmed
		if i%2 != 0 {
			want = schema.KindNeedsApproval
		}
		if outs := env.Recorder.Outcomes(id); len(outs) != 1 || outs[0].Kind != want {
			t.Errorf("%s: outcomes %+v, want one %s", id, outs, want)
		}
	}
	if got := env.Fakes["demo"].Dispatches(); got != n/2 {
		t.Errorf("%d dispatches, want %d", got, n/2)
	}
}

// A message waiting for a delayed redelivery is not idle: a provider
// nobody answers is retried for its unavailable_retry window (2s here),
// and Quiesce returns only after the proposal ended.
func TestQuiesceWaitsForDelayedRetries(t *testing.T) {
	env := testenv.New(t)
	p := testenv.Set(testenv.Lumber("prop-unanswered"), "intent.provider", "inventory") // no connector serves it
	env.PublishSigned(t, testenv.Granted(t, p, "sku-1001", env.Clock.Now()), env.Host)
	env.Quiesce(t)
	outs := env.Recorder.Outcomes("prop-unanswered")
	if len(outs) != 1 || outs[0].Kind != schema.KindFailedBeforeDispatch {
		t.Fatalf("after Quiesce: outcomes %+v, want one FAILED_BEFORE_DISPATCH", outs)
	}
}

// Right after a PubAck a consumer may not know of the message yet, and
// reports nothing pending: Quiesce compares with the stream and never
// calls a consumer idle that has a message it has not delivered.
func TestQuiesceSeesMessagesTheConsumerDoesNotKnowYet(t *testing.T) {
	s := testenv.StartServer(t, "")
	js, err := jetstream.New(testenv.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}}); err != nil {
		t.Fatal(err)
	}
	c, err := js.CreateOrUpdateConsumer(ctx, "IN", jetstream.ConsumerConfig{Durable: "d", FilterSubject: "in.*", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if _, err := js.Publish(ctx, "in.x", []byte("x")); err != nil {
			t.Fatal(err)
		}
		// Nobody consumes: Quiesce must time out.
		msg := func() (msg string) {
			tb, stop := testenv.Standalone()
			defer stop()
			defer func() { msg = fmt.Sprint(recover()) }()
			testenv.QuiesceConsumersWithin(tb, 30*time.Millisecond, js, nil, testenv.StageConsumer{Name: "d", Stream: "IN"})
			return ""
		}()
		if !strings.Contains(msg, "consumer d (stream IN)") {
			t.Fatalf("publish %d: Quiesce with an undelivered message reported %q", i, msg)
		}
		b, err := c.FetchNoWait(1)
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestServerStoreLimit: the test servers, like the processor's embedded
// one, reserve the streams' byte budgets against an explicit store limit,
// not against 75 % of the disk free at start (the default budgets, about
// 10 GiB, could not be created on a disk with less than about 14 GiB free:
// every test failed with "insufficient storage resources available").
func TestServerStoreLimit(t *testing.T) {
	s := testenv.StartServer(t, "")
	if got := s.JetStreamConfig().MaxStore; got != engine.EmbeddedMaxStore {
		t.Fatalf("JetStream max store %d, want %d", got, engine.EmbeddedMaxStore)
	}
}
