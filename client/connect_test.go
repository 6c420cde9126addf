package client_test

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/client"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema/keyfile"
)

// fast bounds a refusal that must come at once: well under the waits it
// replaces (NATS's 2 s connect timeout, the host's 5 s publish timeout).
const fast = 2 * time.Second

// TestConnectRefusals: Connect says, at once and typed, why it cannot log
// in as the identity it was given (issue 23: a host signing with another
// key than its login's, or none, only ever timed out).
func TestConnectRefusals(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	url := env.Server.ClientURL()
	stranger, _ := nkeys.CreateUser()
	strangerPub, _ := stranger.PublicKey()
	hostPub, _ := env.Host.PublicKey()
	otherPub, _ := env.OtherHost.PublicKey()
	cases := []struct {
		name string
		url  string
		seed nkeys.KeyPair
		opts []nats.Option
		is   error
		says []string
	}{
		{"a key no role has", url, stranger, nil, client.ErrLoginRefused, []string{"is " + strangerPub + " the public_key of the role's block"}},
		{"anonymous", url, nil, nil, client.ErrLoginRefused, []string{"the server requires a login", "client.LoadSeed"}},
		{"logs in as another host", url, env.Host, []nats.Option{nats.Nkey(otherPub, env.OtherHost.Sign)}, client.ErrIdentityMismatch,
			[]string{"log in as " + otherPub + ", the key that signs is " + hostPub}},
		{"a .creds file of another user", url, env.Host, []nats.Option{nats.UserCredentials(credsFile(t, env.OtherHost))}, client.ErrIdentityMismatch,
			[]string{"log in as " + otherPub}},
		{"http://", "http://127.0.0.1:9464", env.Host, nil, client.ErrNotNATS, []string{"http://127.0.0.1:9464"}},
		{"https:// in a list", url + ",https://example.com", env.Host, nil, client.ErrNotNATS, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			nc, err := client.Connect(c.url, c.seed, c.opts...)
			took := time.Since(start)
			t.Logf("after %s: %v", took, err)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, c.is) {
				t.Errorf("err = %v, want %v", err, c.is)
			}
			for _, s := range c.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("err %q lacks %q", err, s)
				}
			}
			if took > fast {
				t.Errorf("took %s, want at once", took)
			}
		})
	}
	// The same login given twice is one identity: fine.
	nc, err := client.Connect(url, env.Host, nats.Nkey(hostPub, env.Host.Sign))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if nc.PublicKey() != hostPub {
		t.Errorf("PublicKey = %s", nc.PublicKey())
	}
}

// credsFile writes a .creds file for kp: a user JWT naming kp's public key
// (unsigned: Connect reads only its subject before it refuses) and kp's
// seed.
func credsFile(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	enc := base64.RawURLEncoding.EncodeToString
	jwt := enc([]byte(`{"typ":"JWT","alg":"ed25519-nkey"}`)) + "." + enc([]byte(`{"sub":"`+pub+`"}`)) + "." + enc([]byte("sig"))
	path := filepath.Join(t.TempDir(), "user.creds")
	creds := "-----BEGIN NATS USER JWT-----\n" + jwt + "\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n" + string(seed) + "\n------END USER NKEY SEED------\n"
	if err := os.WriteFile(path, []byte(creds), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// NewHost refuses a connection that logged in as someone and has no key
// to sign with.
func TestNewHostWithoutSigningKey(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	hostPub, _ := env.Host.PublicKey()
	nc, err := client.Connect(env.Server.ClientURL(), nil, nats.Nkey(hostPub, env.Host.Sign), nats.CustomInboxPrefix("_INBOX."+hostPub))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := client.NewHost(nc, client.HostConfig{Name: testenv.HostName}); !errors.Is(err, client.ErrIdentityMismatch) {
		t.Errorf("NewHost: %v, want ErrIdentityMismatch", err)
	}
}

// LoadSeed reads what `processor keygen` writes; its errors name the file,
// never the content.
func TestLoadSeed(t *testing.T) {
	dir := t.TempDir()
	kp, _ := nkeys.CreateUser()
	path := filepath.Join(dir, "host.nk")
	if err := keyfile.WriteSeed(path, kp); err != nil {
		t.Fatal(err)
	}
	got, err := client.LoadSeed(path)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Wipe()
	want, _ := kp.PublicKey()
	if pub, _ := got.PublicKey(); pub != want {
		t.Errorf("LoadSeed: %s, want %s", pub, want)
	}
	bad := filepath.Join(dir, "bad.nk")
	if err := os.WriteFile(bad, []byte("SUSECRETBUTNOTASEED\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := client.LoadSeed(bad); err == nil || !strings.Contains(err.Error(), bad) || strings.Contains(err.Error(), "SUSECRET") {
		t.Errorf("LoadSeed of a bad file: %v", err)
	}
	if _, err := client.LoadSeed(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadSeed of a missing file: %v", err)
	}
}
