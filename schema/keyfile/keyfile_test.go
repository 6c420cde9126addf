package keyfile

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nkeys"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newUser(t *testing.T) (nkeys.KeyPair, string, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return kp, string(seed), pub
}

func write(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// creds is a decorated credentials file as nsc writes it.
func creds(jwt, seed string) string {
	return "-----BEGIN NATS USER JWT-----\n" + jwt + "\n------END NATS USER JWT------\n\n" +
		"************************* IMPORTANT *************************\n" +
		"NKEY Seed printed below can be used to sign and prove identity.\n\n" +
		"-----BEGIN USER NKEY SEED-----\n" + seed + "\n------END USER NKEY SEED------\n\n" +
		"*************************************************************\n"
}

// noSecret fails if err's text holds any 8-character piece of secret.
func noSecret(t *testing.T, err error, secret string) {
	t.Helper()
	for i := 0; i+8 <= len(secret); i++ {
		if strings.Contains(err.Error(), secret[i:i+8]) {
			t.Fatalf("error %q contains key material", err)
		}
	}
}

func TestLoadSeedForms(t *testing.T) {
	_, seed, pub := newUser(t)
	for name, content := range map[string]string{
		"bare":       seed,
		"newline":    seed + "\n",
		"whitespace": "\n\t  " + seed + "  \r\n\n",
		"creds":      creds("eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJzdWIiOiJVIn0.c2ln", seed),
	} {
		t.Run(name, func(t *testing.T) {
			kp, err := LoadSeed(write(t, content))
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := kp.PublicKey(); got != pub {
				t.Errorf("public key %s, want %s", got, pub)
			}
		})
	}
}

func TestLoadSeedRejects(t *testing.T) {
	_, seed, pub := newUser(t)
	_, other, _ := newUser(t)
	acct, _ := nkeys.CreateAccount()
	acctSeed, _ := acct.Seed()
	// One character changed (to one it is not: a seed's 21st character is
	// 'A' one time in 32), so that its checksum fails.
	flipped := byte('A')
	if seed[20] == 'A' {
		flipped = 'B'
	}
	for name, content := range map[string]string{
		"empty":         "",
		"public key":    pub,
		"account seed":  string(acctSeed),
		"two seeds":     seed + "\n" + other + "\n",
		"seed and junk": seed + " junk",
		"truncated":     seed[:len(seed)-1],
		"corrupted":     seed[:20] + string(flipped) + seed[21:],
		"garbage":       "hello",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := LoadSeed(write(t, content))
			if !errors.Is(err, ErrNotSeed) {
				t.Fatalf("error %v, want %v", err, ErrNotSeed)
			}
			noSecret(t, err, seed)
			noSecret(t, err, string(acctSeed))
		})
	}
	if _, err := LoadSeed(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestIsCreds(t *testing.T) {
	_, seed, _ := newUser(t)
	for content, want := range map[string]bool{seed: false, creds("eyJ.x.y", seed): true} {
		got, err := IsCreds(write(t, content))
		if err != nil || got != want {
			t.Errorf("IsCreds = %v, %v; want %v", got, err, want)
		}
	}
}

func TestWriteSeed(t *testing.T) {
	kp, seed, pub := newUser(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "host.nk")
	if err := WriteSeed(p, kp); err != nil {
		t.Fatal(err)
	}
	assertMode(t, p)
	if data, _ := os.ReadFile(p); string(data) != seed+"\n" {
		t.Errorf("file holds %d bytes, want the seed and a newline", len(data))
	}
	back, err := LoadSeed(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := back.PublicKey(); got != pub {
		t.Errorf("read back %s, want %s", got, pub)
	}
	// Never overwrites.
	kp2, _, _ := newUser(t)
	err = WriteSeed(p, kp2)
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second write: %v, want %v", err, fs.ErrExist)
	}
	noSecret(t, err, seed)
	if data, _ := os.ReadFile(p); string(data) != seed+"\n" {
		t.Error("the existing seed was changed")
	}
	onlyFiles(t, dir, "host.nk")
	if err := WriteSeed(filepath.Join(dir, "no", "such", "dir"), kp); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("write into a missing directory: %v", err)
	}
}

func assertMode(t *testing.T, p string) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want 0600", p, fi.Mode().Perm())
	}
}

// onlyFiles asserts that dir holds exactly names (no temporary files left).
func onlyFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("%s holds %v, want %v", dir, got, names)
	}
}

var keyLine = regexp.MustCompile(`^[0-9a-f]{64}\n$`)

func TestInternalKeyCreateAndLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "store", "internal.key") // parent made on demand
	key, err := LoadOrCreateInternal(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(key) != InternalKeySize {
		t.Fatalf("key of %d bytes", len(key))
	}
	assertMode(t, p)
	data, _ := os.ReadFile(p)
	if !keyLine.Match(data) || string(data) != hex.EncodeToString(key)+"\n" {
		t.Errorf("file is not the key as 64 lowercase hex digits and a newline")
	}
	again, err := LoadOrCreateInternal(p)
	if err != nil || !bytes.Equal(again, key) {
		t.Fatalf("second load: %v (same key: %v)", err, bytes.Equal(again, key))
	}
	if _, err := CreateInternal(p); !errors.Is(err, fs.ErrExist) {
		t.Errorf("CreateInternal over an existing file: %v", err)
	}
	onlyFiles(t, filepath.Dir(p), "internal.key")

	// Surrounding whitespace and upper case are read as the same key.
	loose := write(t, "\n  "+strings.ToUpper(hex.EncodeToString(key))+" \r\n")
	if k, err := LoadOrCreateInternal(loose); err != nil || !bytes.Equal(k, key) {
		t.Errorf("loose file: %v", err)
	}
}

func TestInternalKeyBadContent(t *testing.T) {
	digits := hex.EncodeToString(bytes.Repeat([]byte{0xab, 0xcd}, 16))
	for name, content := range map[string]string{
		"empty":       "",
		"short":       digits[:63],
		"long":        digits + "a",
		"not hex":     digits[:63] + "g",
		"two lines":   digits[:32] + "\n" + digits[32:],
		"two keys":    digits + "\n" + digits + "\n",
		"binary":      string(bytes.Repeat([]byte{0xab}, 32)),
		"hex-in-text": "key=" + digits,
	} {
		t.Run(name, func(t *testing.T) {
			p := write(t, content)
			_, err := LoadOrCreateInternal(p)
			if !errors.Is(err, ErrBadInternalKey) {
				t.Fatalf("error %v, want %v", err, ErrBadInternalKey)
			}
			noSecret(t, err, digits)
			if data, _ := os.ReadFile(p); string(data) != content {
				t.Error("a bad key file was changed")
			}
		})
	}
}

// TestInternalKeyRace: two processes creating the key at once end with
// one file and one key; exactly one of them creates it.
func TestInternalKeyRace(t *testing.T) {
	for i := 0; i < 50; i++ {
		dir := t.TempDir()
		p := filepath.Join(dir, "internal.key")
		var (
			wg      sync.WaitGroup
			keys    [2][]byte
			errs    [2]error
			created [2]error
		)
		start := make(chan struct{})
		for j := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				keys[j], errs[j] = LoadOrCreateInternal(p)
			}()
		}
		close(start)
		wg.Wait()
		if errs[0] != nil || errs[1] != nil || !bytes.Equal(keys[0], keys[1]) {
			t.Fatalf("round %d: errors %v %v, same key %v", i, errs[0], errs[1], bytes.Equal(keys[0], keys[1]))
		}
		onlyFiles(t, dir, "internal.key")

		// The exclusive create underneath: exactly one of two wins.
		q := filepath.Join(dir, "other.key")
		for j := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, created[j] = CreateInternal(q)
			}()
		}
		wg.Wait()
		if (created[0] == nil) == (created[1] == nil) {
			t.Fatalf("round %d: both or neither created: %v, %v", i, created[0], created[1])
		}
		for _, err := range created {
			if err != nil && !errors.Is(err, fs.ErrExist) {
				t.Fatalf("loser: %v, want %v", err, fs.ErrExist)
			}
		}
		if _, err := LoadInternal(q); err != nil {
			t.Fatal(err)
		}
	}
}
