package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/metrics/version"
	"github.com/portcullis/portcullis/schema"
)

func runArgs(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, bytes.NewReader(nil), &out, &errb)
	return code, out.String(), errb.String()
}

// strayArgs gives, for every command that runs, arguments it accepts
// with one argument too many ("stray") among them.
var strayArgs = map[string][]string{
	"init":              {"stray"},
	"propose":           {"--config", "x.hcl", "a.json", "stray"},
	"run":               {"--dev", "stray"},
	"validate":          {"a.hcl", "stray"},
	"bench":             {"stray", "-n", "1"},
	"fingerprint":       {"a.json", "stray"},
	"check":             {"a.json", "stray", "-o", "json"},
	"demo":              {"stray"},
	"console":           {"--dev", "stray"},
	"mcp":               {"--dev", "stray"},
	"receipts get":      {"sha256:" + strings.Repeat("ab", 32), "stray"},
	"activity get":      {"frontdesk/prop-1", "stray"},
	"activity list":     {"stray"},
	"approvals list":    {"--limit", "5", "stray"},
	"proposals get":     {"frontdesk", "prop-1", "stray"},
	"reconcile list":    {"stray"},
	"reconcile resolve": {strings.Repeat("ab", 32), "stray", "--present", "--evidence", "t:1"},
	"keygen":            {"host", "stray", "--stdout"},
	"nats-permissions":  {"--config", "x.hcl", "stray"},
	"migrate":           {"--config", "x.hcl", "stray"},
	"version":           {"stray"},
	"help":              {"run", "stray"},
}

// TestEveryCommandHelpAndStrayArguments: every command, and every group of
// subcommands, prints its usage on standard output with exit 0 for --help
// and -h (and for `processor help <command>`), and refuses a stray
// positional argument with exit 2 before doing anything.
func TestEveryCommandHelpAndStrayArguments(t *testing.T) {
	paths := leaves(commands(), "")
	groups := []string{}
	for _, c := range commands() {
		if c.run == nil {
			groups = append(groups, c.name)
		}
	}
	if len(paths) < 16 || len(groups) < 5 {
		t.Fatalf("commands %q, groups %q", paths, groups)
	}
	for _, path := range append(append([]string{}, paths...), groups...) {
		words := strings.Fields(path)
		for _, h := range []string{"--help", "-h"} {
			code, out, errs := runArgs(append(words, h)...)
			if code != 0 || out == "" || errs != "" {
				t.Errorf("%s %s: exit %d, stdout %d bytes, stderr %q", path, h, code, len(out), errs)
			}
			if !strings.HasPrefix(out, "usage: processor "+path) {
				t.Errorf("%s %s: stdout begins %q", path, h, strings.SplitN(out, "\n", 2)[0])
			}
		}
		viaHelp, out, errs := runArgs(append([]string{"help"}, words...)...)
		_, direct, _ := runArgs(append(words, "-h")...)
		if viaHelp != 0 || out != direct || errs != "" {
			t.Errorf("help %s: exit %d, stderr %q, same as -h: %v", path, viaHelp, errs, out == direct)
		}
	}
	for _, path := range paths {
		args, ok := strayArgs[path]
		if !ok {
			t.Errorf("%s: no stray-argument case", path)
			continue
		}
		code, out, errs := runArgs(append(strings.Fields(path), args...)...)
		if code != 2 || out != "" || !strings.Contains(errs, `unexpected argument "stray"`) || !strings.Contains(errs, "usage: processor "+path) {
			t.Errorf("%s with a stray argument: exit %d, stdout %q, stderr %q", path, code, out, errs)
		}
	}
	for _, g := range groups {
		if code, out, errs := runArgs(g, "stray"); code != 2 || out != "" || !strings.Contains(errs, `unknown command "stray"`) || !strings.Contains(errs, "usage: processor "+g+" ") {
			t.Errorf("%s stray: exit %d, stdout %q, stderr %q", g, code, out, errs)
		}
		if code, out, errs := runArgs(g); code != 2 || out != "" || !strings.Contains(errs, "usage: processor "+g+" ") {
			t.Errorf("%s alone: exit %d, stdout %q, stderr %q", g, code, out, errs)
		}
	}
	// The top level.
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		code, out, errs := runArgs(args...)
		if code != 0 || errs != "" || !strings.Contains(out, "usage: processor <command>") || !strings.Contains(out, "approvals list") {
			t.Errorf("%q: exit %d, stderr %q", args, code, errs)
		}
	}
	if code, out, errs := runArgs(); code != 2 || out != "" || !strings.Contains(errs, "usage: processor") {
		t.Errorf("no command: exit %d, stdout %q", code, out)
	}
	for _, args := range [][]string{{"frobnicate"}, {"help", "frobnicate"}, {"help", "receipts", "frob"}} {
		if code, out, _ := runArgs(args...); code != 2 || out != "" {
			t.Errorf("%q: exit %d, stdout %q", args, code, out)
		}
	}
	// -h anywhere among the arguments; "--" ends the flags.
	if code, out, _ := runArgs("receipts", "get", "frontdesk/p", "--url", "nats://127.0.0.1:1", "-h"); code != 0 || !strings.HasPrefix(out, "usage: processor receipts get") {
		t.Errorf("-h after arguments: exit %d", code)
	}
	if code, _, errs := runArgs("reconcile", "list", "--", "--url"); code != 2 || !strings.Contains(errs, `unexpected argument "--url"`) {
		t.Errorf("after --: exit %d, %q", code, errs)
	}
}

func TestVersion(t *testing.T) {
	code, out, errs := runArgs("version")
	v := version.Get()
	if code != 0 || errs != "" || !strings.HasPrefix(out, "processor "+v.Version+"\n") || !strings.Contains(out, "revision  "+v.Revision) ||
		!strings.Contains(out, "time      "+v.Time) || !strings.Contains(out, "go        "+v.GoVersion) {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	for _, args := range [][]string{{"version", "-o", "json"}, {"version", "--json"}} {
		code, out, _ = runArgs(args...)
		var got version.Info
		if err := schema.Decode([]byte(strings.TrimSpace(out)), &got); code != 0 || err != nil || got != v {
			t.Errorf("%q: exit %d, %+v %v", args, code, got, err)
		}
	}
	if code, _, errs := runArgs("version", "-o", "yaml"); code != 2 || !strings.Contains(errs, "text and json") {
		t.Errorf("-o yaml: exit %d, %q", code, errs)
	}
	// --version is what other tools take: the same output.
	_, want, _ := runArgs("version")
	for _, args := range [][]string{{"--version"}, {"-version"}} {
		if code, out, errs := runArgs(args...); code != 0 || out != want || errs != "" {
			t.Errorf("%q: exit %d, stdout %q (want %q), stderr %q", args, code, out, want, errs)
		}
	}
	if code, out, _ := runArgs("--version", "-o", "json"); code != 0 || !strings.HasPrefix(out, "{") {
		t.Errorf("--version -o json: exit %d, %q", code, out)
	}
}

// TestValidateForms: the file as the argument or as --config; every
// problem of a bad file, sorted.
func TestValidateForms(t *testing.T) {
	example := "../../config.example.hcl"
	for _, args := range [][]string{{"validate", example}, {"validate", "--config", example}, {"validate", example, "--config", example}} {
		if code, out, errs := runArgs(args...); code != 0 || out != example+": ok\n" {
			t.Errorf("%q: exit %d, %q %q", args, code, out, errs)
		}
	}
	if code, _, errs := runArgs("validate", example, "--config", "other.hcl"); code != 2 || !strings.Contains(errs, "give the file once") {
		t.Errorf("two files: exit %d, %q", code, errs)
	}
	bad := filepath.Join(t.TempDir(), "bad.hcl")
	os.WriteFile(bad, []byte("approval {\n  ttl = \"soon\"\n}\nnats {\n  replicas = \"three\"\n  frob = 1\n}\ngrounding {\n  max_candidates = 0\n}\n"), 0o600)
	code, out, errs := runArgs("validate", bad)
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	if code != 1 || out != "" || len(lines) != 4 {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s", code, out, errs)
	}
	for i, want := range []string{"bad.hcl:2,", "bad.hcl:5,", "bad.hcl:6,", "bad.hcl:9,"} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d %q lacks %q", i+1, lines[i], want)
		}
	}
}

// TestFailurePrefix: every line a failing command prints on standard error
// starts with "processor <command>: " — a configuration's diagnostics (one
// per line), a missing file, a refused key file — whichever command read
// it (issue 23: `config: open …` without the command, `processor keygen:
// keygen host: …`, run --config's diagnostics bare).
func TestFailurePrefix(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.hcl")
	if err := os.WriteFile(bad, []byte("nats {\n  listen = 4222\n  frob = 1\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.hcl")
	existing := filepath.Join(dir, "existing.nk")
	if err := os.WriteFile(existing, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		cmd  string
		args []string
		want string // in stderr
	}{
		{"validate", []string{"validate", missing}, "no such file"},
		{"validate", []string{"validate", bad}, "bad.hcl:3,"},
		{"run", []string{"run", "--config", missing}, "no such file"},
		{"run", []string{"run", "--config", bad}, "bad.hcl:2,"},
		{"check", []string{"check", "--config", bad, "../../examples/proposal.json"}, "bad.hcl:3,"},
		{"nats-permissions", []string{"nats-permissions", "--config", bad}, "bad.hcl:3,"},
		{"keygen", []string{"keygen", "host", "--out", existing}, "already exists"},
	}
	for _, c := range cases {
		code, out, errs := runArgs(c.args...)
		if code != 1 || out != "" || !strings.Contains(errs, c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q (want exit 1 and %q)", c.args, code, out, errs, c.want)
			continue
		}
		for _, line := range strings.Split(strings.TrimSuffix(errs, "\n"), "\n") {
			if !strings.HasPrefix(line, "processor "+c.cmd+": ") || strings.Contains(line, c.cmd+": "+c.cmd) {
				t.Errorf("%q: line %q does not start with %q once", c.args, line, "processor "+c.cmd+": ")
			}
		}
	}
}

// TestValidateFilesAndEmpty: validate says which named file is missing or
// wrong (file:line of its attribute) and that an empty file configures
// nothing, exit 1, at once (issue 23: both were "ok").
func TestValidateFilesAndEmpty(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "processor.nk")
	remote := filepath.Join(dir, "remote.hcl")
	if err := os.WriteFile(remote, []byte("nats {\n  url         = \"nats://127.0.0.1:4222\"\n  credentials = \""+missing+"\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.hcl")
	if err := os.WriteFile(empty, []byte("# nothing yet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file, want string
	}{
		{remote, "processor validate: " + remote + ":3,17-" + fmt.Sprint(17+len(missing)+2) + ": Unusable file for credentials; " + missing + " does not exist\n"},
		{empty, "processor validate: " + empty + ":1,1-1: Configures nothing; it has no blocks or attributes, so every key takes its default (config.example.hcl shows them all; processor init writes a small one)\n"},
	} {
		start := time.Now()
		code, out, errs := runArgs("validate", c.file)
		took := time.Since(start)
		t.Logf("validate %s: exit %d after %s", filepath.Base(c.file), code, took)
		if code != 1 || out != "" || errs != c.want {
			t.Errorf("validate %s: exit %d, stdout %q, stderr %q; want exit 1 and %q", c.file, code, out, errs, c.want)
		}
		if took > failFast {
			t.Errorf("validate %s took %s", c.file, took)
		}
	}
}
