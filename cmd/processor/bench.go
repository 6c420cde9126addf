package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/portcullis/portcullis/internal/bench"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/natscluster"
	"github.com/portcullis/portcullis/subjects"
)

// rssNote says what the peak RSS and CPU figures are.
func rssNote(apart bool) string {
	const peak = "RSS          peak = VmHWM from /proc/<pid>/status, reset at each phase's start (clear_refs 5); "
	if apart {
		return peak + "the nats-server runs in a process of its own: RSS and CPU/msg above are this process's (processor, connector, bench clients) without it"
	}
	return peak + "one process: the nats-server(s) run in it"
}

// cmdBench measures Portcullis side by side with the bare JetStream work it
// is built from, on one embedded server or an in-process three-server
// cluster (package bench says what each side does): throughput, latency at
// a fixed rate, CPU per message, peak RSS, and their ratios. With -queued
// it measures the drain of a backlog published before the processor
// starts instead.
func cmdBench(c *cmdline, args []string, _ io.Reader) int {
	fs, stdout, stderr := c.fs, c.stdout, c.stderr
	n := fs.Int("n", 5000, "messages in the throughput phase, each side")
	window := fs.Int("inflight", 500, "messages in flight at most in the throughput phase (and publishes pending with -queued)")
	rate := fs.Int("rate", 1000, "messages per second in the latency phase")
	duration := fs.Duration("duration", 5*time.Second, "length of the latency phase")
	payload := fs.Int("payload", 0, "bytes of padding in each proposal's payload")
	ackShare := fs.Float64("ack-share", 0.1, "share of dispatches the connector acknowledges (reconciliation verifies them)")
	syncAlways := fs.Bool("sync-always", false, "nats-servers fsync every write (nats.sync_always)")
	floorOnly := fs.Bool("floor", false, "run only the contract floor (the least work the contract needs, package bench) and the raw chain its CPU is checked against, without the Portcullis side: -cpuprofile then profiles the floor")
	queued := fs.Int("queued", 0, "publish this many proposals (the issue's case: 100000) before the processor starts, then measure their drain and peak RSS; no raw side")
	cluster := fs.Int("cluster", 0, "run both sides on an in-process three-server JetStream cluster (replicas 3, replicated journal) with this many processors, 1–3, sharing the stage consumers")
	natsProcess := fs.Bool("nats-process", false, "run the nats-server in a child process (this binary with -serve-nats) instead of in this one, so that the processor's peak RSS and CPU are measured apart from the server's, as on a deployment with an external NATS")
	serveNATS := fs.String("serve-nats", "", "only run the bench's nats-server with this store directory, print its URL and run until stdin ends (what -nats-process starts)")
	dir := fs.String("data", "", "data directory (default: a temporary one, removed afterwards)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the Portcullis side to this file (and, with -nats-process, the server's to this file + \".nats-server\")")
	mutexProfile := fs.String("mutexprofile", "", "write a mutex contention profile of the Portcullis side to this file")
	memProfile := fs.String("memprofile", "", "write a heap profile of the Portcullis side to this file, taken at its Go heap's peak (in use then, allocations so far)")
	rival := fs.Int("rival", 0, "measure fairness instead: a victim host's latency alone (for -duration) and during a rival host's burst of this many signed, granted proposals (the issue's case: 3000), both hosts signed, each in its own streams and budgets")
	victimRate := fs.Int("victim-rate", 20, "with -rival: the victim's proposals per second")
	if _, code, done := c.parse(args); done {
		return code
	}
	if *rival > 0 {
		if *victimRate < 1 || *duration <= 0 || *payload < 0 || *queued > 0 || *cluster > 0 || *natsProcess || *floorOnly {
			return c.usageError("-rival: -victim-rate and -duration positive, -payload ≥ 0; not with -queued, -cluster, -nats-process or -floor")
		}
		return benchRival(c, *rival, *victimRate, *duration, *payload, *dir)
	}
	if *n < 1 || *window < 1 || *rate < 1 || *duration <= 0 || *payload < 0 || *ackShare < 0 || *ackShare > 1 {
		return c.usageError("-n, -inflight, -rate and -duration must be positive, -payload ≥ 0, -ack-share in [0, 1]")
	}
	if *queued < 0 || *cluster < 0 || *cluster > natscluster.Size || (*queued > 0 && *cluster > 0) || (*natsProcess && *cluster > 0) || (*floorOnly && *queued > 0) {
		return c.usageError("-queued ≥ 0, -cluster 0–3, not both; -nats-process not with -cluster; -floor not with -queued")
	}
	if *serveNATS != "" {
		cfg := config.Dev(*serveNATS)
		if err := bench.Serve(bench.ServerOptions(*serveNATS, *syncAlways, engine.EmbeddedMaxPayload(cfg)), os.Stdin, stdout); err != nil {
			fmt.Fprintln(stderr, "processor bench -serve-nats:", err)
			return 1
		}
		return 0
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "portcullis-bench-")
		if err != nil {
			fmt.Fprintln(stderr, "processor bench:", err)
			return 1
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "\r%-60s\rprocessor bench: %v\n", "", err)
		return 1
	}
	o := bench.Options{Count: *n, Window: *window, Rate: *rate, Duration: *duration, PayloadBytes: *payload, AckShare: *ackShare,
		Progress: func(line string) { fmt.Fprintf(stderr, "\r%-60s", line) }}
	prof := profiler{cpu: *cpuProfile, mutex: *mutexProfile}
	var profErr error
	if *memProfile != "" {
		o.OnHeapPeak = func() {
			if err := writeProfile(*memProfile, "heap"); err != nil {
				profErr = err
			}
		}
	}
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	serverWhere := "embedded server"
	if *natsProcess {
		exe, err := os.Executable()
		if err != nil {
			return fail(err)
		}
		args := []string{"bench", "-serve-nats", filepath.Join(*dir, "nats")}
		if *syncAlways {
			args = append(args, "-sync-always")
		}
		srv, err := bench.StartServerProcess(exe, args...)
		if err != nil {
			return fail(err)
		}
		defer srv.Close()
		o.Server, prof.server = srv, srv
		serverWhere = "the embedded server's settings in a process of its own (-nats-process)"
	}
	devConfig := func(sub string) *config.Config {
		cfg := config.Dev(filepath.Join(*dir, sub))
		if o.Server != nil {
			// As the embedded default, but on the external server: with
			// nats.url, store.journal auto would be replicated.
			cfg.NATS.Embedded, cfg.NATS.URL = false, o.Server.URL()
			cfg.Store.Journal = config.JournalLocal
		}
		cfg.NATS.Listen = "127.0.0.1:0"
		cfg.NATS.SyncAlways = *syncAlways
		cfg.Metrics.Listen = ""
		// Acknowledged dispatches are verified promptly: the first poll is
		// one interval after the receipt.
		cfg.Reconciliation.Interval = 100 * time.Millisecond
		return cfg
	}

	if *queued > 0 {
		cfg := devConfig("")
		queuedIngress(cfg, *queued)
		defer engine.LimitMemory(cfg)() // as processor run sets it
		var p *engine.Processor
		var b bench.Backlog
		err := prof.run(func() (err error) {
			b, p, err = bench.Queued(ctx, cfg, *queued, o, func(ctx context.Context) (*engine.Processor, error) {
				return engine.Start(ctx, engine.Options{Config: cfg, Log: quiet})
			})
			return err
		})
		if p != nil {
			defer p.Close()
		}
		if err == nil {
			err = profErr
		}
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(stderr, "\r%-60s\r", "")
		fmt.Fprintf(stdout, "setup        %s, sync_always %v; %d-byte proposals; %d queued before the processor starts, %.0f%% acknowledged then verified\n",
			serverWhere, *syncAlways, b.ProposalBytes, *queued, *ackShare*100)
		fmt.Fprintf(stdout, "queue        %d published in %s (%.0f/s), no processor running\n", b.Queue.Count, b.Queue.Elapsed.Round(time.Millisecond), b.Queue.Throughput())
		fmt.Fprintf(stdout, "drain        %d in %s: %.0f proposals/s, CPU/msg %s (processor start %s)\n", b.Drain.Count,
			b.Drain.Elapsed.Round(time.Millisecond), b.Drain.Throughput(), b.Drain.CPUPerMsg().Round(time.Microsecond), b.Start.Round(time.Millisecond))
		fmt.Fprintf(stdout, "peak RSS     %s during the drain%s; Go runtime peak: %s heap objects, %s mapped in all\n", mib(b.PeakRSS), resetNote(b.RSSReset),
			mib(int64(b.GoMemory.HeapObjects)), mib(int64(b.GoMemory.Total)))
		if o.Server != nil {
			fmt.Fprintf(stdout, "nats-server  peak RSS %s during the drain, CPU/msg %s, %.1f messages in and %.1f out per proposal (its own process)\n", mib(b.ServerPeakRSS),
				b.Drain.ServerCPUPerMsg().Round(time.Microsecond), float64(b.Drain.Server.InMsgs)/float64(b.Drain.Count), float64(b.Drain.Server.OutMsgs)/float64(b.Drain.Count))
		}
		fmt.Fprintln(stdout, rssNote(o.Server != nil))
		if b.Drain.Failed > 0 {
			fmt.Fprintf(stdout, "NOT CONFIRMED %d\n", b.Drain.Failed)
			return 1
		}
		return 0
	}

	var url string
	var subj subjects.Subjects
	setup := fmt.Sprintf("%s, sync_always %v", serverWhere, *syncAlways)
	if *cluster > 0 {
		nc, err := natscluster.New(filepath.Join(*dir, "cluster"), natscluster.Options{Name: "portcullis-bench", SyncAlways: *syncAlways})
		if err != nil {
			return fail(err)
		}
		defer nc.Close()
		if err := nc.WaitJetStream(30 * time.Second); err != nil {
			return fail(err)
		}
		url = nc.URL()
		o.Replicas = 3
		setup = fmt.Sprintf("in-process %d-server JetStream cluster, sync_always %v, replicas 3; %d processor(s), replicated journal", natscluster.Size, *syncAlways, *cluster)
	} else {
		cfg := devConfig("")
		defer engine.LimitMemory(cfg)() // as processor run sets it
		p, err := engine.Start(ctx, engine.Options{Config: cfg, Log: quiet})
		if err != nil {
			return fail(err)
		}
		defer p.Close()
		url, subj = p.NATSURL(), p.Subjects()
	}
	size, err := bench.Proposal("t-000000", *payload)
	if err != nil {
		return fail(err)
	}
	raw, err := bench.Raw(ctx, url, len(size), o)
	if err != nil {
		return fail(err)
	}
	floorSide := func() (bench.Side, error) { return bench.Floor(ctx, url, *dir, o) }
	var floor bench.Side
	if *floorOnly {
		err = prof.run(func() (err error) { floor, err = floorSide(); return err })
	} else {
		floor, err = floorSide()
	}
	if err != nil {
		return fail(err)
	}
	// On the cluster the processors start after the raw side and the
	// floor, so that they idle through none of it.
	for i := range *cluster {
		if *floorOnly {
			break
		}
		cfg := devConfig(fmt.Sprintf("p%d", i))
		cfg.NATS.Embedded, cfg.NATS.URL, cfg.NATS.Replicas = false, url, 3
		cfg.Store.Journal = config.JournalReplicated
		cfg.Internal.KeyFile = filepath.Join(*dir, "internal.key")
		p, err := engine.Start(ctx, engine.Options{Config: cfg, Log: quiet})
		if err != nil {
			return fail(fmt.Errorf("processor %d: %w", i, err))
		}
		defer p.Close()
		subj = p.Subjects()
	}
	var pc bench.Side
	if !*floorOnly {
		if err := prof.run(func() (err error) {
			pc, _, err = bench.Pipeline(ctx, url, subj, o)
			return err
		}); err != nil || profErr != nil {
			return fail(errors.Join(err, profErr))
		}
	}
	fmt.Fprintf(stderr, "\r%-60s\r", "")
	fmt.Fprintf(stdout, "setup        %s; %d-byte messages; %d in throughput (≤ %d in flight), %d/s for %s in latency\n",
		setup, len(size), *n, *window, *rate, *duration)
	fmt.Fprintf(stdout, "raw          %d-hop chain: pull, republish async with Nats-Msg-Id, ack after the PubAck\n", bench.Hops)
	fmt.Fprintf(stdout, "floor        the contract's least work: %d stages, %d sealed hand-offs, ed25519 check, 2 synced Pebble writes around a connector request, outcome + KV put\n", bench.Hops, bench.Hops-1)
	sides := []struct {
		name string
		side bench.Side
	}{{"raw", raw}, {"floor", floor}}
	if !*floorOnly {
		fmt.Fprintf(stdout, "portcullis   5 stages, inline grants, connector over NATS, %.0f%% acknowledged then verified\n", *ackShare*100)
		sides = append(sides, struct {
			name string
			side bench.Side
		}{"portcullis", pc})
	}
	fmt.Fprintf(stdout, "%-12s %12s %10s %10s %10s %10s %10s\n", "", "msg/s", "CPU/msg", "p50", "p99", "max", "peak RSS")
	row := func(name string, s bench.Side) {
		fmt.Fprintf(stdout, "%-12s %12.0f %10s %10s %10s %10s %10s\n", name, s.Throughput.Throughput(), s.Throughput.CPUPerMsg().Round(time.Microsecond),
			s.Latency.Percentile(0.5).Round(10*time.Microsecond), s.Latency.Percentile(0.99).Round(10*time.Microsecond),
			s.Latency.Percentile(1).Round(10*time.Microsecond), mib(s.PeakRSS))
	}
	reset := true
	for _, s := range sides {
		row(s.name, s.side)
		reset = reset && s.side.RSSReset
	}
	fmt.Fprintln(stdout, rssNote(o.Server != nil)+resetNote(reset))
	if o.Server != nil {
		fmt.Fprintf(stdout, "%-12s %12s %10s %10s %10s %10s %10s %10s\n", "nats-server", "", "CPU/msg", "peak RSS", "in/msg", "out/msg", "in B/msg", "out B/msg")
		for _, s := range sides {
			t := s.side.Throughput
			per := func(v int64) float64 { return float64(v) / float64(t.Count) }
			fmt.Fprintf(stdout, "%-12s %12s %10s %10s %10.1f %10.1f %10.0f %10.0f\n", " "+s.name, "", t.ServerCPUPerMsg().Round(time.Microsecond), mib(s.side.ServerPeakRSS),
				per(t.Server.InMsgs), per(t.Server.OutMsgs), per(t.Server.InBytes), per(t.Server.OutBytes))
		}
		fmt.Fprintln(stdout, "             in, out: messages (and their bytes) the server took from clients and delivered to them per message of the throughput phase (JetStream API calls, acks and replies included)")
	}
	for _, s := range sides {
		m := s.side.GoMemory
		fmt.Fprintf(stdout, "Go memory    %s peak: %s heap objects, %s mapped in all\n", s.name, mib(int64(m.HeapObjects)), mib(int64(m.Total)))
	}
	floorBound(stdout, raw, floor, o.Server != nil)
	if f := floor.Throughput.Failed + floor.Latency.Failed; f > 0 {
		// Never, unless the floor is broken: it signs and seals its own.
		fmt.Fprintf(stdout, "FLOOR REFUSED %d\n", f)
		return 1
	}
	if *floorOnly {
		return 0
	}
	fmt.Fprintf(stdout, "ratio %.3f\n", pc.Throughput.Throughput()/raw.Throughput.Throughput())
	if c := pc.Throughput.CPUPerMsg(); c > 0 {
		fmt.Fprintf(stdout, "CPU ratio %.2f (raw CPU per message over Portcullis CPU per proposal)\n", float64(raw.Throughput.CPUPerMsg())/float64(c))
	}
	if r := raw.Latency.Percentile(0.99); r > 0 {
		fmt.Fprintf(stdout, "p50 ratio %.2f\n", float64(pc.Latency.Percentile(0.5))/float64(raw.Latency.Percentile(0.5)))
		fmt.Fprintf(stdout, "p99 ratio %.2f\n", float64(pc.Latency.Percentile(0.99))/float64(r))
	}
	fmt.Fprintf(stdout, "floor_ratio %.3f\n", pc.Throughput.Throughput()/floor.Throughput.Throughput())
	if c := cpuPerUnit(pc); c > 0 {
		fmt.Fprintf(stdout, "floor_cpu_ratio %.3f\n", float64(cpuPerUnit(floor))/float64(c))
	}
	if f := floor.Latency.Percentile(0.99); f > 0 {
		fmt.Fprintf(stdout, "floor_p50_ratio %.2f\n", float64(pc.Latency.Percentile(0.5))/float64(floor.Latency.Percentile(0.5)))
		fmt.Fprintf(stdout, "floor_p99_ratio %.2f\n", float64(pc.Latency.Percentile(0.99))/float64(f))
	}
	if f := pc.Throughput.Failed + pc.Latency.Failed; f > 0 {
		fmt.Fprintf(stdout, "NOT CONFIRMED %d\n", f)
		return 1
	}
	return 0
}

// cpuPerUnit is a side's CPU per message or proposal in the throughput
// phase, the nats-server's included when it runs apart.
func cpuPerUnit(s bench.Side) time.Duration {
	return s.Throughput.CPUPerMsg() + s.Throughput.ServerCPUPerMsg()
}

// floorBound prints the floor's CPU per proposal against the raw chain's
// per message in the same run (server included) and warns when it exceeds
// bench.FloorBound: the floor would then not be the least work. It never
// fails the bench: the figure depends on the machine.
func floorBound(w io.Writer, raw, floor bench.Side, apart bool) {
	r, f := cpuPerUnit(raw), cpuPerUnit(floor)
	if r <= 0 || f <= 0 {
		fmt.Fprintln(w, "floor_bound  n/a: CPU time not available on this platform")
		return
	}
	what := "this process"
	if apart {
		what = "this process + nats-server"
	}
	x := float64(f) / float64(r)
	fmt.Fprintf(w, "floor_bound  floor CPU/proposal %s = %.2f× raw CPU/msg %s (%s; bound %.1f×)\n", f.Round(time.Microsecond), x, r.Round(time.Microsecond), what, bench.FloorBound)
	if x > bench.FloorBound {
		fmt.Fprintf(w, "WARNING      the floor costs more than %.1f× a raw chain message: it is not the least work, or the run was disturbed\n", bench.FloorBound)
	}
}

// resetNote flags a peak that could not be reset per phase.
func resetNote(reset bool) string {
	if reset {
		return ""
	}
	return " (NOT reset: the process's peak since it started)"
}

// profiler writes the CPU and mutex profiles asked for around the
// Portcullis side (the heap profile is written at its peak: OnHeapPeak).
// With a server process its CPU profile goes beside the CPU profile.
type profiler struct {
	cpu, mutex string
	server     *bench.ServerProcess
}

func (pr profiler) run(f func() error) error {
	if pr.cpu != "" {
		file, err := os.Create(pr.cpu)
		if err != nil {
			return err
		}
		defer file.Close()
		if err := pprof.StartCPUProfile(file); err != nil {
			return err
		}
		if pr.server != nil {
			if err := pr.server.StartCPUProfile(pr.cpu + ".nats-server"); err != nil {
				pprof.StopCPUProfile()
				return err
			}
		}
	}
	if pr.mutex != "" {
		runtime.SetMutexProfileFraction(5)
	}
	err := f()
	if pr.cpu != "" {
		pprof.StopCPUProfile()
		if pr.server != nil {
			if serr := pr.server.StopCPUProfile(); serr != nil && err == nil {
				err = serr
			}
		}
	}
	if pr.mutex != "" {
		if werr := writeProfile(pr.mutex, "mutex"); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

func mib(b int64) string {
	if b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}

func writeProfile(file, name string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// queuedIngress makes room for a backlog of n proposals of one host in its
// ingress stream: the per-host budget (streams.ingress_max_msgs, 10,000 by
// default) would refuse the rest of a 100,000-proposal backlog published
// before the processor starts (bench.Queued stores every one first).
func queuedIngress(cfg *config.Config, n int) {
	cfg.Streams.IngressMaxMsgs = max(cfg.Streams.IngressMaxMsgs, int64(n))
	cfg.Streams.IngressMaxBytes = max(cfg.Streams.IngressMaxBytes, int64(n)*int64(cfg.Admission.MaxPayloadBytes+4096))
}

// benchRival measures fairness between hosts (issue 32): a victim host's
// latency alone and during a rival host's burst, on one processor with the
// default budgets, and prints both, their ratio and the goal (the victim's
// p99 during the burst at most twice its p99 alone plus 50 ms).
func benchRival(c *cmdline, burst, rate int, alone time.Duration, payload int, dir string) int {
	stdout, stderr := c.stdout, c.stderr
	fail := func(err error) int {
		fmt.Fprintf(stderr, "\r%-60s\rprocessor bench: %v\n", "", err)
		return 1
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "portcullis-bench-")
		if err != nil {
			return fail(err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	keys, err := bench.NewRivals()
	if err != nil {
		return fail(err)
	}
	cfg, err := keys.Config(dir)
	if err != nil {
		return fail(err)
	}
	defer engine.LimitMemory(cfg)() // as processor run sets it
	ctx := context.Background()
	p, err := engine.Start(ctx, engine.Options{Config: cfg, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return fail(err)
	}
	defer p.Close()
	r, err := bench.Rival(ctx, p.NATSURL(), p.Subjects(), keys, bench.RivalOptions{
		Burst: burst, Rate: rate, Alone: alone, PayloadBytes: payload,
		Progress: func(line string) { fmt.Fprintf(stderr, "\r%-60s", line) },
	})
	if err != nil {
		return fail(err)
	}
	size, err := bench.ProposalOf("alone-000000", payload, bench.VictimHost)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(stderr, "\r%-60s\r", "")
	fmt.Fprintf(stdout, "setup        embedded server, one processor; hosts %s and %s, signed, each in its own ingress streams, consumers and budgets (host_pipeline_max_msgs %d); %d-byte proposals with inline grants; connector over NATS\n",
		bench.VictimHost, bench.RivalHost, cfg.Streams.HostPipelineMaxMsgs, len(size))
	fmt.Fprintf(stdout, "%-14s %8s %10s %10s %10s\n", "", "n", "p50", "p99", "max")
	row := func(name string, ph bench.Phase) {
		fmt.Fprintf(stdout, "%-14s %8d %10s %10s %10s\n", name, ph.Count, ph.Percentile(0.5).Round(100*time.Microsecond),
			ph.Percentile(0.99).Round(100*time.Microsecond), ph.Percentile(1).Round(100*time.Microsecond))
	}
	row("victim alone", r.Alone)
	row("victim during", r.During)
	row("rival burst", r.Burst)
	fmt.Fprintf(stdout, "victim       %d/s, alone for %s, then while the rival's %d proposals (published at once) were answered: %s, %.0f proposals/s\n",
		rate, alone, burst, r.Burst.Elapsed.Round(time.Millisecond), r.Burst.Throughput())
	a99, d99 := r.Alone.Percentile(0.99), r.During.Percentile(0.99)
	if a99 > 0 {
		fmt.Fprintf(stdout, "p50 ratio %.2f\n", float64(r.During.Percentile(0.5))/float64(r.Alone.Percentile(0.5)))
		fmt.Fprintf(stdout, "p99 ratio %.2f\n", float64(d99)/float64(a99))
	}
	bound := 2*a99 + 50*time.Millisecond
	verdict := "met"
	if d99 > bound {
		verdict = "NOT met"
	}
	fmt.Fprintf(stdout, "goal         victim p99 during ≤ 2 × p99 alone + 50ms: %s ≤ %s: %s\n", d99.Round(100*time.Microsecond), bound.Round(100*time.Microsecond), verdict)
	if f := r.Alone.Failed + r.During.Failed + r.Burst.Failed; f > 0 {
		fmt.Fprintf(stdout, "NOT CONFIRMED %d\n", f)
		return 1
	}
	return 0
}
