package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/testenv"
)

// runBinary runs the processor binary with args in dir until it exits (or
// the hang guard cancels it) and returns its exit code and output.
func runBinary(t *testing.T, dir string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.ProcessorBinary(t), args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("processor %v hung:\n%s", args, out.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String()
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
	unreachable := writeConfig("remote.hcl", "nats {\n  url = \"nats://"+freeAddr(t)+"\"\n}\nstore {\n  dir = \""+filepath.Join(dir, "s2")+"\"\n}\nmetrics {\n  listen = \"\"\n}\n")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"nats port in use", []string{"run", "--dev", "--data", filepath.Join(dir, "d1"), "--listen", busy(t), "--metrics-listen", ""}, `nats\.listen .*address already in use`},
		{"metrics port in use", []string{"run", "--dev", "--data", filepath.Join(dir, "d2"), "--listen", "127.0.0.1:0", "--metrics-listen", busy(t)}, `metrics\.listen .*address already in use`},
		{"unreachable server", []string{"run", "--config", unreachable}, `connect to NATS at nats://127\.0\.0\.1:\d+: .*no servers available`},
		{"bad internal key file", []string{"run", "--config", badKey}, `internal\.key_file: .*64 hex`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runBinary(t, dir, tc.args...)
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
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
	first := exec.Command(testenv.ProcessorBinary(t), "run", "--dev", "--data", filepath.Join(dir, "a"), "--listen", addr, "--metrics-listen", "")
	var out testenv.LogBuffer
	first.Stdout, first.Stderr = &out, &out
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Process.Kill(); _ = first.Wait() }()
	out.Wait(t, "Portcullis is running")
	code, second := runBinary(t, dir, "run", "--dev", "--data", filepath.Join(dir, "b"), "--listen", addr, "--metrics-listen", "")
	if code != 1 || !strings.Contains(second, "address already in use") {
		t.Fatalf("second processor: exit %d:\n%s", code, second)
	}
	if first.ProcessState != nil {
		t.Fatal("the first processor exited")
	}
}

// run --dev takes --listen and --metrics-listen; the banner says where it
// listens, that authentication is off, and which providers exist.
func TestRunDevAddresses(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(testenv.ProcessorBinary(t), "run", "--dev", "--data", filepath.Join(dir, "d"), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	var out testenv.LogBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	out.Wait(t, "Ctrl-C stops")
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
