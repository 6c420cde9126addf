package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/testenv"
)

// refusal runs the processor binary with args in dir and returns what it
// said after its "processor <command>: " prefix, exit 1 expected. A
// command still running after a few seconds (run started although it
// should have refused) is stopped and reported.
func refusal(t *testing.T, dir, command string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.ProcessorBinary(t), append([]string{command}, args...)...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Errorf("processor %s %v did not refuse: it ran until stopped:\n%s", command, args, lastLines(out.String(), 5))
		return "(ran)"
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("processor %s %v: %v, want exit 1:\n%s", command, args, err, out.String())
	}
	msg, ok := strings.CutPrefix(out.String(), "processor "+command+": ")
	if !ok {
		t.Errorf("processor %s %v: output does not start with its refusal:\n%s", command, args, out.String())
	}
	return strings.TrimSpace(msg)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// validate, check --config and run --config share one check: each
// configuration one of them refuses, the others refuse with the same
// file:line message (issue 34: an http:// nats.url passed validate and
// run said "Authorization Violation"; validate refused an empty file but
// run started on the default ports; a second processor on another's
// embedded nats.store_dir started, and validate passed a store.dir another
// processor held).
func TestValidateAndRunAgree(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	conf := func(store, natsStore, extra string) string {
		return fmt.Sprintf("store {\n  dir = %q\n}\nnats {\n  listen = \"127.0.0.1:0\"\n  store_dir = %q\n%s}\nmetrics {\n  listen = \"\"\n}\n", store, natsStore, extra)
	}
	// A running processor holds s1 and n1.
	first := write("first.hcl", conf("s1", "n1", "  auth = false\n"))
	runner, _ := startProcessor(t, dir, "processor started", "run", "--config", first)
	pid := runner.Process.Pid

	cases := []struct {
		name, src string
		want      string // in the message
	}{
		{"http url", "nats {\n  url = \"http://127.0.0.1:9464\"\n}\nstore {\n  dir = \"s9\"\n}\n",
			`c.hcl:2,9-32: Invalid value for url; http://127.0.0.1:9464 is not a NATS server URL: give nats://host:port`},
		{"http url in a list", "nats {\n  url = \"nats://127.0.0.1:4222,https://a:443\"\n}\n", "https://a:443 is not a NATS server URL"},
		{"empty", "", "c.hcl:1,1-1: Configures nothing; it has no blocks or attributes"},
		{"only comments", "# nothing here\n", "Configures nothing"},
		{"nats.store_dir held", conf("s2", "n1", ""),
			fmt.Sprintf("c.hcl:6,15-19: Directory in use; n1 is held by another processor (pid %d): stop it, or give this processor a nats.store_dir of its own", pid)},
		{"store.dir held", conf("s1", "n2", ""),
			fmt.Sprintf("c.hcl:2,9-13: Directory in use; s1 is held by another processor (pid %d): stop it, or give this processor a store.dir of its own", pid)},
		{"missing credentials", "nats {\n  url = \"nats://127.0.0.1:1\"\n  credentials = \"nope.creds\"\n}\n", "c.hcl:3,17-29: Unusable file for credentials; nope.creds (relative to"},
		{"internal key not a key", conf("s3", "n3", "") + "internal {\n  key_file = \"" + write("bad.key", "not hex\n") + "\"\n}\n", "Unusable file for key_file"},
		{"unknown key", "nats {\n  frob = 1\n}\n", `c.hcl:2,3-7: Unsupported argument; An argument named "frob" is not expected here.`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			write("c.hcl", tc.src)
			validate := refusal(t, dir, "validate", "c.hcl")
			run := refusal(t, dir, "run", "--config", "c.hcl")
			check := refusal(t, dir, "check", "--config", "c.hcl", "missing.json")
			if validate != run {
				t.Errorf("validate and run disagree:\nvalidate: %s\nrun:      %s", validate, run)
			}
			if !strings.Contains(validate, tc.want) {
				t.Errorf("validate: %s\nwant it to say %q", validate, tc.want)
			}
			// check opens no store: a running processor's is no problem to it.
			if strings.Contains(tc.name, "held") {
				if !strings.Contains(check, "missing.json") {
					t.Errorf("check refused a configuration only a start cannot use: %s", check)
				}
			} else if check != validate {
				t.Errorf("check and validate disagree:\ncheck:    %s\nvalidate: %s", check, validate)
			}
		})
	}
	if runner.ProcessState != nil {
		t.Fatal("the first processor exited")
	}
}
