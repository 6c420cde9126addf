package journal_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/journal"
	"github.com/portcullis/portcullis/internal/journal/journaltest"
	"github.com/portcullis/portcullis/internal/leaderkv/leaderkvtest"
	"github.com/portcullis/portcullis/internal/seal"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/internal/timers"
	"github.com/portcullis/portcullis/subjects"
)

var buckets atomic.Int64

// replicated opens the conformance suite's journals on url: a fresh bucket
// per subtest, each instance on its own connection (another processor).
func replicated(url string, replicas int) journaltest.Open {
	return func(t *testing.T) (journal.Store, func() journal.Store) {
		bucket := fmt.Sprintf("journal_%d", buckets.Add(1))
		n := 0
		open := func() journal.Store {
			js, kv := leaderkvtest.Open(t, url, journal.Bucket(bucket, replicas))
			sealer, err := seal.New(make([]byte, 32))
			if err != nil {
				t.Fatal(err)
			}
			n++
			return journal.NewReplicated(journal.ReplicatedOptions{
				KV: kv, JS: js, Writer: fmt.Sprintf("p_%016d", n),
				Timers: &timers.Schedules{JS: js, Subjects: subjects.Default(), Seal: sealer},
			})
		}
		return open(), open
	}
}

func TestReplicatedR1(t *testing.T) {
	journaltest.Run(t, replicated(testenv.StartServer(t, "").ClientURL(), 1))
}

func TestReplicatedR3(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster")
	}
	journaltest.Run(t, replicated(testenv.NewCluster(t).URL(), 3))
}

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
			var kv jetstream.KeyValue
			testenv.Retry(b, func(ctx context.Context) (err error) {
				kv, err = journal.Bucket("journal_bench", r).Ensure(ctx, js)
				return err
			})
			j := journal.NewReplicated(journal.ReplicatedOptions{KV: kv, JS: js, Writer: "p_bench"})
			fp := "sha256:" + strings.Repeat("ab", 32)
			rec := journal.New(journal.Identity{Fingerprint: fp, IdempotencyKey: fp[7:], Provider: "demo", Referent: "sku-1"}, "fake", 1)
			b.ResetTimer()
			for i := range b.N {
				unlock := j.Lock(fp)
				if _, _, err := j.Load(fp); err != nil {
					b.Fatal(err)
				}
				rec.UpdatedAtMs = int64(i)
				if err := j.Commit(fp, journal.Writes{Record: &rec}); err != nil {
					b.Fatal(err)
				}
				unlock()
			}
		})
	}
}
