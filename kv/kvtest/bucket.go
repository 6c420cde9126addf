// Package kvtest holds the conformance suites every backend of a kv store
// interface passes — RunJournal (kv.Journal), RunApprovals
// (kv.Approvals), RunAdmissions (kv.Admissions), RunGroundings
// (kv.Groundings) — run by each backend's tests on a real Pebble in a
// temporary directory and on real shared buckets (kv/jetstream), and the
// helpers they share: OpenBucket opens shared buckets for tests the way
// processors do, each on a connection of its own.
//
// It imports kv and its backends for tests; no production package imports
// it.
package kvtest

import (
	"context"
	"sync"
	"testing"
	"time"

	kvjs "github.com/portcullis/portcullis/kv/jetstream"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// OpenBucket connects to url on a connection of its own (another processor's),
// ensures bucket b there — retried for up to 30 s while a cluster elects
// its leaders or does not see enough peers yet — and returns the connection's JetStream and the bucket.
// The connection is closed when the test ends.
func OpenBucket(t testing.TB, url string, b kvjs.Bucket) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		kv, err := b.Ensure(ctx, js)
		cancel()
		if err == nil {
			return js, kv
		}
		if !kvjs.Unanswered(err) && !kvjs.NoPeers(err) || time.Now().After(deadline) {
			t.Fatalf("kvtest: bucket %s: %v", b.Name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// LockExcludes checks a store's per-key Lock: a second Lock of key waits
// until the first is released; a Lock of other does not wait.
func LockExcludes[K any](t *testing.T, lock func(K) func(), key, other K) {
	t.Helper()
	unlock := lock(key)
	var wg sync.WaitGroup
	got := make(chan string, 2)
	wg.Go(func() {
		u := lock(key)
		got <- "same"
		u()
	})
	wg.Go(func() {
		u := lock(other)
		got <- "other"
		u()
	})
	select {
	case v := <-got:
		if v != "other" {
			t.Fatal("a second Lock of the same key did not wait")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Lock of another key waited")
	}
	unlock()
	if v := <-got; v != "same" {
		t.Fatal(v)
	}
	wg.Wait()
}
