package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/testenv"
)

// quickStart is the command block of docs/running.md's "Quick start", one
// command per line, comments dropped.
func quickStart(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/running.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "\n## Quick start")
	if !ok {
		t.Fatal("docs/running.md has no Quick start section")
	}
	_, block, ok := strings.Cut(rest, "```sh\n")
	if !ok {
		t.Fatal("the Quick start has no sh block")
	}
	block, _, _ = strings.Cut(block, "```")
	var cmds []string
	for _, l := range strings.Split(block, "\n") {
		if c, _, _ := strings.Cut(l, "#"); strings.TrimSpace(c) != "" {
			cmds = append(cmds, strings.TrimSpace(c))
		}
	}
	return cmds
}

// docs/running.md's quick start works as written, in an empty directory:
// the build (here: the processor the tests built, copied to ./processor),
// init, run with authentication on, a host proposing and approving with
// its key (NEEDS_APPROVAL, then CONFIRMED), the operator's view with its
// key; and the same proposal again is answered as recorded earlier. The
// one change: init gets free ports (--listen, --metrics-listen), so that
// the test runs beside anything.
func TestQuickStart(t *testing.T) {
	cmds := quickStart(t)
	want := []string{"go build ./cmd/processor", "./processor init", "./processor run --config portcullis.hcl",
		"./processor propose --config portcullis.hcl --nkey host.nk --approve proposal.json",
		"./processor activity list --config portcullis.hcl --nkey operator.nk"}
	if strings.Join(cmds, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the quick start changed; update this test with it:\n%s", strings.Join(cmds, "\n"))
	}
	dir := t.TempDir()
	bin, err := os.ReadFile(testenv.ProcessorBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "processor"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	sh := func(line string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-c", line)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		t.Logf("$ %s\n%s", line, out)
		return string(out)
	}
	initOut := sh(cmds[1] + " --listen " + freeAddr(t) + " --metrics-listen " + freeAddr(t))
	for _, next := range cmds[2:] {
		if !strings.Contains(initOut, strings.TrimPrefix(next, "./")) && !strings.Contains(initOut, next) {
			t.Errorf("init does not print the next command %q:\n%s", next, initOut)
		}
	}
	src, err := os.ReadFile(filepath.Join(dir, "portcullis.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), "\n"); n > 30 {
		t.Errorf("portcullis.hcl has %d lines: not a small start", n)
	}
	for _, f := range []string{"host.nk", "operator.nk"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", f, fi.Mode(), err)
		}
	}
	// Terminal 1.
	run := exec.Command("sh", "-c", "exec "+cmds[2])
	run.Dir = dir
	var log testenv.LogBuffer
	run.Stdout, run.Stderr = &log, &log
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run.Process.Kill(); _ = run.Wait() })
	log.Wait(t, "processor started")
	if bytes.Contains(log.Bytes(), []byte("AUTHENTICATION IS OFF")) || bytes.Contains(log.Bytes(), []byte("UNSIGNED")) {
		t.Errorf("the quick start runs without authentication:\n%s", log.Bytes())
	}
	// Terminal 2.
	proposed := sh(cmds[3])
	for _, w := range []string{"outcome: NEEDS_APPROVAL", "granted as actor:demo", "outcome: CONFIRMED (PRESENT, terminal)"} {
		if !strings.Contains(proposed, w) {
			t.Errorf("propose does not say %q", w)
		}
	}
	if strings.Contains(proposed, "recorded earlier") {
		t.Error("the first proposal's own dispatch is said recorded earlier")
	}
	fp := regexp.MustCompile(`fingerprint (sha256:[0-9a-f]{64})`).FindStringSubmatch(proposed)
	if fp == nil {
		t.Fatalf("propose names no fingerprint")
	}
	if listed := sh(cmds[4]); !strings.Contains(listed, fp[1]) || !strings.Contains(listed, "confirmed") {
		t.Errorf("activity list does not show %s confirmed", fp[1])
	}
	again := sh(cmds[3])
	if !strings.Contains(again, "outcome: CONFIRMED") || !strings.Contains(again, "recorded earlier") {
		t.Errorf("the same intent again is not answered as recorded earlier:\n%s", again)
	}
	if pub := sh("./processor keygen --public host.nk"); !strings.Contains(string(src), strings.TrimSpace(pub)) {
		t.Errorf("keygen --public host.nk = %s, not the host block's public_key", pub)
	}
	if run.ProcessState != nil {
		t.Fatalf("the processor exited:\n%s", log.Bytes())
	}
}
