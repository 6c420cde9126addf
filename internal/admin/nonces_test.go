package admin_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/internal/leaderkv/leaderkvtest"
	"github.com/portcullis/portcullis/testenv"
)

var nonceBuckets atomic.Int64

// replicatedNonces opens n processors' nonces on one fresh bucket on url,
// each on its own connection.
func replicatedNonces(t *testing.T, url string, replicas, n int) []*admin.ReplicatedNonces {
	t.Helper()
	bucket := fmt.Sprintf("nonces_%d", nonceBuckets.Add(1))
	var out []*admin.ReplicatedNonces
	for range n {
		_, h := leaderkvtest.Open(t, url, admin.NonceBucket(bucket, replicas))
		out = append(out, &admin.ReplicatedNonces{KV: h, Margin: time.Millisecond})
	}
	return out
}

func testNonces(t *testing.T, url string, replicas int) {
	ns := replicatedNonces(t, url, replicas, 3)
	now := time.Now().UnixMilli()
	// Racing claims of one nonce on three processors: one winner.
	for round := range 10 {
		nonce := fmt.Sprintf("nonce-race-%d-abcdefgh", round)
		var wins atomic.Int64
		var wg sync.WaitGroup
		for _, n := range ns {
			wg.Go(func() {
				fresh, err := n.ClaimNonce(nonce, now+60_000, now)
				if err != nil {
					t.Error(err)
				}
				if fresh {
					wins.Add(1)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("round %d: %d claims of one nonce won", round, wins.Load())
		}
	}
	// A claim is forgotten after its expiry (the key's TTL): an expired
	// nonce's key does not grow the bucket forever.
	fresh, err := ns[0].ClaimNonce("nonce-short-abcdefgh", now, now)
	if err != nil || !fresh {
		t.Fatalf("claim: %v, %v", fresh, err)
	}
	if fresh, err := ns[1].ClaimNonce("nonce-short-abcdefgh", now, now); err != nil || fresh {
		t.Fatalf("replay: %v, %v", fresh, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		fresh, err := ns[2].ClaimNonce("nonce-short-abcdefgh", time.Now().UnixMilli()+60_000, time.Now().UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		if fresh {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an expired nonce's claim was never forgotten")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestReplicatedNoncesR1(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	testNonces(t, ns.ClientURL(), 1)
}

func TestReplicatedNoncesR3(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster")
	}
	testNonces(t, testenv.NewCluster(t).URL(), 3)
}
