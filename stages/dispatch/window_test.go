package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// TestHandOffAfterDuplicateWindow: a hand-off republished later than the
// stream's duplicate window (engine.DuplicateWindow) — a redelivery after
// a long stop, a publish held through a long outage — is stored again and
// dispatch absorbs it: the very hand-off authorization published (its
// subject, body, seal and message id), published again once the dispatch
// stream's window has passed, reaches the provider no second time. It does
// tell the proposal's outcome again (its message id derives from the new
// input's sequence): the same terminal standing, the same receipt — which
// is why the stage streams keep the long window (see streams.go).
func TestHandOffAfterDuplicateWindow(t *testing.T) {
	env := testenv.New(t)
	handOffs := make(chan *nats.Msg, 4)
	sub, err := env.NC.ChanSubscribe(env.Subjects.StageKind(subjects.StageDispatch, subjects.KindProposal), handOffs)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := env.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	p := proposal(t, "prop-window", "ok")
	env.PublishSigned(t, p, env.Host)
	o := env.Recorder.Wait(t, "prop-window", testenv.Terminal)
	if o.Kind != schema.KindConfirmed {
		t.Fatalf("outcome = %+v", o)
	}
	var first *nats.Msg
	select {
	case first = <-handOffs:
	case <-time.After(10 * time.Second):
		t.Fatal("no hand-off to dispatch seen")
	}
	id := first.Header.Get(jetstream.MsgIDHeader)
	if id == "" {
		t.Fatal("the hand-off has no message id")
	}
	env.Quiesce(t)
	key := keyOf(t, p)
	if n := env.Fakes["demo"].DeliveredFor(key); n != 1 {
		t.Fatalf("provider saw the key %d times before the republish", n)
	}

	// The window passes: shrink it, so that the test need not wait two
	// minutes (the server forgets ids older than the window).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := env.JS.Stream(ctx, env.Subjects.StageStream(subjects.StageDispatch))
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	if cfg.Duplicates != engine.DuplicateWindow {
		t.Errorf("dispatch stream's duplicate window %s, want %s", cfg.Duplicates, engine.DuplicateWindow)
	}
	cfg.Duplicates = 100 * time.Millisecond
	if _, err := env.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// The server forgets expired ids on a timer of its own, not at once:
	// publish again until it stores the message (a duplicate is dropped, so
	// the tries leave nothing behind).
	var ack *jetstream.PubAck
	for {
		time.Sleep(300 * time.Millisecond)
		again := nats.NewMsg(first.Subject)
		again.Data, again.Header = first.Data, first.Header
		if ack, err = env.JS.PublishMsg(ctx, again); err != nil {
			t.Fatal(err)
		}
		if !ack.Duplicate {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the republish stayed inside the window: this test proves nothing")
		}
	}
	env.Quiesce(t)
	if n := env.Fakes["demo"].DeliveredFor(key); n != 1 {
		t.Errorf("provider saw the key %d times after a republish past the window", n)
	}
	env.Recorder.Flush(t)
	outs := env.Recorder.Outcomes("prop-window")
	if len(outs) < 1 || len(outs) > 2 {
		t.Fatalf("%d outcomes told", len(outs))
	}
	for _, again := range outs[1:] {
		if again.Kind != o.Kind || !again.Terminal || again.Receipt == nil || again.Receipt.ReceiptID != o.Receipt.ReceiptID || again.RecordedEarlier {
			t.Errorf("the outcome told again is not the one recorded: %+v (first %+v)", again, o)
		}
	}
}
