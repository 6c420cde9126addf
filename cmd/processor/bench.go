package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/portcullis/portcullis/internal/bench"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
)

// cmdBench measures Portcullis side by side with the bare JetStream work it
// is built from, on one embedded server (package bench says what each side
// does): throughput, latency at a fixed rate, peak RSS, and their ratio.
func cmdBench(c *cmdline, args []string, _ io.Reader) int {
	fs, stdout, stderr := c.fs, c.stdout, c.stderr
	n := fs.Int("n", 5000, "messages in the throughput phase, each side")
	window := fs.Int("inflight", 500, "messages in flight at most in the throughput phase")
	rate := fs.Int("rate", 1000, "messages per second in the latency phase")
	duration := fs.Duration("duration", 5*time.Second, "length of the latency phase")
	payload := fs.Int("payload", 0, "bytes of padding in each proposal's payload")
	ackShare := fs.Float64("ack-share", 0.1, "share of dispatches the connector acknowledges (reconciliation verifies them)")
	syncAlways := fs.Bool("sync-always", false, "embedded server fsyncs every write (nats.sync_always)")
	dir := fs.String("data", "", "data directory (default: a temporary one, removed afterwards)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the Portcullis side to this file")
	mutexProfile := fs.String("mutexprofile", "", "write a mutex contention profile of the Portcullis side to this file")
	memProfile := fs.String("memprofile", "", "write a heap profile (in use at the end, allocations throughout) to this file")
	if _, code, done := c.parse(args); done {
		return code
	}
	if *n < 1 || *window < 1 || *rate < 1 || *duration <= 0 || *payload < 0 || *ackShare < 0 || *ackShare > 1 {
		return c.usageError("-n, -inflight, -rate and -duration must be positive, -payload ≥ 0, -ack-share in [0, 1]")
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
	cfg := config.Dev(*dir)
	cfg.NATS.Listen = "127.0.0.1:0"
	cfg.NATS.SyncAlways = *syncAlways
	cfg.Metrics.Listen = ""
	// Acknowledged dispatches are verified promptly: the first poll is one
	// interval after the receipt.
	cfg.Reconciliation.Interval = 100 * time.Millisecond
	ctx := context.Background()
	p, err := engine.Start(ctx, engine.Options{Config: cfg, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(stderr, "processor bench:", err)
		return 1
	}
	defer p.Close()
	o := bench.Options{Count: *n, Window: *window, Rate: *rate, Duration: *duration, PayloadBytes: *payload, AckShare: *ackShare,
		Progress: func(line string) { fmt.Fprintf(stderr, "\r%-60s", line) }}
	size, err := bench.Proposal("t-000000", *payload)
	if err != nil {
		fmt.Fprintln(stderr, "processor bench:", err)
		return 1
	}
	raw, err := bench.Raw(ctx, p.NATSURL(), len(size), o)
	if err != nil {
		fmt.Fprintln(stderr, "\nprocessor bench:", err)
		return 1
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "processor bench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "processor bench:", err)
			return 1
		}
	}
	if *mutexProfile != "" {
		runtime.SetMutexProfileFraction(5)
	}
	pc, _, err := bench.Pipeline(ctx, p, o)
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	for _, pf := range []struct{ file, name string }{{*mutexProfile, "mutex"}, {*memProfile, "heap"}} {
		if pf.file == "" {
			continue
		}
		if werr := writeProfile(pf.file, pf.name); werr != nil {
			fmt.Fprintln(stderr, "processor bench:", werr)
			return 1
		}
	}
	fmt.Fprintf(stderr, "\r%-60s\r", "")
	if err != nil {
		fmt.Fprintln(stderr, "processor bench:", err)
		return 1
	}
	fmt.Fprintf(stdout, "setup        embedded server, sync_always %v; %d-byte messages; %d in throughput (≤ %d in flight), %d/s for %s in latency\n",
		*syncAlways, len(size), *n, *window, *rate, *duration)
	fmt.Fprintf(stdout, "raw          %d-hop chain: pull, republish async with Nats-Msg-Id, ack after the PubAck\n", bench.Hops)
	fmt.Fprintf(stdout, "portcullis   5 stages, inline grants, connector over NATS, %.0f%% acknowledged then verified\n", *ackShare*100)
	fmt.Fprintf(stdout, "%-12s %12s %10s %10s %10s %10s %10s\n", "", "msg/s", "CPU/msg", "p50", "p99", "max", "peak RSS")
	row := func(name string, s bench.Side) {
		fmt.Fprintf(stdout, "%-12s %12.0f %10s %10s %10s %10s %10s\n", name, s.Throughput.Throughput(), s.Throughput.CPUPerMsg().Round(time.Microsecond),
			s.Latency.Percentile(0.5).Round(10*time.Microsecond), s.Latency.Percentile(0.99).Round(10*time.Microsecond),
			s.Latency.Percentile(1).Round(10*time.Microsecond), mib(s.PeakRSS))
	}
	row("raw", raw)
	row("portcullis", pc)
	fmt.Fprintf(stdout, "ratio %.3f\n", pc.Throughput.Throughput()/raw.Throughput.Throughput())
	if c := pc.Throughput.CPUPerMsg(); c > 0 {
		fmt.Fprintf(stdout, "CPU ratio %.2f (raw CPU per message over Portcullis CPU per proposal)\n", float64(raw.Throughput.CPUPerMsg())/float64(c))
	}
	if r := raw.Latency.Percentile(0.99); r > 0 {
		fmt.Fprintf(stdout, "p99 ratio %.2f\n", float64(pc.Latency.Percentile(0.99))/float64(r))
	}
	if f := pc.Throughput.Failed + pc.Latency.Failed; f > 0 {
		fmt.Fprintf(stdout, "NOT CONFIRMED %d\n", f)
		return 1
	}
	return 0
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
