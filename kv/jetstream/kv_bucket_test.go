package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	kvjs "github.com/portcullis/portcullis/kv/jetstream"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/kv"
)

// A bucket's stream serves reads from its leader only, and stays so when a
// processor starts again; a bucket whose stream serves direct gets (as
// CreateOrUpdateKeyValue makes it) is refused.
func TestBucketReadsFromTheLeader(t *testing.T) {
	nc, err := nats.Connect(testenv.StartServer(t, "").ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	b := kvjs.Bucket{Name: "x", Replicas: 1, MaxAge: time.Hour, DenyDelete: true}
	for range 2 {
		if _, err := b.Ensure(ctx, js); err != nil {
			t.Fatal(err)
		}
		st, err := js.Stream(ctx, "KV_x")
		if err != nil {
			t.Fatal(err)
		}
		if c := st.CachedInfo().Config; c.AllowDirect || c.Discard != jetstream.DiscardNew || c.MaxMsgsPerSubject != 1 || c.MaxAge != time.Hour || !c.DenyDelete {
			t.Fatalf("bucket stream config %+v", c)
		}
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "y"}); err != nil {
		t.Fatal(err)
	}
	if _, err := kvjs.Bind(ctx, js, "y"); err == nil {
		t.Error("bound a bucket that allows direct gets")
	}
}

// Swap: a create loses to an existing value, an update to a newer one
// (ErrConflict); a write is taken at the revision it compared with.
func TestSwap(t *testing.T) {
	kv := bucket(t, "s")
	never := func([]byte) bool { return false }
	var b kvjs.Budget
	rev, err := b.Swap(kv, "k", []byte("one"), 0, time.Second, never)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Swap(kv, "k", []byte("two"), 0, time.Second, never); err != kvjs.ErrConflict {
		t.Errorf("a second create: %v", err)
	}
	rev2, err := b.Swap(kv, "k", []byte("two"), rev, time.Second, never)
	if err != nil || rev2 <= rev {
		t.Fatalf("an update at the read revision: %d %v", rev2, err)
	}
	if _, err := b.Swap(kv, "k", []byte("three"), rev, time.Second, never); err != kvjs.ErrConflict {
		t.Errorf("an update at a stale revision: %v", err)
	}
	e, err := kv.Get(context.Background(), "k")
	if err != nil || string(e.Value()) != "two" {
		t.Errorf("stored %q %v", e.Value(), err)
	}
}

// SwapJSON and GetJSON: a record written with its commit id reads back
// whole at its revision; a key with no value is not found; a value that is
// not the record's JSON is kv.ErrCorrupt; a create over an existing record
// from another writer is a conflict.
func TestSwapJSONAndGetJSON(t *testing.T) {
	store := bucket(t, "j")
	type rec struct {
		N      int    `json:"n"`
		Commit string `json:"commit"`
	}
	commit := func(r *rec) string { return r.Commit }
	var b kvjs.Budget
	var got rec
	if _, found, err := kvjs.GetJSON(b, store, "r", &got); found || err != nil {
		t.Fatalf("missing key: found %v, %v", found, err)
	}
	w := rec{N: 7, Commit: kvjs.CommitID()}
	rev, err := kvjs.SwapJSON(b, store, "r", &w, 0, time.Second, commit)
	if err != nil {
		t.Fatal(err)
	}
	if gotRev, found, err := kvjs.GetJSON(b, store, "r", &got); !found || err != nil || gotRev != rev || got != w {
		t.Fatalf("read back %+v at %d (found %v, %v), wrote %+v at %d", got, gotRev, found, err, w, rev)
	}
	other := rec{N: 8, Commit: kvjs.CommitID()}
	if other.Commit == w.Commit {
		t.Fatal("two commit ids alike")
	}
	if _, err := kvjs.SwapJSON(b, store, "r", &other, 0, time.Second, commit); err != kvjs.ErrConflict {
		t.Errorf("another writer's create over the record: %v", err)
	}
	if _, err := store.Put(context.Background(), "bad", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := kvjs.GetJSON(b, store, "bad", &got); !errors.Is(err, kv.ErrCorrupt) {
		t.Errorf("undecodable value: %v", err)
	}
}

// bucket is a fresh bucket of one replica on a server of the test's own.
func bucket(t *testing.T, name string) jetstream.KeyValue {
	t.Helper()
	nc, err := nats.Connect(testenv.StartServer(t, "").ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	b, err := kvjs.Bucket{Name: name, Replicas: 1}.Ensure(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Every form of "the key changed or exists" JetStream answers a racing
// write with is a lost compare-and-set — the clustered 10164 included,
// which nats.go's ErrKeyExists does not match (a racing nonce claim on a
// three-server cluster got it, and a replay would have been an error).
func TestLostMatchesEveryForm(t *testing.T) {
	for _, err := range []error{
		jetstream.ErrKeyExists,
		jetstream.ErrKeyRevisionMismatch,
		&jetstream.APIError{Code: 400, ErrorCode: 10164, Description: "wrong last sequence"},
		fmt.Errorf("create: %w", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}),
	} {
		if !kvjs.Lost(err) {
			t.Errorf("%v is not a lost write", err)
		}
	}
	for _, err := range []error{nil, context.DeadlineExceeded, &jetstream.APIError{Code: 503, ErrorCode: 10008}} {
		if kvjs.Lost(err) {
			t.Errorf("%v is a lost write", err)
		}
	}
}
