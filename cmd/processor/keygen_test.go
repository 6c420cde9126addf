package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/schema/keyfile"
)

func runProcessor(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, bytes.NewReader(nil), &out, &errb)
	return code, out.String(), errb.String()
}

func fileMode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestKeygenOut(t *testing.T) {
	for _, kind := range keygenKinds {
		for _, order := range []string{"kind first", "flags first"} {
			t.Run(kind+"/"+order, func(t *testing.T) {
				p := filepath.Join(t.TempDir(), kind+".nk")
				args := []string{"keygen", kind, "--out", p}
				if order == "flags first" {
					args = []string{"keygen", "--out", p, kind}
				}
				code, out, errs := runProcessor(args...)
				if code != 0 {
					t.Fatalf("exit %d: %s", code, errs)
				}
				pub := strings.TrimSuffix(out, "\n")
				if strings.Contains(pub, "\n") || !nkeys.IsValidPublicUserKey(pub) {
					t.Fatalf("stdout %q is not one public user key", out)
				}
				if m := fileMode(t, p); m != 0o600 {
					t.Errorf("seed file mode %v", m)
				}
				kp, err := keyfile.LoadSeed(p)
				if err != nil {
					t.Fatal(err)
				}
				if got, _ := kp.PublicKey(); got != pub {
					t.Errorf("seed file's key %s, printed %s", got, pub)
				}
				seed, _ := kp.Seed()
				if strings.Contains(errs, string(seed)) || strings.Contains(out, string(seed)) || !strings.Contains(errs, p) {
					t.Errorf("stderr %q: must name the file and never show the seed", errs)
				}
			})
		}
	}
}

func TestKeygenStdout(t *testing.T) {
	code, out, errs := runProcessor("keygen", "host", "--stdout")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !nkeys.IsValidPublicUserKey(lines[0]) || !strings.HasPrefix(lines[1], "# ") || !strings.Contains(lines[1], "SECRET") {
		t.Fatalf("stdout %q: want the public key, a label line and the seed", out)
	}
	kp, err := nkeys.FromSeed([]byte(lines[2]))
	if err != nil {
		t.Fatalf("third line is not a seed: %v", err)
	}
	if pub, _ := kp.PublicKey(); pub != lines[0] || !strings.HasPrefix(lines[2], "SU") {
		t.Errorf("seed of %s printed with public key %s", pub, lines[0])
	}
	// Two runs make two keys.
	_, out2, _ := runProcessor("keygen", "host", "--stdout")
	if strings.SplitN(out2, "\n", 2)[0] == lines[0] {
		t.Error("the same key twice")
	}
}

// --out FILE --stdout writes the seed to FILE and prints it too, as the
// help of --stdout says.
func TestKeygenOutAndStdout(t *testing.T) {
	p := filepath.Join(t.TempDir(), "host.nk")
	code, out, errs := runProcessor("keygen", "host", "--out", p, "--stdout")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !nkeys.IsValidPublicUserKey(lines[0]) {
		t.Fatalf("stdout %q: want the public key, a label line and the seed", out)
	}
	kp, err := keyfile.LoadSeed(p)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	if string(seed) != lines[2] || fileMode(t, p) != 0o600 || !strings.Contains(errs, p) {
		t.Errorf("the file's seed differs from the printed one, or the file is not 0600, or stderr %q does not name it", errs)
	}
}

func TestKeygenInternal(t *testing.T) {
	p := filepath.Join(t.TempDir(), "internal.key")
	code, out, errs := runProcessor("keygen", "internal", "--out", p)
	if code != 0 || out != "" {
		t.Fatalf("exit %d, stdout %q: %s", code, out, errs)
	}
	if m := fileMode(t, p); m != 0o600 {
		t.Errorf("mode %v", m)
	}
	key, err := keyfile.LoadInternal(p)
	if err != nil || len(key) != keyfile.InternalKeySize {
		t.Fatalf("key file: %v", err)
	}
	data, _ := os.ReadFile(p)
	if strings.Contains(errs, strings.TrimSpace(string(data))) {
		t.Error("stderr shows the key")
	}
}

func TestKeygenRefusals(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing")
	if err := os.WriteFile(existing, []byte("keep me\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		exit int
		want string // in stderr
	}{
		{"no kind", []string{}, 2, "usage"},
		{"two kinds", []string{"host", "operator", "--stdout"}, 2, "usage"},
		{"unknown kind", []string{"admin", "--stdout"}, 2, `unknown kind "admin"`},
		{"neither", []string{"host"}, 2, "processor keygen: host: give --out FILE (the seed, mode 0600), --stdout (print it), or both"},
		{"bad flag", []string{"host", "--frob"}, 2, "flag provided but not defined"},
		{"internal to stdout", []string{"internal", "--stdout"}, 2, "--out FILE"},
		{"internal without out", []string{"internal"}, 2, "--out FILE"},
		{"existing seed file", []string{"host", "--out", existing}, 1, "processor keygen: " + existing + " already exists; refusing to overwrite it"},
		{"existing seed file, --stdout too", []string{"host", "--out", existing, "--stdout"}, 1, "processor keygen: " + existing + " already exists"},
		{"existing internal file", []string{"internal", "--out", existing}, 1, "processor keygen: " + existing + " already exists; refusing to overwrite it"},
		{"missing directory", []string{"source", "--out", filepath.Join(dir, "no", "seed")}, 1, "no such file or directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runProcessor(append([]string{"keygen"}, c.args...)...)
			if code != c.exit || out != "" || !strings.Contains(errs, c.want) {
				t.Fatalf("exit %d (want %d), stdout %q, stderr %q (want %q)", code, c.exit, out, errs, c.want)
			}
			if c.exit == 1 && strings.Count(errs, "\n") != 1 {
				t.Errorf("failure is not one line: %q", errs)
			}
			if strings.Contains(errs, "keygen: keygen") || (c.name != "bad flag" && !strings.HasPrefix(errs, "processor keygen: ")) {
				t.Errorf("stderr %q: want one prefix, processor keygen: ", errs)
			}
		})
	}
	if data, _ := os.ReadFile(existing); string(data) != "keep me\n" {
		t.Error("an existing file was overwritten")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("files left behind: %d", len(ents))
	}
}

// keygen --public FILE prints the public key of an existing seed and
// makes nothing; with a kind or --out it is a usage error.
func TestKeygenPublic(t *testing.T) {
	dir := t.TempDir()
	seed := filepath.Join(dir, "h.nk")
	var out, errb bytes.Buffer
	if code := run([]string{"keygen", "host", "--out", seed}, nil, &out, &errb); code != 0 {
		t.Fatalf("keygen: %d %s", code, errb.String())
	}
	made := out.String()
	out.Reset()
	if code := run([]string{"keygen", "--public", seed}, nil, &out, &errb); code != 0 || out.String() != made {
		t.Errorf("keygen --public: exit %d, %q; want %q", code, out.String(), made)
	}
	for _, args := range [][]string{{"keygen", "host", "--public", seed}, {"keygen", "--public", seed, "--out", filepath.Join(dir, "x")}} {
		if code := run(args, nil, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	errb.Reset()
	if code := run([]string{"keygen", "--public", filepath.Join(dir, "missing")}, nil, &out, &errb); code != 1 || !strings.Contains(errb.String(), "--public") {
		t.Errorf("a missing seed: exit %d, %s", code, errb.String())
	}
}

// init writes its four files once, and never over an existing one.
func TestInitNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := run([]string{"init", "--dir", dir}, nil, &out, &errb); code != 0 {
		t.Fatalf("init: %d %s", code, errb.String())
	}
	before, _ := os.ReadFile(filepath.Join(dir, "host.nk"))
	if code := run([]string{"init", "--dir", dir}, nil, &out, &errb); code != 1 || !strings.Contains(errb.String(), "refusing to overwrite") {
		t.Errorf("init again: exit %d, %s", code, errb.String())
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "host.nk")); !bytes.Equal(before, after) {
		t.Error("init again changed host.nk")
	}
	if code := run([]string{"validate", filepath.Join(dir, "portcullis.hcl")}, nil, &out, &errb); code != 0 {
		t.Errorf("validate of init's configuration: %s", errb.String())
	}
}
