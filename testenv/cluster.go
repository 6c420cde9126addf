package testenv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ClusterSize is the number of servers of a Cluster.
const ClusterSize = 3

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

	mu       sync.Mutex
	servers  [ClusterSize]*server.Server
	confs    [ClusterSize]string // each server's configuration file
	clients  [ClusterSize]int    // client ports
	accounts string
}

// ClusterOption adjusts a Cluster before it starts.
type ClusterOption func(*Cluster)

// ClusterAccounts gives every server of the cluster this nats-server
// configuration text, typically an `accounts { … }` block (for Portcullis:
// natsauth.AccountsBlock, as `processor nats-permissions` prints it for an
// external deployment). Each server parses it for itself.
func ClusterAccounts(conf string) ClusterOption {
	return func(c *Cluster) { c.accounts = conf }
}

// NewCluster starts a three-server JetStream cluster and waits for its meta
// leader.
func NewCluster(t testing.TB, opts ...ClusterOption) *Cluster {
	t.Helper()
	c := &Cluster{Name: "portcullis-test"}
	for _, o := range opts {
		o(c)
	}
	ports := freePorts(t, 2*ClusterSize)
	var routes []string
	for i := range ClusterSize {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[ClusterSize+i]))
	}
	base := t.TempDir()
	for i := range ClusterSize {
		dir := filepath.Join(base, fmt.Sprintf("n%d", i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		c.clients[i] = ports[i]
		conf := fmt.Sprintf(`server_name: %q
listen: "127.0.0.1:%d"
jetstream {
  store_dir: %q
}
cluster {
  name: %q
  listen: "127.0.0.1:%d"
  routes: [%s]
}
%s
`, fmt.Sprintf("n%d", i), ports[i], filepath.Join(dir, "jetstream"), c.Name, ports[ClusterSize+i], strings.Join(routes, ", "), c.accounts)
		c.confs[i] = filepath.Join(dir, "server.conf")
		if err := os.WriteFile(c.confs[i], []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Registered before the servers start: it runs after the cleanups of
	// everything made later (processors, connections), so that those stop
	// against running servers.
	t.Cleanup(func() {
		for i := range ClusterSize {
			c.stop(i)
		}
	})
	var wg sync.WaitGroup
	errs := make([]error, ClusterSize)
	for i := range ClusterSize {
		wg.Go(func() { errs[i] = c.start(i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	c.WaitJetStream(t)
	return c
}

// freePorts finds n consecutive loopback ports below Linux's ephemeral
// range (32768–60999) that nothing listens on now. Ports in the ephemeral
// range can be taken by any outgoing connection between a server's stop and
// its restart.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	for range 200 {
		base := 20000 + rand.IntN(12000-n)
		var lns []net.Listener
		for i := range n {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if len(lns) == n {
			ports := make([]int, n)
			for i := range ports {
				ports[i] = base + i
			}
			return ports
		}
	}
	t.Fatal("testenv: no free loopback ports for a cluster")
	return nil
}

func (c *Cluster) start(i int) error {
	opts, err := server.ProcessConfigFile(c.confs[i])
	if err != nil {
		return fmt.Errorf("testenv: server n%d configuration: %w", i, err)
	}
	opts.NoSigs, opts.NoLog = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("testenv: server n%d: %w", i, err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return fmt.Errorf("testenv: server n%d did not start", i)
	}
	c.mu.Lock()
	c.servers[i] = s
	c.mu.Unlock()
	return nil
}

func (c *Cluster) stop(i int) {
	c.mu.Lock()
	s := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// URL lists every server's client URL, comma-separated: what nats.Connect
// and a processor's nats.url take. A client fails over between them.
func (c *Cluster) URL() string {
	urls := make([]string, ClusterSize)
	for i, p := range c.clients {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", p)
	}
	return strings.Join(urls, ",")
}

// Server returns server i (0–2), or nil while it is stopped.
func (c *Cluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[i]
}

// Stop shuts server i down, as a crash or an operator would: its clients
// reconnect to the others, its streams' replicas elect new leaders.
func (c *Cluster) Stop(t testing.TB, i int) {
	t.Helper()
	c.stop(i)
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
	if err := c.start(i); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(WaitTimeout)
	for !c.Server(i).JetStreamIsCurrent() || !c.hasMetaLeader() {
		if time.Now().After(deadline) {
			t.Fatalf("testenv: server n%d not current with a meta leader within %s", i, WaitTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *Cluster) hasMetaLeader() bool {
	for i := range ClusterSize {
		if s := c.Server(i); s != nil && s.JetStreamIsLeader() {
			return true
		}
	}
	return false
}

// WaitJetStream waits until some running server is the JetStream meta
// leader and sees every running server as an online JetStream peer (at
// most WaitTimeout): before that, creating an R3 stream fails with "no
// suitable peers for placement".
func (c *Cluster) WaitJetStream(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for {
		running := 0
		for i := range ClusterSize {
			if c.Server(i) != nil {
				running++
			}
		}
		leader, peers := -1, 0
		for i := range ClusterSize {
			if s := c.Server(i); s != nil && s.JetStreamIsLeader() {
				leader, peers = i, len(s.JetStreamClusterPeers())
			}
		}
		if leader >= 0 && peers >= running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: JetStream not ready within %s: meta leader n%d (-1: none) sees %d online peers of %d running servers",
				WaitTimeout, leader, peers, running)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// StreamLeader returns the index of the server that leads stream in
// account ("$G" without accounts), waiting for one (at most WaitTimeout).
func (c *Cluster) StreamLeader(t testing.TB, account, stream string) int {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for {
		for i := range ClusterSize {
			if s := c.Server(i); s != nil && s.JetStreamIsStreamLeader(account, stream) {
				return i
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: stream %s has no leader within %s", stream, WaitTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
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
