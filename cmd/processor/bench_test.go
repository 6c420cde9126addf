package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestBench runs a small side-by-side bench: both sides complete, every
// proposal is CONFIRMED (a verified share included), and the report has
// its rows and ratio. Numbers are not judged: timing never fails a test.
func TestBench(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	benchOutput(t, []string{
		`^raw +\d+ +\S+ +\S+ +\S+ +`,
		`^portcullis +\d+ +\S+ +\S+ +\S+ +`,
		`^ratio \d+\.\d{3}$`,
	}, "bench", "-n", "60", "-inflight", "20", "-rate", "100", "-duration", "300ms", "-ack-share", "0.5")
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
		`^ portcullis +\S+ +\d+ MiB +[1-9]\d*\.\d +[1-9]\d*\.\d +\d+ +\d+$`,
		`^ratio \d+\.\d{3}$`,
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
		`^portcullis +\d+ +\S+ +\S+ +\S+ +`,
		`^ratio \d+\.\d{3}$`,
	}, "bench", "-cluster", "2", "-n", "40", "-inflight", "20", "-rate", "50", "-duration", "400ms", "-ack-share", "0.5")
}

// benchOutput runs `processor` with args, which must exit 0 with every
// proposal CONFIRMED and an output matching each of wants (multi-line
// regular expressions).
func benchOutput(t *testing.T, wants []string, args ...string) {
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
}
