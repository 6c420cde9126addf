// Package bench measures Portcullis against the bare JetStream work it is
// built from, side by side on one embedded server (`processor bench`):
//
//   - Raw: a five-hop chain — five streams, each hop a durable pull
//     consumer that republishes every message to the next stream
//     (asynchronously, with a Nats-Msg-Id) and acks it once the PubAck
//     arrived; the fifth hop publishes a core NATS message where the
//     measurer listens, as a stage publishes an outcome.
//   - Pipeline: Portcullis end to end through its five stages, granted
//     proposals of distinct intents dispatched over NATS to a connector on
//     the far side (the public client's ServeConnector), a share of them
//     acknowledged so that reconciliation verifies them; done at the
//     terminal outcome.
//
// Each side runs two phases: throughput (Count messages, at most Window in
// flight) and latency (Rate messages per second for Duration, each timed
// from its publish to its end).
package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a run.
type Options struct {
	// Count is the throughput phase's number of messages. Default 5000.
	Count int
	// Window bounds messages in flight in the throughput phase. Default 500.
	Window int
	// Rate is the latency phase's messages per second. Default 1000.
	Rate int
	// Duration is the latency phase's length. Default 5s.
	Duration time.Duration
	// PayloadBytes pads each proposal's payload (and sizes the raw chain's
	// messages like the proposals). Default 0: the bare proposal.
	PayloadBytes int
	// AckShare is the share of dispatches the connector acknowledges
	// (reconciliation verifies them) instead of confirming. Default 0.1.
	AckShare float64
	// Replicas of the raw chain's streams and consumers (3 on a cluster,
	// as Portcullis's). Default 1.
	Replicas int
	// OnHeapPeak, when set, is called when the Go heap reaches a new peak
	// during the Portcullis side (at most every 5s): `-memprofile` writes
	// its heap profile then.
	OnHeapPeak func()
	// Progress, when set, is called about twice a second with a one-line
	// status.
	Progress func(line string)
	// Server, when set, is the nats-server's own process: phases and
	// sides measure its CPU time and peak RSS too (ServerCPU,
	// ServerPeakRSS), apart from this process's.
	Server *ServerProcess
}

func (o *Options) defaults() {
	if o.Count <= 0 {
		o.Count = 5000
	}
	if o.Window <= 0 {
		o.Window = 500
	}
	if o.Rate <= 0 {
		o.Rate = 1000
	}
	if o.Duration <= 0 {
		o.Duration = 5 * time.Second
	}
	if o.AckShare < 0 {
		o.AckShare = 0
	}
}

// Phase is one measured phase.
type Phase struct {
	Count   int
	Elapsed time.Duration
	// Latencies are sorted ascending.
	Latencies []time.Duration
	// Failed counts messages that did not end as expected (a pipeline
	// outcome other than CONFIRMED).
	Failed int
	// CPU is the process's CPU time (user and system, every goroutine:
	// the embedded server, the clients and the side itself) during the
	// phase; 0 where the platform does not say. Unlike throughput, it
	// hardly depends on what else runs on the machine.
	CPU time.Duration
	// ServerCPU is the nats-server process's CPU time during the phase
	// when it runs apart (Options.Server); then CPU does not include it.
	ServerCPU time.Duration
	// Server is what the nats-server process handled during the phase
	// when it runs apart (Options.Server), else zero.
	Server ServerStats
}

// CPUPerMsg is the process's CPU time per message of the phase.
func (p Phase) CPUPerMsg() time.Duration {
	if p.Count == 0 {
		return 0
	}
	return p.CPU / time.Duration(p.Count)
}

// ServerCPUPerMsg is the nats-server process's CPU time per message of
// the phase (0 unless it runs apart).
func (p Phase) ServerCPUPerMsg() time.Duration {
	if p.Count == 0 {
		return 0
	}
	return p.ServerCPU / time.Duration(p.Count)
}

// Throughput is messages per second.
func (p Phase) Throughput() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Count) / p.Elapsed.Seconds()
}

// Percentile is the q-quantile latency (0 ≤ q ≤ 1).
func (p Phase) Percentile(q float64) time.Duration {
	if len(p.Latencies) == 0 {
		return 0
	}
	i := min(int(q*float64(len(p.Latencies))), len(p.Latencies)-1)
	return p.Latencies[i]
}

// Side is one side's result.
type Side struct {
	Throughput Phase
	Latency    Phase
	// PeakRSS is the process's peak resident set (Linux VmHWM, every
	// goroutine of the process: in-process nats-servers included), in
	// bytes (0 where the platform does not say): during the side when
	// RSSReset, else since the process started.
	PeakRSS int64
	// RSSReset says the peak was reset at the side's start.
	RSSReset bool
	// ServerPeakRSS is the nats-server process's peak resident set during
	// the side when it runs apart (Options.Server), else 0.
	ServerPeakRSS int64
	// GoMemory is the Go runtime's peak during the side.
	GoMemory GoMemory
}

// tracker times messages from send to end and releases window slots.
type tracker struct {
	mu      sync.Mutex
	sent    map[string]time.Time
	lat     []time.Duration
	failed  int
	want    int
	done    chan struct{}
	slots   chan struct{}
	ended   atomic.Int64
	started time.Time
	cpu0    time.Duration
	server  *ServerProcess
	scpu0   time.Duration
	stats0  ServerStats
}

// tracker returns a tracker for want messages, at most window in flight.
func (o Options) tracker(want, window int) *tracker {
	return &tracker{sent: make(map[string]time.Time, want), want: want, done: make(chan struct{}), slots: make(chan struct{}, window), server: o.Server}
}

// send notes id's send time, waiting for a window slot first.
func (t *tracker) send(ctx context.Context, id string) error {
	select {
	case t.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	t.mu.Lock()
	t.sent[id] = time.Now()
	t.mu.Unlock()
	return nil
}

// end notes id's end; ok is false for a wrong ending. Unknown or repeated
// ids are ignored.
func (t *tracker) end(id string, ok bool) {
	now := time.Now()
	t.mu.Lock()
	t0, found := t.sent[id]
	if !found {
		t.mu.Unlock()
		return
	}
	delete(t.sent, id)
	if ok {
		t.lat = append(t.lat, now.Sub(t0))
	} else {
		t.failed++
	}
	n := len(t.lat) + t.failed
	t.mu.Unlock()
	t.ended.Add(1)
	<-t.slots
	if n == t.want {
		close(t.done)
	}
}

// stallTimeout ends a phase in error when no message has ended for that
// long: something was lost, and the bench says so instead of hanging.
const stallTimeout = time.Minute

// wait waits for every message's end and returns the phase.
func (t *tracker) wait(ctx context.Context, label string, progress func(string)) (Phase, error) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	last, moved := int64(-1), time.Now()
	for {
		select {
		case <-t.done:
			t.mu.Lock()
			defer t.mu.Unlock()
			slices.Sort(t.lat)
			p := Phase{Count: t.want, Elapsed: time.Since(t.started), Latencies: t.lat, Failed: t.failed, CPU: CPUTime() - t.cpu0}
			if t.server != nil {
				p.ServerCPU = t.server.CPU() - t.scpu0
				p.Server = t.server.Stats().sub(t.stats0)
			}
			return p, nil
		case <-tick.C:
			n := t.ended.Load()
			if progress != nil {
				progress(fmt.Sprintf("%s %d/%d", label, n, t.want))
			}
			if n != last {
				last, moved = n, time.Now()
			} else if time.Since(moved) > stallTimeout {
				return Phase{}, fmt.Errorf("bench: %s: %d of %d ended, none for %s", label, n, t.want, stallTimeout)
			}
		case <-ctx.Done():
			return Phase{}, fmt.Errorf("bench: %s: %d of %d ended: %w", label, t.ended.Load(), t.want, ctx.Err())
		}
	}
}

// paced sends count messages at rate per second through send (which must
// not block on the window: the latency phase's window is count).
func paced(ctx context.Context, count, rate int, send func(i int) error) error {
	start := time.Now()
	interval := time.Second / time.Duration(rate)
	for i := range count {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := send(i); err != nil {
			return err
		}
	}
	return nil
}

// start notes the phase's start: its time and the process's CPU time.
func (t *tracker) start() {
	t.started = time.Now()
	t.cpu0 = CPUTime()
	if t.server != nil {
		t.scpu0 = t.server.CPU()
		t.stats0 = t.server.Stats()
	}
}

// errNoRSS: the platform does not report peak RSS.
var errNoRSS = errors.New("bench: peak RSS not available")

// resetPeaks returns the heap's free pages to the system and restarts the
// kernel's peak-RSS count at the current RSS (Linux: clear_refs 5), of
// this process and of the server's when it runs apart, so that what an
// earlier side left behind is not counted. It reports whether this
// process's count was restarted.
func (o Options) resetPeaks() bool {
	debug.FreeOSMemory()
	if o.Server != nil {
		_ = os.WriteFile("/proc/"+o.Server.proc()+"/clear_refs", []byte("5"), 0)
	}
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// peaks reads the peak resident sets (VmHWM) of this process and of the
// server's when it runs apart, in bytes (0 where unknown).
func (o Options) peaks() (self, srv int64) {
	self, _ = peakRSS("self")
	if o.Server != nil {
		srv, _ = peakRSS(o.Server.proc())
	}
	return self, srv
}

// peakRSS reads a process's peak resident set (VmHWM) in bytes; proc is
// "self" or a pid.
func peakRSS(proc string) (int64, error) {
	b, err := os.ReadFile("/proc/" + proc + "/status")
	if err != nil {
		return 0, errNoRSS
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, errNoRSS
			}
			return kb * 1024, nil
		}
	}
	return 0, errNoRSS
}

// runSide runs a side's two phases — throughput (o.Count messages, at
// most o.Window in flight) and latency (o.Rate per second for o.Duration)
// — and measures its peaks. id names the i-th message of a phase
// (latency false: throughput); publish sends it. A message ends through
// the tracker cur holds, which the side's listener calls.
func (o Options) runSide(ctx context.Context, label string, cur *atomic.Pointer[tracker], onPeak func(),
	id func(latency bool, i int) string, publish func(latency bool, i int, id string) error) (Side, error) {
	var side Side
	side.RSSReset = o.resetPeaks()
	stopMem := sampleMemory(onPeak)
	defer func() { stopMem() }()
	t := o.tracker(o.Count, o.Window)
	cur.Store(t)
	t.start()
	for i := range o.Count {
		id := id(false, i)
		if err := t.send(ctx, id); err != nil {
			return Side{}, err
		}
		if err := publish(false, i, id); err != nil {
			return Side{}, err
		}
	}
	var err error
	if side.Throughput, err = t.wait(ctx, label+" throughput", o.Progress); err != nil {
		return Side{}, err
	}
	n := o.latencyCount()
	t = o.tracker(n, n)
	cur.Store(t)
	t.start()
	if err := paced(ctx, n, o.Rate, func(i int) error {
		id := id(true, i)
		if err := t.send(ctx, id); err != nil {
			return err
		}
		return publish(true, i, id)
	}); err != nil {
		return Side{}, err
	}
	if side.Latency, err = t.wait(ctx, label+" latency", o.Progress); err != nil {
		return Side{}, err
	}
	side.PeakRSS, side.ServerPeakRSS = o.peaks()
	side.GoMemory = stopMem()
	stopMem = func() GoMemory { return GoMemory{} }
	return side, nil
}

// latencyCount is the latency phase's number of messages.
func (o Options) latencyCount() int { return max(1, int(float64(o.Rate)*o.Duration.Seconds())) }
