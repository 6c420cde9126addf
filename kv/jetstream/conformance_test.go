package jetstream_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/seal"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/kv"
	kvjs "github.com/portcullis/portcullis/kv/jetstream"
	"github.com/portcullis/portcullis/kv/kvtest"
	"github.com/portcullis/portcullis/subjects"
)

var conformanceBuckets atomic.Int64

// connect is one more connection to url (another processor's), closed
// with t.
func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func testSealer(t *testing.T) *seal.Sealer {
	t.Helper()
	s, err := seal.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTimersConformance runs Schedules: the server fires each timer from
// the stage's timers stream, read here by an ordered consumer.
func TestTimersConformance(t *testing.T) {
	kvtest.RunTimers(t, func(t *testing.T) (kv.Timers, func(string) string, func() []string) {
		url := servers(t, 1)
		js := connect(t, url)
		subj := subjects.Default()
		const stage = subjects.StageReconciliation
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: subj.TimersStream(stage),
			Subjects:          []string{subj.StageKind(stage, subjects.KindTimer), subj.Schedules(stage)},
			AllowMsgSchedules: true, Discard: jetstream.DiscardOld}); err != nil {
			t.Fatal(err)
		}
		cons, err := js.OrderedConsumer(ctx, subj.TimersStream(stage), jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{subj.StageKind(stage, subjects.KindTimer)}})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var fired []string
		cc, err := cons.Consume(func(m jetstream.Msg) {
			mu.Lock()
			defer mu.Unlock()
			fired = append(fired, string(m.Data()))
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cc.Stop)
		sealer := testSealer(t)
		return &kvjs.Schedules{JS: js, Subjects: subj, Seal: sealer},
			func(id string) string { return subj.Stage(stage, subjects.KindTimer, id) },
			func() []string {
				mu.Lock()
				defer mu.Unlock()
				return slices.Clone(fired)
			}
	})
}

// TestActivityConformance runs Activity on one bucket, each instance on
// its own connection.
func TestActivityConformance(t *testing.T) {
	kvtest.RunActivity(t, func(t *testing.T) (kv.Activity, func() kv.Activity) {
		url := servers(t, 1)
		bucket := kvjs.Bucket{Name: fmt.Sprintf("activity_%d", conformanceBuckets.Add(1)), Replicas: 1}
		another := func() kv.Activity {
			_, h := kvtest.OpenBucket(t, url, bucket)
			return &kvjs.Activity{KV: h, Now: func() int64 { return time.Now().UnixMilli() }}
		}
		return another(), another
	})
}

// TestEnvelopesConformance runs Envelopes on a stream per host, each
// bounded by kvtest.EnvelopeBudget and refusing new messages when full,
// as engine.StreamConfigs makes them.
func TestEnvelopesConformance(t *testing.T) {
	kvtest.RunEnvelopes(t, func(t *testing.T) (kv.Envelopes, func() kv.Envelopes) {
		url := servers(t, 1)
		js := connect(t, url)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, h := range []string{"a", "b"} {
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KEPT_" + h, Subjects: []string{"kept." + h + ".>"},
				MaxBytes: kvtest.EnvelopeBudget, Discard: jetstream.DiscardNew, MaxMsgsPerSubject: 1}); err != nil {
				t.Fatal(err)
			}
		}
		sealer := testSealer(t)
		another := func() kv.Envelopes {
			return &kvjs.Envelopes{JS: connect(t, url), Seal: sealer,
				Stream:  func(h string) string { return "KEPT_" + h },
				Subject: func(h, key string) string { return "kept." + h + "." + key },
			}
		}
		return another(), another
	})
}

// TestOutcomeHistoryConformance runs OutcomeHistory on the outcomes
// stream as the engine makes it (OutcomeStream), each instance on its own
// connection.
func TestOutcomeHistoryConformanceR1(t *testing.T) { outcomeHistoryConformance(t, servers(t, 1), 1) }
func TestOutcomeHistoryConformanceR3(t *testing.T) { outcomeHistoryConformance(t, servers(t, 3), 3) }

func outcomeHistoryConformance(t *testing.T, url string, replicas int) {
	kvtest.RunOutcomeHistory(t, func(t *testing.T) (kv.OutcomeHistory, func() kv.OutcomeHistory) {
		// A prefix of its own per subtest: the cluster is shared.
		subj, err := subjects.New(fmt.Sprintf("oh%d", conformanceBuckets.Add(1)))
		if err != nil {
			t.Fatal(err)
		}
		cfg := kvjs.OutcomeStream(subj)
		cfg.Duplicates = time.Minute
		cfg.Replicas = replicas
		js := connect(t, url)
		// A cluster may still be placing the last stream's replicas.
		testenv.Retry(t, func(ctx context.Context) error { _, err := js.CreateStream(ctx, cfg); return err })
		another := func() kv.OutcomeHistory { return &kvjs.OutcomeHistory{JS: connect(t, url), Subjects: subj} }
		return another(), another
	})
}
