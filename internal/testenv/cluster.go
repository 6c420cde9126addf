package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/portcullis/portcullis/internal/natscluster"
)

// ClusterSize is the number of servers of a Cluster.
const ClusterSize = natscluster.Size

// APITimeout bounds one JetStream API call made through Retry: short, so
// that a call that found no leader (it gets no reply until its context
// ends) is retried soon instead of waiting out a long context.
const APITimeout = 2 * time.Second

// Cluster is an in-process JetStream cluster of ClusterSize nats-servers on
// loopback, for tests that need what one server cannot show: replicated
// streams and buckets, a server stopping and coming back, a stream leader
// moving. Every server has its own JetStream store directory, fixed client
// and cluster ports (chosen below 32768, outside Linux's ephemeral range,
// and kept across restarts so that clients and routes find a restarted
// server where it was) and the same route list.
//
//	c := testenv.NewCluster(t)
//	nc, _ := nats.Connect(c.URL())
//	c.Stop(t, 1)  // one server of three down: JetStream keeps its quorum
//	c.Start(t, 1) // back, same store directory: it catches up
//
// NewCluster returns once some server is the JetStream meta leader:
// nats-server's ReadyForConnections does not wait for one, and a
// JetStream API call made before it exists gets no reply until its
// context ends. Make API calls through Retry. Everything is shut down when
// the test ends.
type Cluster struct {
	// Name is the cluster's name.
	Name string

	core *natscluster.Cluster
}

// ClusterOption adjusts a Cluster before it starts.
type ClusterOption func(*natscluster.Options)

// ClusterAccounts gives every server of the cluster this nats-server
// configuration text, typically an `accounts { … }` block (for Portcullis:
// natsauth.AccountsBlock, as `processor nats-permissions` prints it for an
// external deployment). Each server parses it for itself.
func ClusterAccounts(conf string) ClusterOption {
	return func(o *natscluster.Options) { o.Accounts = conf }
}

// NewCluster starts a three-server JetStream cluster and waits for its meta
// leader.
func NewCluster(t testing.TB, opts ...ClusterOption) *Cluster {
	t.Helper()
	o := natscluster.Options{Name: "portcullis-test"}
	for _, f := range opts {
		f(&o)
	}
	c := &Cluster{Name: o.Name}
	// The store directory first: cleanups run last-registered first, so
	// the servers stop before it is removed. The stop is registered before
	// the servers start: it runs after the cleanups of everything made
	// later (processors, connections), so that those stop against running
	// servers.
	dir := t.TempDir()
	t.Cleanup(func() {
		if c.core != nil {
			c.core.Close()
		}
	})
	core, err := natscluster.New(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	c.core = core
	c.WaitJetStream(t)
	return c
}

// URL lists every server's client URL, comma-separated: what nats.Connect
// and a processor's nats.url take. A client fails over between them.
func (c *Cluster) URL() string { return c.core.URL() }

// Server returns server i (0–2), or nil while it is stopped.
func (c *Cluster) Server(i int) *server.Server { return c.core.Server(i) }

// Stop shuts server i down, as a crash or an operator would: its clients
// reconnect to the others, its streams' replicas elect new leaders.
func (c *Cluster) Stop(t testing.TB, i int) {
	t.Helper()
	c.core.Stop(i)
}

// Start starts server i again (after Stop) on the same ports and JetStream
// store directory, and waits until it is ready, the cluster has a meta
// leader and the server has caught up with the meta layer. Its streams
// catch up with what they missed by themselves (about 1.5–2 s).
func (c *Cluster) Start(t testing.TB, i int) {
	t.Helper()
	if c.Server(i) != nil {
		t.Fatalf("testenv: server n%d is running", i)
	}
	if err := c.core.Start(i); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, fmt.Sprintf("server n%d current with a meta leader", i), func() bool {
		return c.Server(i).JetStreamIsCurrent() && c.core.HasMetaLeader()
	})
}

// WaitJetStream waits until some running server is the JetStream meta
// leader and sees every running server as an online JetStream peer (at
// most WaitTimeout): before that, creating an R3 stream fails with "no
// suitable peers for placement".
func (c *Cluster) WaitJetStream(t testing.TB) {
	t.Helper()
	if err := c.core.WaitJetStream(WaitTimeout); err != nil {
		t.Fatal(err)
	}
}

// StreamLeader returns the index of the server that leads stream in
// account ("$G" without accounts), waiting for one (at most WaitTimeout).
func (c *Cluster) StreamLeader(t testing.TB, account, stream string) int {
	t.Helper()
	leader := -1
	WaitFor(t, "a leader of stream "+stream, func() bool {
		for i := range ClusterSize {
			if s := c.Server(i); s != nil && s.JetStreamIsStreamLeader(account, stream) {
				leader = i
				return true
			}
		}
		return false
	})
	return leader
}

// StepDownStream makes stream's leader step down and waits until another
// server leads it: what a leader moving under load looks like to clients
// (writes pause briefly; one in flight may time out).
func (c *Cluster) StepDownStream(t testing.TB, account, stream string) (from, to int) {
	t.Helper()
	from = c.StreamLeader(t, account, stream)
	deadline := time.Now().Add(WaitTimeout)
	for {
		if s := c.Server(from); s != nil && s.JetStreamIsStreamLeader(account, stream) {
			if err := s.JetStreamStepdownStream(account, stream); err != nil {
				t.Fatalf("testenv: step down %s: %v", stream, err)
			}
		}
		time.Sleep(50 * time.Millisecond)
		for i := range ClusterSize {
			if s := c.Server(i); i != from && s != nil && s.JetStreamIsStreamLeader(account, stream) {
				return from, i
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: stream %s kept its leader n%d", stream, from)
		}
	}
}

// Retry calls f with a fresh APITimeout context until it succeeds, for at
// most WaitTimeout: a JetStream API call on a cluster may find no leader
// (right after a start, during an election) and then gets no answer at
// all, or a "no responders" or "JetStream not ready" error.
func Retry(t testing.TB, f func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), APITimeout)
		err := f(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: JetStream call failed for %s: %v", WaitTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
