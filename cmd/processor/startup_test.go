package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/testenv"
)

// runBinary runs the processor binary with args in dir until it exits (or
// the hang guard cancels it) and returns its exit code and output.
func runBinary(t *testing.T, dir string, args ...string) (int, string) {
	t.Helper()
	code, out, _ := runTimed(t, dir, args...)
	return code, out
}

// failFast is the time bound of a failure that must come "at once": well
// under the waits it replaces (the operator commands' 30 s request
// timeout, the embedded server's 10 s start), generous for a loaded
// machine. Tests log what they measured.
const failFast = 8 * time.Second

// runTimed is runBinary, also returning how long the process ran (logged).
func runTimed(t *testing.T, dir string, args ...string) (int, string, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.ProcessorBinary(t), args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("processor %v hung:\n%s", args, out.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	t.Logf("processor %s: exit %d after %s", strings.Join(args, " "), code, took.Round(time.Millisecond))
	return code, out.String(), took
}

// startProcessor starts the processor binary with args in dir and waits
// until its output says ready; it is killed when the test ends.
func startProcessor(t *testing.T, dir, ready string, args ...string) (*exec.Cmd, *testenv.LogBuffer) {
	t.Helper()
	cmd := exec.Command(testenv.ProcessorBinary(t), args...)
	cmd.Dir = dir
	out := &testenv.LogBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	out.Wait(t, ready)
	return cmd, out
}

// busy holds a loopback port for the test and returns its address.
func busy(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// freeAddr is a loopback address nobody listens on (reserved, then released).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// Every startup failure is reported as one line saying what failed, with
// exit status 1, at once: no panic, no hang, no stack (issue: a port in use
// hung 30 s and then panicked in teardown; a bad metrics.listen panicked;
// an unreachable server panicked).
func TestStartupFailuresAreOneLine(t *testing.T) {
	dir := t.TempDir()
	writeConfig := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	badKey := writeConfig("badkey.hcl", "store {\n  dir = \""+filepath.Join(dir, "s1")+"\"\n}\ninternal {\n  key_file = \""+writeConfig("internal.key", "not hex\n")+"\"\n}\nnats {\n  listen = \"127.0.0.1:0\"\n  store_dir = \""+filepath.Join(dir, "n1")+"\"\n}\nmetrics {\n  listen = \"\"\n}\n")
	// A store_dir under a regular file: JetStream cannot make its
	// directory (running as root, a directory without write permission
	// would not stop it; the cause is reported the same way).
	notDir := writeConfig("file", "")
	badStore := writeConfig("badstore.hcl", "nats {\n  listen = \"127.0.0.1:0\"\n  store_dir = \""+filepath.Join(notDir, "nats")+"\"\n}\nstore {\n  dir = \""+filepath.Join(dir, "s3")+"\"\n}\nmetrics {\n  listen = \"\"\n}\n")
	unreachable := writeConfig("remote.hcl", "nats {\n  url = \"nats://"+freeAddr(t)+"\"\n}\nstore {\n  dir = \""+filepath.Join(dir, "s2")+"\"\n}\nmetrics {\n  listen = \"\"\n}\n")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"nats port in use", []string{"run", "--dev", "--data", filepath.Join(dir, "d1"), "--listen", busy(t), "--metrics-listen", ""}, `nats\.listen .*address already in use`},
		{"metrics port in use", []string{"run", "--dev", "--data", filepath.Join(dir, "d2"), "--listen", "127.0.0.1:0", "--metrics-listen", busy(t)}, `metrics\.listen .*address already in use`},
		{"unreachable server", []string{"run", "--config", unreachable}, `connect to NATS at nats://127\.0\.0\.1:\d+: .*no servers available`},
		// The configuration check's file:line, as validate says it.
		{"bad internal key file", []string{"run", "--config", badKey}, `badkey\.hcl:5,14-\d+: Unusable file for key_file; .*64 hex`},
		// The reason, at once (it used to wait 10 s and say only "did not
		// start within 10s"): the directory for the store's lock cannot
		// be made.
		{"nats store_dir unusable", []string{"run", "--config", badStore}, `embedded nats on 127\.0\.0\.1:0 \(store_dir .*/file/nats\): mkdir .*: not a directory`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, took := runTimed(t, dir, tc.args...)
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			if took > failFast {
				t.Errorf("took %s, want at once (under %s)", took, failFast)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "processor run: ") || !regexp.MustCompile(tc.want).MatchString(last) {
				t.Errorf("last line %q does not match %q:\n%s", last, tc.want, out)
			}
			if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
				t.Errorf("output has a panic:\n%s", out)
			}
			for _, l := range lines[:len(lines)-1] {
				if !strings.HasPrefix(l, "{") { // only structured log lines before the error
					t.Errorf("unexpected line before the error: %q", l)
				}
			}
		})
	}
}

// A second processor on a port the first one holds fails at once with one
// line; the first keeps running.
func TestSecondProcessorOnTheSamePort(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	first, _ := startProcessor(t, dir, "Portcullis is running", "run", "--dev", "--data", filepath.Join(dir, "a"), "--listen", addr, "--metrics-listen", "")
	code, second := runBinary(t, dir, "run", "--dev", "--data", filepath.Join(dir, "b"), "--listen", addr, "--metrics-listen", "")
	if code != 1 || !strings.Contains(second, "address already in use") {
		t.Fatalf("second processor: exit %d:\n%s", code, second)
	}
	if first.ProcessState != nil {
		t.Fatal("the first processor exited")
	}
}

// A second processor on the store.dir the first one holds fails at once,
// saying so and naming the first by its pid, before it starts an embedded
// server on the same NATS store (issue 23: "kv: open data/store: resource
// temporarily unavailable", after the second server had started).
func TestSecondProcessorOnTheSameStore(t *testing.T) {
	dir := t.TempDir()
	first, _ := startProcessor(t, dir, "Portcullis is running", "run", "--dev", "--data", "d", "--listen", "127.0.0.1:0", "--metrics-listen", "")
	code, second, took := runTimed(t, dir, "run", "--dev", "--data", "d", "--listen", "127.0.0.1:0", "--metrics-listen", "")
	want := fmt.Sprintf("processor run: kv: store directory in use: d/store is held by another processor (pid %d): stop it, or give this processor a store.dir of its own\n", first.Process.Pid)
	if code != 1 || !strings.HasSuffix(second, want) {
		t.Fatalf("second processor: exit %d:\n%s\nwant the last line %q", code, second, want)
	}
	if took > failFast {
		t.Errorf("took %s, want at once (under %s)", took, failFast)
	}
	if strings.Contains(second, "Portcullis is running") || first.ProcessState != nil {
		t.Fatal("the second processor started, or the first one exited")
	}
}

// run --dev takes --listen and --metrics-listen; the banner says where it
// listens, that authentication is off, and which providers exist.
func TestRunDevAddresses(t *testing.T) {
	dir := t.TempDir()
	_, out := startProcessor(t, dir, "Ctrl-C stops", "run", "--dev", "--data", filepath.Join(dir, "d"), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	for _, want := range []string{"NATS JetStream: nats://127.0.0.1:", "metrics:        http://127.0.0.1:", "providers:      demo", "no NATS authentication", "actions.proposals.<h>", "NATS AUTHENTICATION IS OFF"} {
		if !bytes.Contains(out.Bytes(), []byte(want)) {
			t.Errorf("banner lacks %q:\n%s", want, out.Bytes())
		}
	}
}

func TestRunUsageErrors(t *testing.T) {
	var out, errb bytes.Buffer
	cases := [][]string{
		{"run", "--dev", "extra"},
		{"run", "--config", "x.hcl", "--listen", "127.0.0.1:1"},
		{"run", "--dev", "--listen", "nowhere"},
		{"run"},
		{"run", "--dev", "--log-level", "loud"},
		{"run", "--dev", "--log-level="},
		{"demo", "--verbose", "--log-level", "trace"},
	}
	for _, args := range cases {
		out.Reset()
		errb.Reset()
		if code := run(args, nil, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}
