package testenv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/testenv"
)

// A three-server cluster keeps an R3 bucket writable with one server
// down, lets the stopped server catch up after its restart, and moves a
// stream leader on request.
func TestCluster(t *testing.T) {
	c := testenv.NewCluster(t)
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var kv jetstream.KeyValue
	testenv.Retry(t, func(ctx context.Context) (err error) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "cluster_test", Replicas: 3})
		return err
	})
	put := func(key string) {
		t.Helper()
		testenv.Retry(t, func(ctx context.Context) error {
			_, err := kv.Create(ctx, key, []byte(key))
			if errors.Is(err, jetstream.ErrKeyExists) {
				return nil // a timed-out Create may have been stored
			}
			return err
		})
	}
	put("before")
	leader := c.StreamLeader(t, "$G", "KV_cluster_test")
	c.Stop(t, leader)
	if c.Server(leader) != nil {
		t.Fatal("a stopped server is still listed")
	}
	put("during")
	c.Start(t, leader)
	put("after")
	from, to := c.StepDownStream(t, "$G", "KV_cluster_test")
	if from == to {
		t.Fatalf("leader stayed on n%d", from)
	}
	put("moved")
	for _, k := range []string{"before", "during", "after", "moved"} {
		testenv.Retry(t, func(ctx context.Context) error {
			e, err := kv.Get(ctx, k)
			if err == nil && string(e.Value()) != k {
				t.Fatalf("%s = %q", k, e.Value())
			}
			return err
		})
	}
	// The restarted server has everything once it caught up.
	testenv.WaitFor(t, "the restarted server to catch up", func() bool {
		return c.Server(leader).JetStreamIsStreamCurrent("$G", "KV_cluster_test")
	})
}
