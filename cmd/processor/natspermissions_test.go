package main

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/natsauth"
	"github.com/portcullis/portcullis/subjects"
)

func newPub(t *testing.T) string {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return pub
}

// rolesHCL is every role block of a configuration, with fresh keys.
func rolesHCL(t *testing.T) string {
	return fmt.Sprintf(`
subjects {
  prefix = "acme"
}
tenant "t" {
  security_domains = ["d"]
}
host "A" {
  public_key = %q
  tenants    = ["t"]
}
provider "p" {
  adapter = "nats"
}
connector "c" {
  public_key = %q
  providers  = ["p"]
}
resolver "r" {
  public_key = %q
}
source "s" {
  public_key = %q
}
operator "o" {
  public_key = %q
}
`, newPub(t), newPub(t), newPub(t), newPub(t), newPub(t))
}

func externalConfig(t *testing.T, dir, credentials string) string {
	t.Helper()
	nats := "nats {\n  url = \"nats://127.0.0.1:4222\"\n"
	if credentials != "" {
		nats += fmt.Sprintf("  credentials = %q\n", credentials)
	}
	return writeConfig(t, dir, nats+"}\n"+rolesHCL(t))
}

func writeConfig(t *testing.T, dir, hcl string) string {
	t.Helper()
	f, err := os.CreateTemp(dir, "*.hcl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(hcl); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// TestNATSPermissionsPrintsTheBlock: the processor's key comes from a seed
// made by `keygen processor`; the output is a server configuration that
// nats-server parses into exactly the accounts and users natsauth.ServerAuth
// builds, with JetStream in the processor's account.
func TestNATSPermissionsPrintsTheBlock(t *testing.T) {
	dir := t.TempDir()
	seed := filepath.Join(dir, "processor.nk")
	code, pub, errs := runProcessor("keygen", "processor", "--out", seed)
	if code != 0 {
		t.Fatalf("keygen: %s", errs)
	}
	pub = strings.TrimSpace(pub)
	cfgPath := externalConfig(t, dir, seed)
	code, out, errs := runProcessor("nats-permissions", "--config", cfgPath)
	if code != 0 || errs != "" {
		t.Fatalf("exit %d: %s", code, errs)
	}
	conf := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("port: -1\njetstream {\n  store_dir: %q\n  max_file_store: 1099511627776\n}\n", filepath.Join(dir, "js"))+out), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats-server rejects the output: %v\n%s", err, out)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := subjects.New("acme")
	accounts, users, err := natsauth.ServerAuth(cfg, subj, pub)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Nkeys) != len(users) || len(users) != 6 {
		t.Fatalf("parsed %d users, want %d", len(opts.Nkeys), len(users))
	}
	parsed := map[string]*server.NkeyUser{}
	for _, u := range opts.Nkeys {
		parsed[u.Nkey] = u
	}
	for _, w := range users {
		g := parsed[w.Nkey]
		if g == nil || g.Account.Name != w.Account.Name || !reflect.DeepEqual(g.Permissions, w.Permissions) {
			t.Errorf("user %s in %s: parsed %+v", w.Nkey, w.Account.Name, g)
		}
	}
	if p := parsed[pub]; p == nil || p.Permissions != nil || p.Account.Name != natsauth.ProcessorAccount {
		t.Errorf("the processor's key %s is not a user with full rights in %s", pub, natsauth.ProcessorAccount)
	}
	var names []string
	for _, a := range opts.Accounts {
		names = append(names, a.Name)
	}
	for _, a := range accounts {
		if !slices.Contains(names, a.Name) {
			t.Errorf("account %s not parsed (%q)", a.Name, names)
		}
	}
	// Running, the server has JetStream in the processor's account only.
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	for _, a := range accounts {
		acc, err := srv.LookupAccount(a.Name)
		if err != nil || acc.JetStreamEnabled() != (a.Name == natsauth.ProcessorAccount) {
			t.Errorf("account %s: JetStream %v (%v)", a.Name, acc != nil && acc.JetStreamEnabled(), err)
		}
	}
	if !strings.Contains(out, `"acme.proposals.A"`) {
		t.Error("the block ignores the configured prefix")
	}
}

// TestNATSPermissionsRefusesTwoConnectorsForOneProvider: the config rule
// speaks first, with file:line.
func TestNATSPermissionsRefusesTwoConnectorsForOneProvider(t *testing.T) {
	dir := t.TempDir()
	seed := filepath.Join(dir, "processor.nk")
	if code, _, errs := runProcessor("keygen", "processor", "--out", seed); code != 0 {
		t.Fatalf("keygen: %s", errs)
	}
	path := writeConfig(t, dir, fmt.Sprintf("nats {\n  url = \"nats://127.0.0.1:4222\"\n  credentials = %q\n}\n", seed)+rolesHCL(t)+
		fmt.Sprintf("connector \"c2\" {\n  public_key = %q\n  providers  = [\"p\"]\n}\n", newPub(t)))
	code, out, errs := runProcessor("nats-permissions", "--config", path)
	if code != 1 || out != "" || !strings.Contains(errs, `provider "p" is served by connector "c" already`) || !strings.Contains(errs, ".hcl:") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestNATSPermissionsRefusals(t *testing.T) {
	dir := t.TempDir()
	seedKP, _ := nkeys.CreateUser()
	seed, _ := seedKP.Seed()
	credsFile := filepath.Join(dir, "user.creds")
	os.WriteFile(credsFile, []byte("-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QifQ.eyJzdWIiOiJVIn0.c2ln\n------END NATS USER JWT------\n\n"+
		"-----BEGIN USER NKEY SEED-----\n"+string(seed)+"\n------END USER NKEY SEED------\n"), 0o600)
	badSeed := filepath.Join(dir, "bad.nk")
	os.WriteFile(badSeed, []byte("SUNOTASEEDATALL\n"), 0o600)
	embedded := writeConfig(t, dir, rolesHCL(t))
	invalid := writeConfig(t, dir, "nats {\n  frob = 1\n}\n")
	cases := []struct {
		name string
		args []string
		exit int
		want string
	}{
		{"no config", nil, 2, "usage"},
		{"extra argument", []string{"--config", embedded, "extra"}, 2, "usage"},
		{"bad flag", []string{"--frob"}, 2, "flag provided but not defined"},
		{"invalid config", []string{"--config", invalid}, 1, "frob"},
		{"missing config", []string{"--config", filepath.Join(dir, "absent.hcl")}, 1, "no such file"},
		{"embedded server", []string{"--config", embedded}, 1, "builds these accounts and users itself"},
		{"no credentials", []string{"--config", externalConfig(t, dir, "")}, 1, "sets no nats.credentials"},
		{"JWT creds", []string{"--config", externalConfig(t, dir, credsFile)}, 1, "JWT .creds file"},
		{"missing credentials", []string{"--config", externalConfig(t, dir, filepath.Join(dir, "absent.nk"))}, 1, "no such file"},
		{"bad seed", []string{"--config", externalConfig(t, dir, badSeed)}, 1, "not a user nkey seed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runProcessor(append([]string{"nats-permissions"}, c.args...)...)
			if code != c.exit || out != "" || !strings.Contains(errs, c.want) {
				t.Fatalf("exit %d (want %d), stdout %q, stderr %q (want %q)", code, c.exit, out, errs, c.want)
			}
			if strings.Contains(errs, string(seed)) || strings.Contains(errs, "SUNOTASEED") {
				t.Errorf("stderr shows key material: %q", errs)
			}
			if c.exit == 1 && c.name != "invalid config" && strings.Count(errs, "\n") != 1 {
				t.Errorf("failure is not one line: %q", errs)
			}
		})
	}
}
