package natsauth

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/subjects"
)

// env is a real embedded nats-server with JetStream whose accounts and
// users are the model of the test configuration, with the processor's
// streams and bucket made in the processor's account.
type env struct {
	srv   *server.Server
	cfg   *config.Config
	roles roles
	subj  subjects.Subjects
	proc  *client
	js    jetstream.JetStream
	kv    jetstream.KeyValue
}

// Stage stream of the tests: one stream on every internal subject.
const stageStream = "ACTIONS_STAGE"

// Server modes: the embedded server's options built by ServerAuth, the
// options nats-server's own parser reads from AccountsBlock, and ServerAuth
// with every per-user permission removed (the account layer alone).
const (
	modeEmbedded     = "ServerAuth"
	modeConfig       = "AccountsBlock"
	modeAccountsOnly = "AccountsOnly"
)

// eachServer runs f against a server of each rendering, so that every door
// is checked for both.
func eachServer(t *testing.T, f func(t *testing.T, e *env)) {
	for _, mode := range []string{modeEmbedded, modeConfig} {
		t.Run(mode, func(t *testing.T) { f(t, newEnv(t, mode)) })
	}
}

func newEnv(t *testing.T, mode string) *env {
	t.Helper()
	cfg, r := newRoles(t)
	e := &env{cfg: cfg, roles: r, subj: subjects.Default()}
	e.srv = startServer(t, serverOptions(t, mode, cfg, e.subj, r.proc.pub))
	if mode == modeConfig {
		// The configuration text enables JetStream for the processor's
		// account itself.
		if acc, err := e.srv.LookupAccount(ProcessorAccount); err != nil || !acc.JetStreamEnabled() {
			t.Fatalf("account %s from the configuration text: JetStream off (%v)", ProcessorAccount, err)
		}
	} else if err := EnableJetStream(e.srv); err != nil {
		t.Fatal(err)
	}
	e.proc = e.connect(t, r.proc)
	js, err := jetstream.New(e.proc.nc)
	if err != nil {
		t.Fatal(err)
	}
	e.js = js
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, sc := range []jetstream.StreamConfig{
		{Name: e.subj.ProposalsStream(), Subjects: []string{e.subj.Proposals()}},
		{Name: e.subj.GrantsStream(), Subjects: []string{e.subj.Grants()}},
		// As the engine makes it (kv/jetstream.OutcomeStream): the processor
		// publishes on the record subjects, the stream stores under the
		// outcome subjects and sends each stored outcome there live.
		{Name: e.subj.OutcomesStream(), Subjects: []string{e.subj.OutcomeRecords()}, AllowDirect: true,
			SubjectTransform: &jetstream.SubjectTransformConfig{Source: e.subj.OutcomeRecords(), Destination: e.subj.Outcomes()},
			RePublish:        &jetstream.RePublish{Source: e.subj.Outcomes(), Destination: e.subj.Outcomes()}},
		{Name: e.subj.IncidentsStream(), Subjects: []string{e.subj.Incidents()}, AllowDirect: true},
		{Name: stageStream, Subjects: []string{e.subj.Internal()}},
	} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatalf("stream %s: %v", sc.Name, err)
		}
	}
	e.kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: e.subj.ActivityBucket(), History: 1})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// serverOptions renders the model for a server of the given mode.
func serverOptions(t *testing.T, mode string, cfg *config.Config, subj subjects.Subjects, processorKey string) *server.Options {
	t.Helper()
	switch mode {
	case modeEmbedded, modeAccountsOnly:
		accounts, users, err := ServerAuth(cfg, subj, processorKey)
		if err != nil {
			t.Fatal(err)
		}
		if mode == modeAccountsOnly {
			for _, u := range users {
				u.Permissions = nil
			}
		}
		return &server.Options{
			Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), JetStreamMaxStore: 1 << 40,
			Accounts: accounts, Nkeys: users,
		}
	case modeConfig:
		block, err := AccountsBlock(cfg, subj, processorKey)
		if err != nil {
			t.Fatal(err)
		}
		return parseBlock(t, block)
	}
	t.Fatalf("mode %q", mode)
	return nil
}

// parseBlock writes a server configuration (random port, JetStream in a
// temporary directory, the block) and loads it with nats-server's parser.
func parseBlock(t *testing.T, block string) *server.Options {
	t.Helper()
	dir := t.TempDir()
	conf := fmt.Sprintf("host: \"127.0.0.1\"\nport: -1\njetstream {\n  store_dir: %q\n  max_file_store: 1099511627776\n}\n%s", filepath.Join(dir, "js"), block)
	path := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server rejects the configuration: %v\n%s", err, conf)
	}
	return opts
}

func startServer(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return srv
}

// client is a connection whose asynchronous errors (permission
// violations) are collected.
type client struct {
	nc   *nats.Conn
	errs chan error
}

func (e *env) connect(t *testing.T, id identity) *client {
	t.Helper()
	c, err := dial(e.srv, id)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(c.nc.Close)
	return c
}

func dial(srv *server.Server, id identity, extra ...nats.Option) (*client, error) {
	c := &client{errs: make(chan error, 64)}
	opts := []nats.Option{
		nats.Nkey(id.pub, id.kp.Sign),
		nats.CustomInboxPrefix(subjects.Inbox(id.pub)),
		nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		}),
	}
	nc, err := nats.Connect(srv.ClientURL(), append(opts, extra...)...)
	if err != nil {
		return nil, err
	}
	c.nc = nc
	return c, nil
}

// violation waits for the server's permission violation for op ("Publish"
// or "Subscription") on subject.
func (c *client) violation(t *testing.T, op, subject string) {
	t.Helper()
	want := op + ` to "` + subject + `"`
	deadline := time.After(3 * time.Second)
	for {
		select {
		case err := <-c.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), want) {
				return
			}
			t.Errorf("unexpected async error while waiting for %s: %v", want, err)
		case <-deadline:
			t.Fatalf("no permission violation for %s", want)
		}
	}
}

// noErrors asserts that no asynchronous error arrived (after a flush).
func (c *client) noErrors(t *testing.T) {
	t.Helper()
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-c.errs:
		t.Fatalf("unexpected async error: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
}

// waitFor polls cond until it holds and fails after 10s saying what it
// waited for. (testenv.WaitFor's twin: testenv imports this package.)
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
