// Package natscluster runs an in-process JetStream cluster of three
// nats-servers on loopback. testenv.Cluster wraps it for tests;
// `processor bench -cluster` uses it directly (testenv needs a testing.TB
// and would link package testing into the binary).
//
// It imports nothing of Portcullis.
package natscluster

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Size is the number of servers of a Cluster.
const Size = 3

// Options configure a Cluster.
type Options struct {
	// Name is the cluster's name. Default "portcullis-test".
	Name string
	// Accounts is nats-server configuration text every server parses,
	// typically an `accounts { … }` block.
	Accounts string
	// SyncAlways fsyncs every JetStream write before its acknowledgement.
	SyncAlways bool
}

// Cluster is Size nats-servers with JetStream on loopback. Every server has
// its own JetStream store directory, fixed client and cluster ports (chosen
// below 32768, outside Linux's ephemeral range, and kept across restarts so
// that clients and routes find a restarted server where it was) and the
// same route list.
type Cluster struct {
	// Name is the cluster's name.
	Name string

	mu      sync.Mutex
	servers [Size]*server.Server
	confs   [Size]string // each server's configuration file
	clients [Size]int    // client ports
}

// New writes the servers' configurations under dir and starts them. It
// returns once every server accepts connections; WaitJetStream waits for
// the meta leader. On error, whatever started is stopped.
func New(dir string, o Options) (*Cluster, error) {
	c := &Cluster{Name: o.Name}
	if c.Name == "" {
		c.Name = "portcullis-test"
	}
	ports, err := FreePorts(2 * Size)
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := range Size {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[Size+i]))
	}
	for i := range Size {
		d := filepath.Join(dir, fmt.Sprintf("n%d", i))
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		c.clients[i] = ports[i]
		conf := fmt.Sprintf(`server_name: %q
listen: "127.0.0.1:%d"
jetstream {
  store_dir: %q%s
  # streams' budgets are reservations, not space used (engine.EmbeddedMaxStore)
  max_file_store: 1099511627776
}
cluster {
  name: %q
  listen: "127.0.0.1:%d"
  routes: [%s]
}
%s
`, fmt.Sprintf("n%d", i), ports[i], filepath.Join(d, "jetstream"), syncLine(o.SyncAlways), c.Name, ports[Size+i], strings.Join(routes, ", "), o.Accounts)
		c.confs[i] = filepath.Join(d, "server.conf")
		if err := os.WriteFile(c.confs[i], []byte(conf), 0o600); err != nil {
			return nil, err
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, Size)
	for i := range Size {
		wg.Go(func() { errs[i] = c.Start(i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// syncLine is the jetstream block's sync_interval line: none (the
// server's default, every 2m) or always.
func syncLine(always bool) string {
	if always {
		return "\n  sync_interval: always"
	}
	return ""
}

// FreePorts finds n consecutive loopback ports below Linux's ephemeral
// range (32768–60999) that nothing listens on now. Ports in the ephemeral
// range can be taken by any outgoing connection between a server's stop and
// its restart.
func FreePorts(n int) ([]int, error) {
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
			return ports, nil
		}
	}
	return nil, errors.New("natscluster: no free loopback ports for a cluster")
}

// Start starts server i (0 to Size-1) and waits until it accepts
// connections.
func (c *Cluster) Start(i int) error {
	opts, err := server.ProcessConfigFile(c.confs[i])
	if err != nil {
		return fmt.Errorf("natscluster: server n%d configuration: %w", i, err)
	}
	opts.NoSigs, opts.NoLog = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("natscluster: server n%d: %w", i, err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return fmt.Errorf("natscluster: server n%d did not start", i)
	}
	c.mu.Lock()
	c.servers[i] = s
	c.mu.Unlock()
	return nil
}

// Stop shuts server i down, if running.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	s := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Close stops every server.
func (c *Cluster) Close() {
	for i := range Size {
		c.Stop(i)
	}
}

// URL lists every server's client URL, comma-separated.
func (c *Cluster) URL() string {
	urls := make([]string, Size)
	for i, p := range c.clients {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", p)
	}
	return strings.Join(urls, ",")
}

// Server returns server i, or nil while it is stopped.
func (c *Cluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[i]
}

// HasMetaLeader reports whether some running server is the JetStream meta
// leader.
func (c *Cluster) HasMetaLeader() bool {
	for i := range Size {
		if s := c.Server(i); s != nil && s.JetStreamIsLeader() {
			return true
		}
	}
	return false
}

// MetaState returns the meta leader's index (-1: none), the online
// JetStream peers it sees, and the number of running servers.
func (c *Cluster) MetaState() (leader, peers, running int) {
	leader = -1
	for i := range Size {
		s := c.Server(i)
		if s == nil {
			continue
		}
		running++
		if s.JetStreamIsLeader() {
			leader, peers = i, len(s.JetStreamClusterPeers())
		}
	}
	return leader, peers, running
}

// WaitJetStream waits (at most timeout) until some running server is the
// meta leader and sees every running server as an online JetStream peer:
// before that, creating a replicated stream fails with "no suitable peers
// for placement".
func (c *Cluster) WaitJetStream(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		leader, peers, running := c.MetaState()
		if leader >= 0 && peers >= running {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("natscluster: JetStream not ready within %s: meta leader n%d (-1: none) sees %d online peers of %d running servers",
				timeout, leader, peers, running)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
