package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv"
	kvjs "github.com/portcullis/portcullis/kv/jetstream"
	"github.com/portcullis/portcullis/kv/kvtest"
	"github.com/portcullis/portcullis/schema"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/seal"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/subjects"
)

var buckets atomic.Int64

// replicated opens the conformance suite's journals on url: a fresh bucket
// per subtest, each instance on its own connection (another processor).
func replicated(url string, replicas int) kvtest.OpenJournal {
	return func(t *testing.T) (kv.Journal, func() kv.Journal) {
		bucket := fmt.Sprintf("journal_%d", buckets.Add(1))
		n := 0
		open := func() kv.Journal {
			js, b := kvtest.OpenBucket(t, url, kvjs.JournalBucket(bucket, replicas))
			sealer, err := seal.New(make([]byte, 32))
			if err != nil {
				t.Fatal(err)
			}
			n++
			return kvjs.NewJournal(kvjs.JournalOptions{
				KV: b, JS: js, Writer: fmt.Sprintf("p_%016d", n),
				Timers: &kvjs.Schedules{JS: js, Subjects: subjects.Default(), Seal: sealer},
			})
		}
		return open(), open
	}
}

func TestJournalR1(t *testing.T) { kvtest.RunJournal(t, replicated(servers(t, 1), 1)) }
func TestJournalR3(t *testing.T) { kvtest.RunJournal(t, replicated(servers(t, 3), 3)) }

// BenchmarkReplicatedCommit measures one compare-and-set of a record
// (Lock, Load, Commit of an update) on R1 (one server) and R3 (a
// three-server cluster).
func BenchmarkReplicatedCommit(b *testing.B) {
	for _, r := range []int{1, 3} {
		b.Run(fmt.Sprintf("R%d", r), func(b *testing.B) {
			url := ""
			if r == 1 {
				s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: b.TempDir(), NoSigs: true, NoLog: true})
				if err != nil {
					b.Fatal(err)
				}
				go s.Start()
				if !s.ReadyForConnections(10 * time.Second) {
					b.Fatal("nats-server did not start")
				}
				b.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
				url = s.ClientURL()
			} else {
				url = testenv.NewCluster(b).URL()
			}
			nc, err := nats.Connect(url)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(nc.Close)
			js, _ := jetstream.New(nc)
			var bucket jetstream.KeyValue
			testenv.Retry(b, func(ctx context.Context) (err error) {
				bucket, err = kvjs.JournalBucket("journal_bench", r).Ensure(ctx, js)
				return err
			})
			j := kvjs.NewJournal(kvjs.JournalOptions{KV: bucket, JS: js, Writer: "p_bench"})
			fp := "sha256:" + strings.Repeat("ab", 32)
			rec := kv.NewIntent(kv.Identity{Fingerprint: fp, IdempotencyKey: fp[7:], Target: schema.Target{Provider: "demo", Referent: "sku-1"}}, "fake", 1)
			b.ResetTimer()
			for i := range b.N {
				unlock := j.Lock(fp)
				if _, _, err := j.Load(fp); err != nil {
					b.Fatal(err)
				}
				rec.UpdatedAtMs = int64(i)
				if err := j.Commit(fp, kv.IntentWrites{Record: &rec}); err != nil {
					b.Fatal(err)
				}
				unlock()
			}
		})
	}
}
