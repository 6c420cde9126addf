package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/kv/dirlock"
	"github.com/portcullis/portcullis/schema/keyfile"
)

func write(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Check (processor validate) refuses a configuration whose named files are
// missing, unreadable or hold the wrong thing, each with file:line and the
// file's name; and a file that configures nothing (issue 23: validate said
// ok for both).
func TestCheckFiles(t *testing.T) {
	dir := t.TempDir()
	kp, _ := nkeys.CreateUser()
	seed := filepath.Join(dir, "processor.nk")
	if err := keyfile.WriteSeed(seed, kp); err != nil {
		t.Fatal(err)
	}
	notSeed := write(t, filepath.Join(dir, "not-a-seed"), "SUNOTASEED\n")
	internal := filepath.Join(dir, "internal.key")
	if _, err := keyfile.CreateInternal(internal); err != nil {
		t.Fatal(err)
	}
	badInternal := write(t, filepath.Join(dir, "bad.key"), "not hex\n")
	cert, key := testenv.SelfSignedCert(t, dir, "server", "localhost")
	_, otherKey := testenv.SelfSignedCert(t, dir, "other", "localhost")
	notPEM := write(t, filepath.Join(dir, "ca.txt"), "hello\n")
	missing := filepath.Join(dir, "missing")
	remote := func(creds string) string {
		return "nats {\n  url = \"nats://127.0.0.1:4222\"\n  credentials = \"" + creds + "\"\n}\n"
	}
	withTLS := func(cert, key, ca string) string {
		return "nats {\n  tls {\n    cert_file = \"" + cert + "\"\n    key_file = \"" + key + "\"\n    ca_file = \"" + ca + "\"\n  }\n}\n"
	}
	internalAt := func(p string) string { return "internal {\n  key_file = \"" + p + "\"\n}\n" }
	cases := []struct {
		name, src string
		want      []string // in the error; none: valid
	}{
		{"seed credentials", remote(seed), nil},
		{"missing credentials", remote(missing), []string{"c.hcl:3,17-", "Unusable file for credentials", missing + " does not exist"}},
		{"credentials not a seed", remote(notSeed), []string{"c.hcl:3,", notSeed + ": not a user nkey seed"}},
		{"credentials a directory", remote(dir), []string{"c.hcl:3,", dir + " cannot be read: is a directory"}},
		{"tls", withTLS(cert, key, cert), nil},
		{"tls missing cert", withTLS(missing, key, cert), []string{"c.hcl:3,", "Unusable file for cert_file", missing + " does not exist"}},
		{"tls key of another cert", withTLS(cert, otherKey, cert), []string{"c.hcl:3,", "with key_file " + otherKey}},
		{"tls ca not PEM", withTLS(cert, key, notPEM), []string{"c.hcl:5,", notPEM + " holds no PEM certificate"}},
		{"internal key", internalAt(internal), nil},
		{"internal key made at the first start", internalAt(missing), nil},
		{"internal key not hex", internalAt(badInternal), []string{"c.hcl:2,", badInternal + ": not an internal key"}},
		{"default internal key under store.dir", "store {\n  dir = \"" + dir + "\"\n}\n", nil},
		{"two problems", remote(missing) + internalAt(badInternal), []string{"c.hcl:3,", "c.hcl:6,"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := write(t, filepath.Join(t.TempDir(), "c.hcl"), c.src)
			_, err := config.Check(p)
			if c.want == nil {
				if err != nil {
					t.Fatalf("valid configuration refused: %v", err)
				}
				return
			}
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("err = %v, want a configuration error", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	// The default internal key under store.dir is checked too when it is
	// there: store.dir's internal.key above is the good one; a bad one
	// is refused, without a line (it is not written in the file).
	store := t.TempDir()
	write(t, filepath.Join(store, config.InternalKeyName), "not hex\n")
	p := write(t, filepath.Join(t.TempDir(), "c.hcl"), "store {\n  dir = \""+store+"\"\n}\n")
	if _, err := config.Check(p); err == nil || !strings.Contains(err.Error(), "Unusable file for internal.key_file") {
		t.Errorf("a bad default internal key: %v", err)
	}
}

func TestCheckConfiguresNothing(t *testing.T) {
	for name, src := range map[string]string{"empty": "", "blank": "\n\n  \n", "comments only": "# nats { }\n// nothing\n"} {
		p := write(t, filepath.Join(t.TempDir(), "c.hcl"), src)
		if _, err := config.Check(p); !errors.Is(err, config.ErrConfiguresNothing) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, want ErrConfiguresNothing naming the file", name, err)
		}
		if _, err := config.Load(p); err != nil {
			t.Errorf("%s: Load refuses it: %v (it is valid, only useless)", name, err)
		}
	}
}

// Check refuses a store.dir or an embedded nats.store_dir a running
// processor holds (here: this process, through dirlock's table), at the
// attribute, or without a line for a default; WithoutInUse drops only
// those complaints, for commands that work beside the processor.
func TestCheckInUse(t *testing.T) {
	dir := t.TempDir()
	store, nats := filepath.Join(dir, "s"), filepath.Join(dir, "n")
	for _, d := range []string{store, nats} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		defer dirlock.Mark(filepath.Join(d, dirlock.Name))()
	}
	src := "store {\n  dir = \"" + store + "\"\n}\nnats {\n  store_dir = \"" + nats + "\"\n}\n"
	p := write(t, filepath.Join(dir, "c.hcl"), src)
	_, err := config.Check(p)
	for _, w := range []string{
		p + ":2,9-", "Directory in use; " + store + " is held by this process (pid", "give this processor a store.dir of its own",
		p + ":5,15-", nats + " is held by this process", "give this processor a nats.store_dir of its own",
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Check: %v\nwant it to say %q", err, w)
		}
	}
	if err := config.WithoutInUse(err); err != nil {
		t.Errorf("WithoutInUse: %v, want nil", err)
	}
	// With another problem, that one stays.
	bad := write(t, filepath.Join(dir, "bad.hcl"), src+"internal {\n  key_file = \""+write(t, filepath.Join(dir, "k"), "x\n")+"\"\n}\n")
	_, err = config.Check(bad)
	if err = config.WithoutInUse(err); err == nil || strings.Contains(err.Error(), "in use") || !strings.Contains(err.Error(), "Unusable file for key_file") {
		t.Errorf("WithoutInUse kept: %v", err)
	}
	// An external server's nats.store_dir is nobody's.
	ext := write(t, filepath.Join(dir, "ext.hcl"), "nats {\n  url = \"nats://127.0.0.1:4222\"\n  store_dir = \""+nats+"\"\n}\nstore {\n  dir = \""+filepath.Join(dir, "s2")+"\"\n}\n")
	if _, err := config.Check(ext); err != nil {
		t.Errorf("an external server's configuration: %v", err)
	}
}

// nats.url takes NATS URLs only: an http:// address (the metrics
// listener's, a typo) is refused at its line, as every client refuses it.
func TestNATSURLScheme(t *testing.T) {
	for url, bad := range map[string]string{
		"nats://a:4222":                  "",
		"a:4222,b:4222":                  "",
		"tls://a:4222, wss://b:443":      "",
		"http://127.0.0.1:9464":          "http://127.0.0.1:9464",
		"nats://a:4222,HTTPS://u:pw@b:1": "https://u:xxxxx@b:1",
	} {
		if got := config.NotNATS(url); got != bad {
			t.Errorf("NotNATS(%q) = %q, want %q", url, got, bad)
		}
		_, err := config.Parse([]byte("nats {\n  url = \""+url+"\"\n}\n"), "c.hcl")
		switch {
		case bad == "" && err != nil:
			t.Errorf("%s: %v", url, err)
		case bad != "" && (err == nil || !strings.Contains(err.Error(), "c.hcl:2,") || !strings.Contains(err.Error(), "is not a NATS server URL") || strings.Contains(err.Error(), "pw")):
			t.Errorf("%s: %v", url, err)
		}
	}
}
