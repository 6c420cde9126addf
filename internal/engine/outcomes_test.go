package engine_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/subjects"
)

// The outcome stream of an earlier version captured the public outcome
// subjects themselves. A start changes it in place: it captures the
// processor's record subjects, stores under the public ones and sends
// what it stored there live (kv/jetstream.OutcomeStream); the history it held
// stays readable by direct get, and the next outcome on a subject follows
// the last one there.
func TestOutcomeStreamOfAnEarlierVersion(t *testing.T) {
	srv := testenv.StartServer(t, "")
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	subj := subjects.Default()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: subj.OutcomesStream(), Subjects: []string{subj.Outcomes()},
		Storage: jetstream.FileStorage, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	old, err := js.Publish(ctx, subj.Outcome(testenv.HostName, "p-1"), []byte(`{"kind":"NEEDS_APPROVAL"}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Defaults()
	cfg.NATS = config.NATS{URL: srv.ClientURL(), Replicas: 1}
	cfg.Store.Dir, cfg.Metrics.Listen = t.TempDir(), ""
	p, err := engine.Start(ctx, engine.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()

	st, err := js.Stream(ctx, subj.OutcomesStream())
	if err != nil {
		t.Fatal(err)
	}
	c := st.CachedInfo().Config
	if len(c.Subjects) != 1 || c.Subjects[0] != subj.OutcomeRecords() || c.SubjectTransform == nil || c.RePublish == nil ||
		c.RePublish.Destination != subj.Outcomes() || !c.AllowDirect {
		t.Fatalf("outcome stream after the start: %+v", c)
	}
	if m, err := st.GetLastMsgForSubject(ctx, subj.Outcome(testenv.HostName, "p-1")); err != nil || m.Sequence != old.Sequence {
		t.Fatalf("the earlier outcome: %v %v", m, err)
	}
	live, err := nc.SubscribeSync(subj.HostOutcomes(testenv.HostName))
	if err != nil {
		t.Fatal(err)
	}
	next := nats.NewMsg(subj.OutcomeRecord(testenv.HostName, "p-1"))
	next.Data = []byte(`{"kind":"CONFIRMED"}`)
	next.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	if _, err := js.PublishMsg(ctx, next); err == nil {
		t.Fatal("a publish expecting an empty subject was stored after the earlier outcome")
	}
	next.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(old.Sequence, 10))
	ack, err := js.PublishMsg(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	m, err := live.NextMsg(5 * time.Second)
	if err != nil || m.Subject != subj.Outcome(testenv.HostName, "p-1") || string(m.Data) != `{"kind":"CONFIRMED"}` ||
		m.Header.Get(jetstream.SequenceHeader) != strconv.FormatUint(old.Sequence+1, 10) {
		t.Fatalf("live: %v %v", m, err)
	}
	if _, err := live.NextMsg(200 * time.Millisecond); err == nil {
		t.Error("the refused publish was sent live")
	}
	if last, err := st.GetLastMsgForSubject(ctx, subj.Outcome(testenv.HostName, "p-1")); err != nil || last.Sequence != ack.Sequence {
		t.Errorf("the last outcome: %v %v, want sequence %d", last, err, ack.Sequence)
	}
}
