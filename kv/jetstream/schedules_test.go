package jetstream_test

import (
	"context"
	"strings"
	"testing"
	"time"

	kvjs "github.com/portcullis/portcullis/kv/jetstream"

	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/seal"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/subjects"
)

// A schedule fires its timer once, sealed for the timer subject, at its
// due time; arming it again replaces it; another MsgID is another timer.
func TestSchedules(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	subj := subjects.Default()
	const stage = subjects.StageReconciliation
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: subj.TimersStream(stage), Subjects: []string{subj.StageKind(stage, subjects.KindTimer), subj.Schedules(stage)},
		AllowMsgSchedules: true, Discard: jetstream.DiscardOld}); err != nil {
		t.Fatal(err)
	}
	sealer, _ := seal.New([]byte(strings.Repeat("k", 32)))
	ts := &kvjs.Schedules{JS: js, Subjects: subj, Seal: sealer}
	target := subj.Stage(stage, subjects.KindTimer, strings.Repeat("ab", 32))
	now := time.Now()
	poll := func(msgID string, due time.Duration) kv.Timer {
		return kv.Timer{ID: "reconcile/ab", DueMs: now.Add(due).UnixMilli(), Subject: target, Data: []byte(msgID), MsgID: msgID}
	}
	for _, tm := range []kv.Timer{poll("poll/1", 300*time.Millisecond), poll("poll/1", 600*time.Millisecond), poll("poll/2", 900*time.Millisecond)} {
		if err := ts.Arm(ctx, tm); err != nil {
			t.Fatal(err)
		}
	}
	if err := ts.Arm(ctx, kv.Timer{ID: "x", Subject: subj.Outcome("h", "p"), MsgID: "x"}); err == nil {
		t.Error("armed a timer for a subject that is no stage's timer subject")
	}
	cons, err := js.OrderedConsumer(ctx, subj.TimersStream(stage), jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj.StageKind(stage, subjects.KindTimer)}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	// Until a second after the last due time: a third message would be a
	// timer fired twice or one not replaced.
	deadline := now.Add(2 * time.Second)
	for time.Now().Before(deadline) {
		m, err := cons.Next(jetstream.FetchMaxWait(200 * time.Millisecond))
		if err != nil {
			continue
		}
		if m.Subject() != target || !sealer.Check(target, m.Data(), m.Headers()) {
			t.Errorf("fired on %s, sealed %v", m.Subject(), sealer.Check(target, m.Data(), m.Headers()))
		}
		due := map[string]time.Duration{"poll/1": 600 * time.Millisecond, "poll/2": 900 * time.Millisecond}[string(m.Data())]
		// The server's clock decides (its due time is to the millisecond,
		// the test's clock read before arming): a few ms early is its
		// rounding, not an early firing.
		if at := time.Since(now); at < due-10*time.Millisecond || at > due+2*time.Second {
			t.Errorf("%s fired after %s, due after %s", m.Data(), at, due)
		}
		got = append(got, string(m.Data()))
	}
	// The first poll/1 was replaced; each timer fired once.
	if want := []string{"poll/1", "poll/2"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("fired %v, want %v", got, want)
	}
}

// Local timers are Pebble timers: the scheduler fires them.
func TestLocal(t *testing.T) {
	st, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tm := kv.Timer{ID: "reconcile/ab", DueMs: 5, Subject: "s", MsgID: "m"}
	if err := st.Arm(context.Background(), tm); err != nil {
		t.Fatal(err)
	}
	if got, found, err := st.Timer(tm.ID); err != nil || !found || got.DueMs != 5 {
		t.Fatalf("Timer = %+v %v %v", got, found, err)
	}
}
