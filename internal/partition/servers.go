//go:build linux

package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/testenv"
)

// Size is the number of servers of a Servers cluster.
const Size = 3

// The ports every server listens on, on its own node (each node has its
// own addresses, so every server has the same ones).
const (
	ClientPort  = 4222
	ClusterPort = 6222
	MonitorPort = 8222
)

// NATSServerBinary builds the real nats-server command, the version the
// module requires, once per test binary, and returns its path.
func NATSServerBinary(t testing.TB) string {
	t.Helper()
	return testenv.Binary(t, "nats-server", "github.com/nats-io/nats-server/v2")
}

// Child is a process started inside a node.
type Child struct {
	Name string
	Logs *testenv.LogBuffer
	cmd  *exec.Cmd
	done chan struct{}
}

// start runs cmd (made by Node.Command) as a child that the kernel kills
// if the test process dies, logging into Logs what it writes (stdout too
// unless the caller took it); the test's end stops it (SIGTERM, then
// SIGKILL after 10s).
func start(t testing.TB, name string, cmd *exec.Cmd) *Child {
	t.Helper()
	c := &Child{Name: name, Logs: &testenv.LogBuffer{}, cmd: cmd, done: make(chan struct{})}
	if cmd.Stdout == nil {
		cmd.Stdout = c.Logs
	}
	cmd.Stderr = c.Logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("partition: start %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(c.done) }()
	t.Cleanup(c.Stop)
	return c
}

// Stop stops the child (SIGTERM, SIGKILL after 10s) and waits for it.
func (c *Child) Stop() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// Exited is closed when the child exits.
func (c *Child) Exited() <-chan struct{} { return c.done }

// Servers is a three-server JetStream cluster of real nats-server
// processes, each in its own node: clients connect to ClientPort of each
// node's IP, the servers route to each other on ClusterPort, and
// MonitorPort serves their monitoring endpoints (read through the client
// node). Servers do not advertise each other to clients (no_advertise):
// a client reaches exactly the URLs it was given, so a proxy in front of
// a processor stays in its path.
type Servers struct {
	Nodes  [Size]*Node
	Procs  [Size]*Child
	client *Node
	http   *http.Client
}

// StartServers starts a server in each of nodes (named n0, n1, n2), each
// with a JetStream store under a directory of the test's and conf (an
// `accounts { … }` block, or "") in its configuration, and waits until
// they form a cluster with a JetStream meta leader that sees every
// server. client is the node from which the test reads their monitoring
// endpoints.
func StartServers(t testing.TB, nodes [Size]*Node, client *Node, conf string) *Servers {
	t.Helper()
	bin := NATSServerBinary(t)
	s := &Servers{Nodes: nodes, client: client}
	s.http = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: client.DialContext, DisableKeepAlives: true}}
	t.Cleanup(s.http.CloseIdleConnections)
	var routes []string
	for _, nd := range nodes {
		routes = append(routes, fmt.Sprintf("nats-route://%s:%d", nd.IP, ClusterPort))
	}
	dir := t.TempDir()
	for i, nd := range nodes {
		d := filepath.Join(dir, ServerName(i))
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		text := fmt.Sprintf(`server_name: %q
listen: "0.0.0.0:%d"
http: "0.0.0.0:%d"
jetstream {
  store_dir: %q
  # streams' budgets are reservations, not space used (engine.EmbeddedMaxStore)
  max_file_store: 1099511627776
}
cluster {
  name: "portcullis-partition"
  listen: "0.0.0.0:%d"
  routes: [%s]
  no_advertise: true
}
%s
`, ServerName(i), ClientPort, MonitorPort, filepath.Join(d, "jetstream"), ClusterPort, strings.Join(routes, ", "), conf)
		path := filepath.Join(d, "server.conf")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		s.Procs[i] = start(t, "nats-server "+ServerName(i), nd.Command(bin, "-c", path))
	}
	s.WaitJetStream(t, 30*time.Second)
	return s
}

// ServerName is server i's server_name.
func ServerName(i int) string { return fmt.Sprintf("n%d", i) }

// Index is the index of the server named name, or -1.
func (s *Servers) Index(name string) int {
	for i := range Size {
		if ServerName(i) == name {
			return i
		}
	}
	return -1
}

// URL lists every server's client URL, comma-separated (nats.url).
func (s *Servers) URL() string {
	urls := s.Addrs()
	for i, a := range urls {
		urls[i] = "nats://" + a
	}
	return strings.Join(urls, ",")
}

// Addrs are the servers' client addresses, "ip:port".
func (s *Servers) Addrs() []string {
	addrs := make([]string, Size)
	for i, nd := range s.Nodes {
		addrs[i] = fmt.Sprintf("%s:%d", nd.IP, ClientPort)
	}
	return addrs
}

// monitor reads a monitoring endpoint of server i into v.
func (s *Servers) monitor(i int, path string, v any) error {
	resp, err := s.http.Get(fmt.Sprintf("http://%s:%d%s", s.Nodes[i].IP, MonitorPort, path))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return json.Unmarshal(body, v)
}

// MetaLeader returns the name of the JetStream meta leader as server i
// sees it ("" when it knows none) and how many peers it sees current.
func (s *Servers) MetaLeader(i int) (leader string, current int, err error) {
	var jsz server.JSInfo
	if err := s.monitor(i, "/jsz", &jsz); err != nil {
		return "", 0, err
	}
	if jsz.Meta == nil {
		return "", 0, nil
	}
	current = 1 // itself
	for _, p := range jsz.Meta.Replicas {
		if p.Current && !p.Offline {
			current++
		}
	}
	return jsz.Meta.Leader, current, nil
}

// WaitJetStream waits until some server is the meta leader and sees all
// Size servers current (after a start, or after a partition healed).
func (s *Servers) WaitJetStream(t testing.TB, timeout time.Duration) {
	t.Helper()
	var last string
	ok := testenv.Poll(timeout, func() bool {
		for i := range Size {
			leader, current, err := s.MetaLeader(i)
			switch {
			case err != nil:
				last = fmt.Sprintf("%s: %v", ServerName(i), err)
			case leader == ServerName(i) && current == Size:
				return true
			case leader != "":
				last = fmt.Sprintf("meta leader %s, %d current", leader, current)
			}
		}
		time.Sleep(100 * time.Millisecond)
		return false
	})
	if !ok {
		t.Fatalf("partition: no JetStream meta leader seeing %d current servers within %s (last: %s)\n%s", Size, timeout, last, s.logs())
	}
}

// ConnectedTo returns the index of the server a client of the given name
// connecting from ip is connected to, or -1 (none, or a server could not
// be read).
func (s *Servers) ConnectedTo(ip, name string) int {
	for i := range Size {
		var connz server.Connz
		if err := s.monitor(i, "/connz?limit=1024", &connz); err != nil {
			continue
		}
		for _, c := range connz.Conns {
			if c.IP == ip && c.Name == name {
				return i
			}
		}
	}
	return -1
}

func (s *Servers) logs() string {
	var b strings.Builder
	for _, p := range s.Procs {
		if p == nil {
			continue
		}
		l := string(p.Logs.Bytes())
		if len(l) > 4000 {
			l = "…" + l[len(l)-4000:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", p.Name, l)
	}
	return b.String()
}

// eachGroup calls f with every replicated stream (consumer "") and
// consumer of js's account and the server that leads it.
func eachGroup(ctx context.Context, js jetstream.JetStream, f func(stream, consumer, leader string) error) error {
	names := js.StreamNames(ctx)
	var streams []string
	for n := range names.Name() {
		streams = append(streams, n)
	}
	if err := names.Err(); err != nil {
		return err
	}
	for _, name := range streams {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return err
		}
		info := st.CachedInfo()
		if info.Cluster != nil && len(info.Cluster.Replicas) > 0 {
			if err := f(name, "", info.Cluster.Leader); err != nil {
				return err
			}
		}
		cons := st.ListConsumers(ctx)
		for ci := range cons.Info() {
			if ci.Cluster != nil && len(ci.Cluster.Replicas) > 0 { // not an R1 (an ordered consumer): it cannot move
				if err := f(name, ci.Name, ci.Cluster.Leader); err != nil {
					return err
				}
			}
		}
		if err := cons.Err(); err != nil {
			return err
		}
	}
	return nil
}

// MoveLeaders makes server to the leader of every replicated stream and
// consumer of js's account (a stepdown naming it as the preferred leader; nc is js's
// connection), until every one is led by it or ctx ends. It returns how
// many stepdowns it asked for.
func MoveLeaders(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, to string) (int, error) {
	body, _ := json.Marshal(server.JSApiLeaderStepdownRequest{Placement: &server.Placement{Preferred: to}})
	asked := 0
	for {
		var elsewhere []string
		err := eachGroup(ctx, js, func(stream, consumer, leader string) error {
			if leader == to {
				return nil
			}
			subj := "$JS.API.STREAM.LEADER.STEPDOWN." + stream
			if consumer != "" {
				subj = "$JS.API.CONSUMER.LEADER.STEPDOWN." + stream + "." + consumer
			}
			asked++
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			msg, err := nc.RequestWithContext(rctx, subj, body)
			answer := ""
			if err == nil {
				answer = string(msg.Data)
			} else if !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("stepdown %s %s: %w", stream, consumer, err)
			}
			elsewhere = append(elsewhere, fmt.Sprintf("%s/%s led by %s (%s)", stream, consumer, leader, answer))
			return nil
		})
		if err == nil && len(elsewhere) == 0 {
			return asked, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("still led elsewhere: %s", strings.Join(elsewhere, "; "))
			}
			return asked, fmt.Errorf("partition: moving every leader to %s: %w", to, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
