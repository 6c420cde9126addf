//go:build linux

package partition

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// EnvCI is set to "true" by CI (.ci/run's machine): where namespaces
// cannot be made there, the tests fail instead of skipping, so that they
// cannot silently vanish.
const EnvCI = "CI"

// prefix begins the name of every namespace this package makes:
// "pcx-<pid>-<n>-<node>", so that a later run can tell which are left over
// from a process that is gone (stale).
const prefix = "pcx-"

// subnet is the bridge's network, inside the test's own namespaces only
// (no address is ever added to the host's).
const subnet = "10.33.0."

// netSeq numbers the Nets of one process.
var netSeq atomic.Int64

// Net is a small network of Linux network namespaces made for one test:
// one namespace per node (a nats-server, a processor, the test's own
// clients), each with a veth pair whose other end is a port of a bridge
// in a hub namespace of the Net's own. Nodes reach each other by their
// addresses on the bridge (Node.IP); nothing reaches the host's network,
// and nothing of the host's is touched. Cut takes a node's bridge port
// down (its peers hear nothing from it, and it from them, as in a real
// partition: no reset, no error, silence); Split puts groups of nodes on
// bridges of their own (a partition between groups); Heal and Join undo
// them. Everything is deleted when the test ends, whether it passed or
// not; namespaces left by a process that died (SIGKILL) are deleted by
// the next New.
type Net struct {
	name  string // "pcx-<pid>-<n>"
	mu    sync.Mutex
	nodes []*Node
	// bridges counts the extra bridges Split made (br1, br2, …).
	bridges int
	t       testing.TB
}

// Node is one namespace of a Net.
type Node struct {
	// Name is the node's name in the Net ("s0", "pa", …): at most 8
	// characters, as it names the node's bridge port.
	Name string
	// NS is the namespace's name (`ip netns exec NS …`).
	NS string
	// IP is the node's address on the bridge.
	IP string

	net  *Net
	port string // the bridge port (the veth end in the hub)
	fd   *os.File
}

// Require skips the test, saying why, where network namespaces cannot be
// made here (not root, no `ip`, or `ip netns add` refused); under CI
// (CI=true) it fails it instead.
func Require(t testing.TB) {
	t.Helper()
	if why := unavailable(); why != "" {
		if os.Getenv(EnvCI) == "true" {
			t.Fatalf("partition: network namespaces are needed under CI=true and cannot be made: %s", why)
		}
		t.Skipf("partition: network namespaces cannot be made here (%s): run as root with iproute2 installed", why)
	}
}

var (
	availOnce sync.Once
	availWhy  string
)

// unavailable says why namespaces cannot be made, or "" when they can
// (checked once per process by making and deleting one).
func unavailable() string {
	availOnce.Do(func() {
		switch {
		case os.Geteuid() != 0:
			availWhy = "not root"
		default:
			if _, err := exec.LookPath("ip"); err != nil {
				availWhy = "no ip command (iproute2)"
				return
			}
			probe := fmt.Sprintf("%s%d-probe", prefix, os.Getpid())
			if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
				availWhy = fmt.Sprintf("ip netns add: %v: %s", err, strings.TrimSpace(string(out)))
				return
			}
			_ = exec.Command("ip", "netns", "del", probe).Run()
		}
	})
	return availWhy
}

// New makes an empty Net (the hub namespace and its bridge), after
// deleting what dead runs left behind. Require first.
func New(t testing.TB) *Net {
	t.Helper()
	Require(t)
	removeStale(t)
	n := &Net{name: fmt.Sprintf("%s%d-%d", prefix, os.Getpid(), netSeq.Add(1)), t: t}
	t.Cleanup(n.close)
	n.ip(t, "netns", "add", n.hub())
	n.ip(t, "-n", n.hub(), "link", "add", "br0", "type", "bridge")
	n.ip(t, "-n", n.hub(), "link", "set", "br0", "up")
	return n
}

func (n *Net) hub() string { return n.name + "-hub" }

// Add makes a node: its namespace with loopback up, and a veth pair from
// its eth0 (address IP, /24) to a port of the bridge.
func (n *Net) Add(t testing.TB, name string) *Node {
	t.Helper()
	if len(name) > 8 || name == "" || strings.ContainsAny(name, " /-") {
		t.Fatalf("partition: node name %q: 1–8 characters, no '-', '/' or space", name)
	}
	n.mu.Lock()
	if slices.ContainsFunc(n.nodes, func(d *Node) bool { return d.Name == name }) {
		n.mu.Unlock()
		t.Fatalf("partition: node %s exists", name)
	}
	nd := &Node{Name: name, NS: n.name + "-" + name, IP: subnet + strconv.Itoa(len(n.nodes)+1), net: n, port: "v-" + name}
	n.nodes = append(n.nodes, nd)
	n.mu.Unlock()
	n.ip(t, "netns", "add", nd.NS)
	n.ip(t, "-n", nd.NS, "link", "set", "lo", "up")
	n.ip(t, "-n", n.hub(), "link", "add", nd.port, "type", "veth", "peer", "name", "eth0", "netns", nd.NS)
	n.ip(t, "-n", n.hub(), "link", "set", nd.port, "master", "br0")
	n.ip(t, "-n", n.hub(), "link", "set", nd.port, "up")
	n.ip(t, "-n", nd.NS, "addr", "add", nd.IP+"/24", "dev", "eth0")
	n.ip(t, "-n", nd.NS, "link", "set", "eth0", "up")
	f, err := os.Open("/run/netns/" + nd.NS)
	if err != nil {
		t.Fatalf("partition: open namespace %s: %v", nd.NS, err)
	}
	nd.fd = f
	return nd
}

// Cut takes each node's bridge port down: it is cut from every other
// node, silently (what it sends is dropped, nothing answers), until Heal.
func (n *Net) Cut(t testing.TB, nodes ...*Node) {
	t.Helper()
	for _, nd := range nodes {
		if err := n.Link(nd, false); err != nil {
			t.Fatal(err)
		}
	}
}

// Heal brings each node's bridge port back up.
func (n *Net) Heal(t testing.TB, nodes ...*Node) {
	t.Helper()
	for _, nd := range nodes {
		if err := n.Link(nd, true); err != nil {
			t.Fatal(err)
		}
	}
}

// Link sets a node's bridge port up or down (Heal, Cut), for a goroutine
// other than the test's.
func (n *Net) Link(nd *Node, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return run("-n", n.hub(), "link", "set", nd.port, state)
}

// Split partitions the Net into groups: the first stays on the bridge,
// each other group gets a bridge of its own, so a node reaches only the
// nodes of its group (nodes in no group stay with the first). Join undoes
// it.
func (n *Net) Split(t testing.TB, groups ...[]*Node) {
	t.Helper()
	for i, g := range groups[1:] {
		br := "br" + strconv.Itoa(i+1)
		n.mu.Lock()
		fresh := i+1 > n.bridges
		if fresh {
			n.bridges = i + 1
		}
		n.mu.Unlock()
		if fresh {
			n.ip(t, "-n", n.hub(), "link", "add", br, "type", "bridge")
			n.ip(t, "-n", n.hub(), "link", "set", br, "up")
		}
		for _, nd := range g {
			n.ip(t, "-n", n.hub(), "link", "set", nd.port, "master", br)
		}
	}
}

// Join puts every node back on the one bridge (after Split).
func (n *Net) Join(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	nodes := slices.Clone(n.nodes)
	n.mu.Unlock()
	for _, nd := range nodes {
		n.ip(t, "-n", n.hub(), "link", "set", nd.port, "master", "br0")
	}
}

// ip runs `ip args…` and fails t with its output on error.
func (n *Net) ip(t testing.TB, args ...string) {
	t.Helper()
	if err := run(args...); err != nil {
		t.Fatal(err)
	}
}

// run runs `ip args…`; its error has the output.
func run(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("partition: ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// close deletes every namespace of the Net: the veth pairs and bridges go
// with them (processes still inside keep a namespace alive, unreachable,
// until they exit; the test's cleanups stop them first).
func (n *Net) close() {
	n.mu.Lock()
	nodes := n.nodes
	n.nodes = nil
	n.mu.Unlock()
	for _, nd := range nodes {
		if nd.fd != nil {
			nd.fd.Close()
		}
		if out, err := exec.Command("ip", "netns", "del", nd.NS).CombinedOutput(); err != nil {
			n.t.Errorf("partition: ip netns del %s: %v: %s", nd.NS, err, out)
		}
	}
	if out, err := exec.Command("ip", "netns", "del", n.hub()).CombinedOutput(); err != nil {
		n.t.Errorf("partition: ip netns del %s: %v: %s", n.hub(), err, out)
	}
}

// removeStale deletes the namespaces of this package whose process is
// gone (a run killed before its cleanups) or is this one (a dead run had
// this pid; every Net of this process is made after this call).
func removeStale(t testing.TB) {
	t.Helper()
	for _, ns := range Namespaces(t) {
		rest := strings.TrimPrefix(ns, prefix)
		pid, err := strconv.Atoi(rest[:max(strings.IndexByte(rest, '-'), 0)])
		if err != nil {
			continue
		}
		if pid == os.Getpid() && ownedHere(ns) {
			continue
		}
		if pid != os.Getpid() && processAlive(pid) {
			continue // another run's, still going
		}
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Logf("partition: removing stale namespace %s: %v: %s", ns, err, out)
		} else {
			t.Logf("partition: removed namespace %s left by a dead run", ns)
		}
	}
}

// ownedHere reports whether ns belongs to a Net this process made and
// has not closed yet.
func ownedHere(ns string) bool {
	for i := int64(1); i <= netSeq.Load(); i++ {
		if strings.HasPrefix(ns, fmt.Sprintf("%s%d-%d-", prefix, os.Getpid(), i)) {
			return true
		}
	}
	return false
}

func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// Namespaces lists the network namespaces this package made that exist
// now (of any run).
func Namespaces(t testing.TB) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("partition: ip netns list: %v", err)
	}
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			names = append(names, f[0])
		}
	}
	return names
}

// Command is `ip netns exec NS name args…`: a process inside the node.
func (nd *Node) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", nd.NS, name}, args...)...)
}

// Exec is the prefix that runs a command inside the node (for
// testenv.StartProcessIn).
func (nd *Node) Exec() []string { return []string{"ip", "netns", "exec", nd.NS} }

// Dial connects from inside the node, as a process there would: the
// socket is made by a thread that joined the node's namespace for the
// dial, so the test process reaches the Net without an address on the
// host. It implements nats.CustomDialer.
func (nd *Node) Dial(network, addr string) (net.Conn, error) {
	return nd.DialContext(context.Background(), network, addr)
}

// DialContext is Dial with a context (for an http.Transport).
func (nd *Node) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := nd.inside(func() (err error) {
		c, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen listens inside the node (a server of the test's own there).
func (nd *Node) Listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := nd.inside(func() (err error) {
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// inside runs f on a thread that joined the node's network namespace:
// the sockets f makes belong to the node for good.
func (nd *Node) inside(f func() error) error {
	host := hostNS()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(nd.fd.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("partition: join namespace %s: %w", nd.NS, err)
			return
		}
		done <- f()
		// Back to the host's namespace before the thread serves anything
		// else. A thread is never left to exit in the node's namespace:
		// children started with Pdeathsig (every process of these tests)
		// are killed when the thread that forked them exits, and this
		// thread may have forked one.
		if err := unix.Setns(host, unix.CLONE_NEWNET); err != nil {
			return // locked: the thread ends with the goroutine (and may take a child with it)
		}
		runtime.UnlockOSThread()
	}()
	return <-done
}

var (
	hostOnce sync.Once
	hostFD   int
)

// hostNS is a descriptor of the test process's own network namespace,
// opened by the first caller: a goroutine not locked to a thread, so on a
// thread in the host's namespace (a thread is in a node's only while a
// dial holds it locked).
func hostNS() int {
	hostOnce.Do(func() {
		fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			panic(fmt.Sprintf("partition: open /proc/thread-self/ns/net: %v", err))
		}
		hostFD = fd
	})
	return hostFD
}
