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
	code, out, errOut := runArgs("bench", "-n", "60", "-inflight", "20", "-rate", "100", "-duration", "300ms", "-ack-share", "0.5")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^raw +\d+ +\S+ +\S+ +\S+ +`),
		regexp.MustCompile(`(?m)^portcullis +\d+ +\S+ +\S+ +\S+ +`),
		regexp.MustCompile(`(?m)^ratio \d+\.\d{3}$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "NOT CONFIRMED") {
		t.Errorf("some proposals did not end CONFIRMED:\n%s", out)
	}
}

// TestBenchQueued queues a small backlog before the processor starts and
// drains it: every proposal CONFIRMED, the drain and peak RSS reported.
func TestBenchQueued(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	code, out, errOut := runArgs("bench", "-queued", "200", "-inflight", "50", "-ack-share", "0.5")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^queue +200 published `),
		regexp.MustCompile(`(?m)^drain +200 in \S+: \d+ proposals/s`),
		regexp.MustCompile(`(?m)^peak RSS +\d+ MiB during the drain`),
	} {
		if !want.MatchString(out) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "NOT CONFIRMED") {
		t.Errorf("some proposals did not end CONFIRMED:\n%s", out)
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
	code, out, errOut := runArgs("bench", "-nats-process", "-n", "60", "-inflight", "20", "-rate", "100", "-duration", "300ms", "-ack-share", "0.5")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^setup .*in a process of its own`),
		regexp.MustCompile(`(?m)^portcullis +\d+ +\S+ +\S+ +\S+ +\S+ +\d+ MiB$`),
		regexp.MustCompile(`(?m)^ raw +\S+ +\d+ MiB +[1-9]\d*\.\d +[1-9]\d*\.\d +\d+ +\d+$`),
		regexp.MustCompile(`(?m)^ portcullis +\S+ +\d+ MiB +[1-9]\d*\.\d +[1-9]\d*\.\d +\d+ +\d+$`),
		regexp.MustCompile(`(?m)^ratio \d+\.\d{3}$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	code, out, errOut = runArgs("bench", "-nats-process", "-queued", "200", "-inflight", "50", "-ack-share", "0.5")
	if code != 0 {
		t.Fatalf("queued: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^drain +200 in \S+: \d+ proposals/s`),
		regexp.MustCompile(`(?m)^nats-server +peak RSS \d+ MiB during the drain, CPU/msg \S+, [1-9]\d*\.\d messages in`),
	} {
		if !want.MatchString(out) {
			t.Errorf("queued: output lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "NOT CONFIRMED") {
		t.Errorf("some proposals did not end CONFIRMED:\n%s", out)
	}
}

// TestBenchCluster runs both sides on a three-server cluster with two
// processors sharing the stages: every proposal CONFIRMED.
func TestBenchCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster")
	}
	code, out, errOut := runArgs("bench", "-cluster", "2", "-n", "40", "-inflight", "20", "-rate", "50", "-duration", "400ms", "-ack-share", "0.5")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^setup .*cluster.*2 processor`),
		regexp.MustCompile(`(?m)^raw +\d+ +\S+ +\S+ +\S+ +`),
		regexp.MustCompile(`(?m)^portcullis +\d+ +\S+ +\S+ +\S+ +`),
		regexp.MustCompile(`(?m)^ratio \d+\.\d{3}$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "NOT CONFIRMED") {
		t.Errorf("some proposals did not end CONFIRMED:\n%s", out)
	}
}
