//go:build linux

package partition

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// Proxy is a Toxiproxy (github.com/Shopify/toxiproxy/v2, as a library) in
// a child process inside a node, in front of every server: a processor in
// that node given URL instead of the servers' reaches them only through
// it, so its toxics slow, stall or reset that processor's link and no
// other. The kernel here has no netem: latency, bandwidth, stalls and
// resets come from the proxy.
type Proxy struct {
	// URL lists the proxy's listeners, one per server, in the servers'
	// order (nats.url for the processor behind it).
	URL string

	child *Child
	mu    sync.Mutex
	in    io.WriteCloser
	out   *bufio.Reader
}

// StartProxy starts a proxy in node nd listening on 127.0.0.1:ClientPort+i
// (in nd's namespace) for each upstream address i ("ip:port", a server's
// client address: Servers.Addrs).
func StartProxy(t testing.TB, nd *Node, upstreams []string) *Proxy {
	t.Helper()
	var pairs, urls []string
	for i, up := range upstreams {
		listen := fmt.Sprintf("127.0.0.1:%d", ClientPort+i)
		pairs = append(pairs, listen+"="+up)
		urls = append(urls, "nats://"+listen)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := nd.Command(self)
	cmd.Env = append(os.Environ(), envChild+"="+childProxy, envProxies+"="+strings.Join(pairs, ","))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{URL: strings.Join(urls, ","), in: in, out: bufio.NewReader(out)}
	p.child = start(t, "toxiproxy in "+nd.Name, cmd)
	if line, err := p.out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("partition: proxy in %s did not start (%q, %v):\n%s", nd.Name, line, err, p.child.Logs.Bytes())
	}
	return p
}

// Toxic is one toxic on every link of a proxy (Toxiproxy's toxic JSON:
// name, type, stream "upstream" or "downstream", attributes).
type Toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Stream     string         `json:"stream"`
	Toxicity   float32        `json:"toxicity"`
	Attributes map[string]any `json:"attributes"`
}

// Add adds toxics to every proxied server, in both directions unless a
// toxic names its stream.
func (p *Proxy) Add(t testing.TB, toxics ...Toxic) {
	t.Helper()
	for _, tx := range toxics {
		if tx.Toxicity == 0 {
			tx.Toxicity = 1
		}
		streams := []string{tx.Stream}
		if tx.Stream == "" {
			streams = []string{"upstream", "downstream"}
		}
		name := tx.Name
		for _, st := range streams {
			tx.Stream = st
			if len(streams) > 1 {
				tx.Name = name + "_" + st // a proxy's toxics have unique names
			}
			b, _ := json.Marshal(tx)
			p.command(t, "add "+string(b))
		}
	}
}

// Remove removes the toxics named (in both directions where Add put them
// on both).
func (p *Proxy) Remove(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		p.command(t, "remove "+n)
	}
}

// Slow is the slow link of issue 33: 200ms ± 100ms of latency each way
// and 64 KB/s of bandwidth each way.
func Slow() []Toxic {
	return []Toxic{
		{Name: "latency", Type: "latency", Attributes: map[string]any{"latency": 200, "jitter": 100}},
		{Name: "bandwidth", Type: "bandwidth", Attributes: map[string]any{"rate": 64}},
	}
}

// Stall stops every byte through the proxy for d, after which each
// connection is closed (Toxiproxy's timeout toxic), then lets new
// connections through again.
func (p *Proxy) Stall(t testing.TB, d time.Duration) {
	t.Helper()
	p.Add(t, Toxic{Name: "stall", Type: "timeout", Attributes: map[string]any{"timeout": d.Milliseconds()}})
	time.Sleep(d) // the stall itself
	p.Remove(t, "stall")
}

// Reset resets (TCP RST) every connection through the proxy on its next
// bytes, within window, then lets new connections through again.
func (p *Proxy) Reset(t testing.TB, window time.Duration) {
	t.Helper()
	p.Add(t, Toxic{Name: "reset", Type: "reset_peer", Attributes: map[string]any{"timeout": 0}})
	time.Sleep(window) // connections that carry a byte meanwhile are reset
	p.Remove(t, "reset")
}

// command sends one command line and waits for its "ok".
func (p *Proxy) command(t testing.TB, line string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		t.Fatalf("partition: proxy %q: %v", line, err)
	}
	reply, err := p.out.ReadString('\n')
	if err != nil || reply != "ok\n" {
		t.Fatalf("partition: proxy %q: %q %v\n%s", line, reply, err, p.child.Logs.Bytes())
	}
}
