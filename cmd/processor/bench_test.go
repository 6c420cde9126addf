package main

import (
	"github.com/portcullis/portcullis/internal/config"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestBench runs a small side-by-side bench: the three columns complete
// (raw chain, contract floor, Portcullis), every proposal is CONFIRMED (a
// verified share included), and the report has a row per column and the
// ratio lines, each a positive finite number. Numbers are not judged:
// timing never fails a test.
func TestBench(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	out := benchOutput(t, []string{
		`^raw +[1-9]\d* +\S+ +\S+ +\S+ +`,
		`^floor +[1-9]\d* +\S+ +\S+ +\S+ +`,
		`^portcullis +[1-9]\d* +\S+ +\S+ +\S+ +`,
		`^floor_bound +floor CPU/proposal \S+ = \d+\.\d\d× raw CPU/msg`,
	}, "bench", "-n", "300", "-inflight", "50", "-rate", "100", "-duration", "500ms", "-ack-share", "0.5")
	saneLines(t, out, "ratio", "floor_ratio", "floor_cpu_ratio")
}

// TestBenchFloor runs the contract floor alone beside the raw chain
// (-floor): both rows and the floor's CPU against the raw chain's, and no
// Portcullis side.
func TestBenchFloor(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the floor")
	}
	out := benchOutput(t, []string{
		`^raw +[1-9]\d* +\S+ +\S+ +\S+ +`,
		`^floor +[1-9]\d* +\S+ +\S+ +\S+ +`,
		`^floor_bound +floor CPU/proposal \S+ = \d+\.\d\d× raw CPU/msg`,
	}, "bench", "-floor", "-n", "300", "-inflight", "50", "-rate", "100", "-duration", "500ms")
	if regexp.MustCompile(`(?m)^(portcullis|floor_ratio|ratio) `).MatchString(out) {
		t.Errorf("-floor ran the Portcullis side:\n%s", out)
	}
}

// saneLines checks that out has each line "<name> <number>" with a
// positive, finite number.
func saneLines(t *testing.T, out string, names ...string) {
	t.Helper()
	for _, name := range names {
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("output lacks the line %q:\n%s", name, out)
			continue
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil || v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			t.Errorf("%s %s: not a positive finite number", name, m[1])
		}
	}
}

// TestBenchQueued queues a small backlog before the processor starts and
// drains it: every proposal CONFIRMED, the drain and peak RSS reported.
func TestBenchQueued(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	benchOutput(t, []string{
		`^queue +200 published `,
		`^drain +200 in \S+: \d+ proposals/s`,
		`^peak RSS +\d+ MiB during the drain`,
	}, "bench", "-queued", "200", "-inflight", "50", "-ack-share", "0.5")
}

// TestBenchRival runs the fairness bench (-rival): the victim's rows alone
// and during the rival's burst, the rival's, the ratios and the goal's
// verdict, every proposal confirmed.
func TestBenchRival(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	out := benchOutput(t, []string{
		`^victim alone +[1-9]\d* +\S+ +\S+ +\S+$`,
		`^victim during +[1-9]\d* +\S+ +\S+ +\S+$`,
		`^rival burst +200 +\S+ +\S+ +\S+$`,
		`^goal +victim p99 during ≤ 2 × p99 alone \+ 50ms: \S+ ≤ \S+: (met|NOT met)$`,
	}, "bench", "-rival", "200", "-victim-rate", "20", "-duration", "500ms")
	saneLines(t, out, "p50 ratio", "p99 ratio")
	if strings.Contains(out, "NOT CONFIRMED") {
		t.Errorf("a proposal was not confirmed:\n%s", out)
	}
}

// TestBenchNATSProcess runs both bench forms with the nats-server in a
// child process: every proposal CONFIRMED, and the server's own CPU, peak
// RSS and message counts reported beside the processor's.
func TestBenchNATSProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	t.Setenv(runMainEnv, "1") // the child is this test binary, as the processor
	benchOutput(t, []string{
		`^setup .*in a process of its own`,
		`^portcullis +\d+ +\S+ +\S+ +\S+ +\S+ +\d+ MiB$`,
		`^ raw +\S+ +\d+ MiB +[1-9]\d*\.\d +[1-9]\d*\.\d +\d+ +\d+$`,
		`^ floor +\S+ +\d+ MiB +[1-9]\d*\.\d +[1-9]\d*\.\d +\d+ +\d+$`,
		`^ portcullis +\S+ +\d+ MiB +[1-9]\d*\.\d +[1-9]\d*\.\d +\d+ +\d+$`,
		`^floor_bound .*\(this process \+ nats-server;`,
		`^ratio \d+\.\d{3}$`,
		`^floor_ratio \d+\.\d{3}$`,
		`^floor_cpu_ratio \d+\.\d{3}$`,
	}, "bench", "-nats-process", "-n", "60", "-inflight", "20", "-rate", "100", "-duration", "300ms", "-ack-share", "0.5")
	benchOutput(t, []string{
		`^drain +200 in \S+: \d+ proposals/s`,
		`^nats-server +peak RSS \d+ MiB during the drain, CPU/msg \S+, [1-9]\d*\.\d messages in`,
	}, "bench", "-nats-process", "-queued", "200", "-inflight", "50", "-ack-share", "0.5")
}

// TestBenchCluster runs both sides on a three-server cluster with two
// processors sharing the stages: every proposal CONFIRMED.
func TestBenchCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster")
	}
	benchOutput(t, []string{
		`^setup .*cluster.*2 processor`,
		`^raw +\d+ +\S+ +\S+ +\S+ +`,
		`^floor +\d+ +\S+ +\S+ +\S+ +`,
		`^portcullis +\d+ +\S+ +\S+ +\S+ +`,
		`^ratio \d+\.\d{3}$`,
		`^floor_ratio \d+\.\d{3}$`,
	}, "bench", "-cluster", "2", "-n", "40", "-inflight", "20", "-rate", "50", "-duration", "400ms", "-ack-share", "0.5")
}

// benchOutput runs `processor` with args, which must exit 0 with every
// proposal CONFIRMED and an output matching each of wants (multi-line
// regular expressions), and returns the output.
func benchOutput(t *testing.T, wants []string, args ...string) string {
	t.Helper()
	code, out, errOut := runArgs(args...)
	if code != 0 {
		t.Fatalf("%s: exit %d\n%s\n%s", strings.Join(args, " "), code, out, errOut)
	}
	for _, want := range wants {
		if !regexp.MustCompile("(?m)" + want).MatchString(out) {
			t.Errorf("%s: output lacks %s:\n%s", strings.Join(args, " "), want, out)
		}
	}
	if strings.Contains(out, "NOT CONFIRMED") {
		t.Errorf("some proposals did not end CONFIRMED:\n%s", out)
	}
	return out
}

// A backlog larger than a host's ingress budget fits: the bench raises the
// budget to the backlog (the default 10,000 refused 90,000 of -queued
// 100000: "proposals not stored").
func TestQueuedIngress(t *testing.T) {
	cfg := config.Dev(t.TempDir())
	queuedIngress(cfg, 100_000)
	if cfg.Streams.IngressMaxMsgs < 100_000 || cfg.Streams.IngressMaxBytes < 100_000*int64(cfg.Admission.MaxPayloadBytes) {
		t.Errorf("ingress budget %d msgs, %d bytes: too small for 100,000 proposals", cfg.Streams.IngressMaxMsgs, cfg.Streams.IngressMaxBytes)
	}
	small := config.Dev(t.TempDir())
	queuedIngress(small, 10)
	if small.Streams.IngressMaxMsgs != config.DefaultIngressMaxMsgs {
		t.Errorf("a small backlog changed the budget: %d", small.Streams.IngressMaxMsgs)
	}
}
