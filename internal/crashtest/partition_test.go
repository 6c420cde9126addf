//go:build linux

package crashtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/partition"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// The network's faults (issue 33): three nats-servers and the processors,
// each in a network namespace of its own (package partition), links cut,
// groups split, a link flapping, a slow and lossy link, while proposals
// flow as in the soaks (some needing a standalone grant, one intent in
// eight whose provider never answers: a timeout that reconciliation
// settles, some a second proposal of an intent). After every run, over
// the whole recorded history: each key dispatched at most once, no
// outcome contradicted by the provider or by another, no outage turned
// into a failure (no PROCESSING_FAILED, no FAILED_BEFORE_DISPATCH, no
// answer but CONFIRMED for an action done), every proposal ended once the
// network healed, the outcomes on each proposal's subject in order (the
// last the latest: no stale non-terminal outcome after a terminal one,
// issue 33's item 1).

// netDeployment is a partition test's deployment: the servers, the
// processors (binaries) and the test's own clients, each in its own
// namespace of net.
type netDeployment struct {
	net     *partition.Net
	servers *partition.Servers
	client  *partition.Node
	env     *testenv.Env
	far     *farSide
	procs   []*node
	nets    []*partition.Node // procs[i] runs in nets[i]
	// proxy is in front of procs[0] when the deployment has one.
	proxy *partition.Proxy
}

// processorName is the name a processor's NATS connection has (its
// servers' /connz shows it).
const processorName = "portcullis-processor"

// leaveWithin bounds how long a processor may stay connected to a server
// that went silent (engine.PingInterval × (engine.MaxPingsOut + 1) is
// about 20s), with a margin for a loaded machine.
const leaveWithin = time.Minute

// newNetDeployment starts three servers and n processors on a Net of
// their own, with NATS authentication on; with proxied, procs[0] reaches
// the servers only through a Toxiproxy in its namespace.
func newNetDeployment(t *testing.T, n int, proxied bool) *netDeployment {
	t.Helper()
	partition.Require(t)
	d := &netDeployment{net: partition.New(t)}
	d.client = d.net.Add(t, "t")
	var srv [partition.Size]*partition.Node
	for i := range srv {
		srv[i] = d.net.Add(t, fmt.Sprintf("s%d", i))
	}
	for i := range n {
		d.nets = append(d.nets, d.net.Add(t, "p"+string(rune('a'+i))))
	}
	d.env = testenv.New(t, testenv.Clustered(), testenv.OnServers(func(t testing.TB, _ *config.Config, accounts string) (string, nats.CustomDialer) {
		d.servers = partition.StartServers(t, srv, d.client, accounts)
		return d.servers.URL(), d.client
	}), testenv.WithAuth(), testenv.NotStarted(), fastReconcile)
	d.far = serveFarSide(t, d.env)
	// The provider takes 50–400ms per dispatch (by its key), as in the
	// pause soak, so that faults catch processors inside provider calls.
	d.far.OnDispatch(func(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
		time.Sleep(time.Duration(50+int(req.IdempotencyKey[0])*int(req.IdempotencyKey[1])%350) * time.Millisecond)
		return soakDispatch(ctx, req)
	})
	for i, nd := range d.nets {
		pn := &node{cfg: d.env.ProcessorConfig(t, nd.Name), in: nd.Exec()}
		if i == 0 && proxied {
			d.proxy = partition.StartProxy(t, nd, d.servers.Addrs())
			pn.cfg.NATS.URL = d.proxy.URL
		}
		pn.start(t)
		d.procs = append(d.procs, pn)
	}
	if dir := os.Getenv(envPartitionLogs); dir != "" {
		t.Cleanup(func() { d.keepLogs(t, dir) })
	}
	return d
}

// envPartitionLogs names a directory where a partition test leaves what
// every processor and server logged, whether it passed or not.
const envPartitionLogs = "PORTCULLIS_PARTITION_LOGS"

func (d *netDeployment) keepLogs(t *testing.T, dir string) {
	name := strings.ReplaceAll(t.Name(), "/", "_")
	write := func(file string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name+"-"+file+".log"), b, 0o644); err != nil {
			t.Error(err)
		}
	}
	for i, p := range d.procs {
		for j, pr := range append(slices.Clone(p.past), p.p) {
			write(fmt.Sprintf("%s-%d", d.nets[i].Name, j), pr.Logs.Bytes())
		}
	}
	for i, s := range d.servers.Procs {
		write(partition.ServerName(i), s.Logs.Bytes())
	}
	t.Logf("logs kept in %s/%s-*.log", dir, name)
}

// victim draws a processor for a fault of the network: not the proxied
// one (its proxy's upstream dials block through a cut; the slow link is
// its fault).
func (d *netDeployment) victim(rng *rand.Rand) int {
	first := 0
	if d.proxy != nil {
		first = 1
	}
	return first + rng.IntN(len(d.procs)-first)
}

// whole waits until the cluster has healed: a meta leader seeing every
// server.
func (d *netDeployment) whole(t *testing.T) {
	t.Helper()
	d.servers.WaitJetStream(t, time.Minute)
}

// netFault is one kind of network fault: run makes it, calls during
// while it holds (more proposals and grants go out then), heals it, and
// returns what it did, for the log.
type netFault struct {
	name string
	run  func(t *testing.T, d *netDeployment, rng *rand.Rand, during func()) string
}

// between draws a duration in [lo, hi).
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// hold runs during, then waits until d has passed since start: a fault
// lasts d whatever during took (at least during's time).
func hold(start time.Time, d time.Duration, during func()) {
	during()
	time.Sleep(time.Until(start.Add(d))) // the fault itself
}

var (
	// faultCutOff: a processor cut from every server (its link down) for
	// longer than its lease and its inputs' ack wait: another processor
	// takes its work over and declares its dispatches interrupted; after
	// the heal its late replies and publishes meet records that moved on.
	faultCutOff = netFault{"processor-cut-off", func(t *testing.T, d *netDeployment, rng *rand.Rand, during func()) string {
		v := d.victim(rng)
		length := between(rng, lease+3*time.Second, lease+8*time.Second)
		start := time.Now()
		d.net.Cut(t, d.nets[v])
		hold(start, length, during)
		d.net.Heal(t, d.nets[v])
		return fmt.Sprintf("processor %s cut off from every server for %s", d.nets[v].Name, length.Round(10*time.Millisecond))
	}}
	// faultMinority: the server a processor is connected to and that
	// processor split from the other two servers, the other processors
	// and the test's clients: it reaches only a server without quorum.
	faultMinority = netFault{"minority", func(t *testing.T, d *netDeployment, rng *rand.Rand, during func()) string {
		v := d.victim(rng)
		s := d.servers.ConnectedTo(d.nets[v].IP, processorName)
		if s < 0 {
			s = rng.IntN(partition.Size)
		}
		length := between(rng, 8*time.Second, lease+6*time.Second)
		var majority []*partition.Node
		for i, nd := range d.servers.Nodes {
			if i != s {
				majority = append(majority, nd)
			}
		}
		start := time.Now()
		d.net.Split(t, majority, []*partition.Node{d.nets[v], d.servers.Nodes[s]})
		hold(start, length, during)
		d.net.Join(t)
		d.whole(t)
		return fmt.Sprintf("processor %s with only server %s (minority) for %s", d.nets[v].Name, partition.ServerName(s), length.Round(10*time.Millisecond))
	}}
	// faultLeaders: every stream and consumer leader moved onto the
	// server a processor is connected to, then that server cut off: every
	// group elects a leader at once, and the processor must notice that
	// its server went silent and reconnect to another (the fault holds
	// until it did, at most leaveWithin).
	faultLeaders = netFault{"leaders-cut", func(t *testing.T, d *netDeployment, rng *rand.Rand, during func()) string {
		v := d.victim(rng)
		s := d.servers.ConnectedTo(d.nets[v].IP, processorName)
		if s < 0 {
			s = rng.IntN(partition.Size)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		asked, err := partition.MoveLeaders(ctx, d.env.NC, d.env.JS, partition.ServerName(s))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		length := between(rng, 8*time.Second, lease+6*time.Second)
		start := time.Now()
		d.net.Cut(t, d.servers.Nodes[s])
		hold(start, length, during)
		left := testenv.Poll(time.Until(start.Add(leaveWithin)), func() bool {
			now := d.servers.ConnectedTo(d.nets[v].IP, processorName)
			return now >= 0 && now != s
		})
		cut := time.Since(start)
		d.net.Heal(t, d.servers.Nodes[s])
		d.whole(t)
		if !left {
			t.Errorf("processor %s stayed connected to the cut server %s for %s: a server gone silent is not left for the others",
				d.nets[v].Name, partition.ServerName(s), cut.Round(time.Second))
		}
		return fmt.Sprintf("server %s, processor %s's, leading every stream and consumer (%d stepdowns), cut off for %s",
			partition.ServerName(s), d.nets[v].Name, asked, cut.Round(10*time.Millisecond))
	}}
	// faultFlapping: a processor's link down and up again and again,
	// 0.2–2.5 s each way, for 10–16 s.
	faultFlapping = netFault{"flapping", func(t *testing.T, d *netDeployment, rng *rand.Rand, during func()) string {
		v := d.victim(rng)
		length := between(rng, 10*time.Second, 16*time.Second)
		flaps := 0
		done := make(chan struct{})
		start := time.Now()
		// Drawn here: rng is not for two goroutines.
		var downs, ups []time.Duration
		for total := time.Duration(0); total < length; {
			downs = append(downs, between(rng, 200*time.Millisecond, 2500*time.Millisecond))
			ups = append(ups, between(rng, 200*time.Millisecond, 2500*time.Millisecond))
			total += downs[len(downs)-1] + ups[len(ups)-1]
		}
		go func() {
			defer close(done)
			for i := range downs {
				if err := d.net.Link(d.nets[v], false); err != nil {
					t.Error(err)
				}
				time.Sleep(downs[i]) // down
				if err := d.net.Link(d.nets[v], true); err != nil {
					t.Error(err)
				}
				flaps++
				time.Sleep(ups[i]) // up
			}
		}()
		during()
		<-done
		return fmt.Sprintf("processor %s's link flapped %d times in %s", d.nets[v].Name, flaps, time.Since(start).Round(10*time.Millisecond))
	}}
	// faultSlowLink: the proxied processor's link with 200ms ± 100ms of
	// latency and 64 KB/s each way for 16–24 s, with two stalls of 2–4 s
	// (each ending in the connections' close) and two bursts of resets.
	faultSlowLink = netFault{"slow-link", func(t *testing.T, d *netDeployment, rng *rand.Rand, during func()) string {
		if d.proxy == nil {
			t.Fatal("slow-link needs a proxied deployment")
		}
		length := between(rng, 16*time.Second, 24*time.Second)
		start := time.Now()
		d.proxy.Add(t, partition.Slow()...)
		during()
		var events []string
		for i := range 4 {
			time.Sleep(between(rng, time.Second, 3*time.Second)) // slow only
			if i%2 == 0 {
				st := between(rng, 2*time.Second, 4*time.Second)
				d.proxy.Stall(t, st)
				events = append(events, "stall "+st.Round(10*time.Millisecond).String())
			} else {
				d.proxy.Reset(t, 300*time.Millisecond)
				events = append(events, "reset")
			}
		}
		time.Sleep(time.Until(start.Add(length))) // slow only, to the end
		d.proxy.Remove(t, "latency", "bandwidth")
		return fmt.Sprintf("processor %s's link slow (200±100 ms, 64 KB/s) for %s: %v", d.nets[0].Name, time.Since(start).Round(10*time.Millisecond), events)
	}}
)

// netLoad sends a partition soak's proposals (soakProposal) and grants.
type netLoad struct {
	far    *farSide
	ids    []string
	keys   map[string]string
	parked []string // waiting for their grant
}

// publish sends the next n proposals.
func (l *netLoad) publish(t *testing.T, n int) {
	t.Helper()
	for range n {
		id, p, key, needsGrant := soakProposal(t, len(l.ids))
		l.far.publishDurably(t, p, false, "proposal/"+id)
		l.ids = append(l.ids, id)
		l.keys[id] = key
		if needsGrant {
			l.parked = append(l.parked, id)
		}
	}
}

// grant grants the proposals parked so far, but the last `leave`.
func (l *netLoad) grant(t *testing.T, leave int) {
	t.Helper()
	n := max(len(l.parked)-leave, 0)
	grantParked(t, l.far, l.parked[:n])
	l.parked = slices.Clone(l.parked[n:])
}

// netSoak runs proposals through d while faults[k % len(faults)] hits it,
// for k < disruptions: before each fault a half-chunk of proposals, during
// it the other half and the grants of the proposals parked before; then
// it waits until every proposal ended and checks the history.
func netSoak(t *testing.T, d *netDeployment, proposals, disruptions int, faults ...netFault) {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s, ok := soakSeed(); ok {
		seed = s
	}
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	t.Logf("partition soak: %d proposals, %d disruptions, seed %d", proposals, disruptions, seed)
	l := &netLoad{far: d.far, keys: map[string]string{}}
	stop := d.far.readDuring(t)
	chunk := proposals / (disruptions + 1)
	counts := map[string]int{}
	for k := range disruptions {
		l.publish(t, chunk/2)
		// Land in the middle of this chunk's work.
		time.Sleep(between(rng, 100*time.Millisecond, 800*time.Millisecond))
		f := faults[k%len(faults)]
		parkedBefore := len(l.parked)
		what := f.run(t, d, rng, func() {
			l.publish(t, chunk-chunk/2)
			l.grant(t, len(l.parked)-parkedBefore) // those parked before the fault
		})
		counts[f.name]++
		t.Logf("disruption %d (%s): %s", k, f.name, what)
	}
	l.publish(t, proposals-len(l.ids))
	l.grant(t, 0)
	stop()

	// Every proposal ends (a terminal outcome stored, the last one or
	// not: a stale one after it is counted below); then what the healed
	// processors still held settles.
	var open []string
	testenv.Poll(3*time.Minute, func() bool {
		stored := d.env.StoredHistory(t)
		open = slices.DeleteFunc(slices.Clone(l.ids), func(id string) bool {
			return slices.ContainsFunc(stored[id], func(o schema.Outcome) bool { return o.Terminal })
		})
		if len(open) > 0 {
			time.Sleep(time.Second)
		}
		return len(open) == 0
	})
	if len(open) > 0 {
		t.Errorf("%d proposals without a terminal outcome 3m after the network healed: %v", len(open), open)
	}
	d.env.QuiesceWithin(t, 2*time.Minute)
	_, bad := d.far.checkTruth(t)
	stored := d.env.StoredHistory(t)
	ended := map[schema.Kind]int{}
	var interrupted, staleAfterTerminal int
	for _, id := range l.ids {
		outs := stored[id]
		if len(outs) == 0 {
			continue // reported by checkTruth
		}
		last := outs[len(outs)-1]
		ended[last.Kind]++
		if last.Kind != schema.KindConfirmed || !last.Terminal {
			traceIntent(t, d.procs, l.keys[id], id)
		}
		if hasIncident(outs, schema.PhaseDispatch, schema.CodeDispatchInterrupted) {
			interrupted++
		}
		if i := slices.IndexFunc(outs, func(o schema.Outcome) bool { return o.Terminal }); i >= 0 &&
			slices.ContainsFunc(outs[i+1:], func(o schema.Outcome) bool { return !o.Terminal }) {
			staleAfterTerminal++ // RuleOrder (checkTruth) reports it
		}
	}
	t.Logf("partition soak: %d proposals (keys received %d, late requests refused %d), disruptions %v; last outcomes %v; "+
		"%d proposals saw DISPATCH_INTERRUPTED; %d violations of the truth; %d proposals with a non-terminal outcome after their terminal one",
		len(l.ids), len(d.far.Delivered()), d.far.Late(), counts, ended, interrupted, bad, staleAfterTerminal)
	for _, p := range d.procs {
		p.stop(t)
	}
}

// A processor cut from every server for longer than its lease.
func TestPartitionProcessorCutOff(t *testing.T) {
	t.Parallel()
	netSoak(t, newNetDeployment(t, 2, false), 40, 1, faultCutOff)
}

// A processor that reaches only the minority server.
func TestPartitionProcessorWithMinority(t *testing.T) {
	t.Parallel()
	netSoak(t, newNetDeployment(t, 2, false), 40, 1, faultMinority)
}

// The server holding every stream and consumer leader, and a processor's
// connection, cut off, then healed: the processor reconnects to another
// server while it is cut.
func TestPartitionLeadersCutOff(t *testing.T) {
	t.Parallel()
	netSoak(t, newNetDeployment(t, 2, false), 40, 1, faultLeaders)
}

// A processor's link flapping.
func TestPartitionFlappingLink(t *testing.T) {
	t.Parallel()
	netSoak(t, newNetDeployment(t, 2, false), 40, 1, faultFlapping)
}

// 200ms ± 100ms latency, 64 KB/s, stalls and resets on one processor's
// link.
func TestPartitionSlowLink(t *testing.T) {
	t.Parallel()
	netSoak(t, newNetDeployment(t, 2, true), 40, 1, faultSlowLink)
}

// The partition soak (PORTCULLIS_LONG=1): three processors (one behind
// a proxy) on three servers, 1,000 proposals, 25 network faults, the five
// kinds in turn.
func TestPartitionSoak(t *testing.T) {
	if !long(t) {
		t.Skip("the partition soak runs with " + EnvLong + "=1; the short tests run each fault once")
	}
	netSoak(t, newNetDeployment(t, 3, true), 1000, 25, faultCutOff, faultMinority, faultLeaders, faultFlapping, faultSlowLink)
}
