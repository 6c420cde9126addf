package jetstream_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kvjs "github.com/portcullis/portcullis/kv/jetstream"
	"github.com/portcullis/portcullis/kv/kvtest"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/kv"
)

var nonceBuckets atomic.Int64

// window is the tests' window between accepted stamps.
const window = 10 * time.Second

// replicatedNonces opens n processors' nonces on one fresh bucket on url,
// each on its own connection.
func replicatedNonces(t *testing.T, url string, replicas, n int) []*kvjs.Nonces {
	t.Helper()
	bucket := fmt.Sprintf("nonces_%d", nonceBuckets.Add(1))
	var out []*kvjs.Nonces
	for range n {
		js, h := kvtest.OpenBucket(t, url, kvjs.NonceBucket(bucket, replicas))
		out = append(out, &kvjs.Nonces{KV: h, JS: js, Window: window})
	}
	return out
}

func claimOn(t *testing.T, n *kvjs.Nonces, nonce string, stamp int64) kv.NonceClaim {
	t.Helper()
	c, err := n.ClaimNonce(nonce, stamp)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func keys(t *testing.T, n *kvjs.Nonces) int {
	t.Helper()
	l, err := n.KV.ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := 0
	for range l.Keys() {
		c++
	}
	return c
}

func testNonces(t *testing.T, url string, replicas int) {
	ns := replicatedNonces(t, url, replicas, 3)
	now := time.Now().UnixMilli()
	// Racing claims of one nonce on three processors: one winner.
	nonces := []kv.Nonces{ns[0], ns[1], ns[2]}
	for round := range 10 {
		kvtest.RaceNonce(t, nonces, fmt.Sprintf("nonce-race-%d-abcdefgh", round), now)
	}
	// Nothing is forgotten by time: no claim carries a TTL.
	st, err := ns[0].JS.Stream(context.Background(), "KV_"+ns[0].KV.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	if cfg := st.CachedInfo().Config; cfg.MaxAge != 0 {
		t.Errorf("the nonce bucket forgets after %s", cfg.MaxAge)
	}
	m, err := st.GetLastMsgForSubject(context.Background(), "$KV."+ns[0].KV.Bucket()+".>")
	if err != nil {
		t.Fatal(err)
	}
	if ttl := m.Header.Get(jetstream.MsgTTLHeader); ttl != "" {
		t.Errorf("a claim expires after %s", ttl)
	}
	// A sweep forgets nothing while no stamp is more than the window newer.
	for _, n := range ns {
		if removed, err := n.Sweep(context.Background()); err != nil || removed != 0 {
			t.Fatalf("sweep: %d, %v", removed, err)
		}
	}
	if c := claimOn(t, ns[2], "nonce-race-0-abcdefgh", now); c != kv.NonceReplayed {
		t.Fatalf("replay: %v", c)
	}
	// A request stamped more than the window later: the earlier ones are
	// forgotten by the sweeps of three processors at once, and refused as
	// too old, on any processor.
	later := now + window.Milliseconds() + 1
	if c := claimOn(t, ns[1], "nonce-later-abcdefgh", later); c != kv.NonceFresh {
		t.Fatalf("later claim: %v", c)
	}
	var removed atomic.Int64
	var wg sync.WaitGroup
	for _, n := range ns {
		wg.Go(func() {
			r, err := n.Sweep(context.Background())
			if err != nil {
				t.Error(err)
			}
			removed.Add(int64(r))
		})
	}
	wg.Wait()
	if removed.Load() != 10 {
		t.Errorf("sweeps removed %d nonces, want 10", removed.Load())
	}
	if k := keys(t, ns[0]); k != 2 {
		t.Errorf("%d keys left, want the later nonce and newest", k)
	}
	for i, n := range ns {
		// (Refused too old on the first; its claim's key then says replayed.)
		if c := claimOn(t, n, "nonce-race-0-abcdefgh", now); c == kv.NonceFresh || (i == 0 && c != kv.NonceTooOld) {
			t.Errorf("processor %d: replay after the sweep: %v", i, c)
		}
	}
	if c := claimOn(t, ns[0], "nonce-later-abcdefgh", later); c != kv.NonceReplayed {
		t.Errorf("replay of the kept one: %v", c)
	}
	// A claim stamped a little before the newest is taken; newest does
	// not move back.
	if c := claimOn(t, ns[2], "nonce-earlier-abcdefgh", later-1000); c != kv.NonceFresh {
		t.Errorf("a claim inside the window: %v", c)
	}
	if c := claimOn(t, ns[2], "nonce-too-early-abcdefgh", later-window.Milliseconds()-1); c != kv.NonceTooOld {
		t.Errorf("a claim outside the window: %v", c)
	}
}

func TestReplicatedNoncesR1(t *testing.T) { testNonces(t, servers(t, 1), 1) }
func TestReplicatedNoncesR3(t *testing.T) { testNonces(t, servers(t, 3), 3) }

// sharedNonces opens nonces on one fresh bucket on url, each instance on
// its own connection (another processor's).
func sharedNonces(url string, replicas int) kvtest.OpenNonces {
	return func(t *testing.T) (kv.Nonces, func() kv.Nonces) {
		bucket := fmt.Sprintf("nonces_%d", nonceBuckets.Add(1))
		another := func() kv.Nonces {
			js, h := kvtest.OpenBucket(t, url, kvjs.NonceBucket(bucket, replicas))
			return &kvjs.Nonces{KV: h, JS: js, Window: kvtest.NonceWindow}
		}
		return another(), another
	}
}

func TestNoncesConformanceR1(t *testing.T) {
	kvtest.RunNonces(t, sharedNonces(servers(t, 1), 1))
}
