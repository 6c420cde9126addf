package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/keyfile"
	"github.com/portcullis/portcullis/schema/trust"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// useClock stamps the operator commands' requests with the processor's
// clock until the test ends.
func useClock(t *testing.T, c stages.Clock) {
	t.Helper()
	prev := operatorNow
	operatorNow = c.Now
	t.Cleanup(func() { operatorNow = prev })
}

// writeSeed writes kp's seed to a new file and returns its path.
func writeSeed(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	pub, _ := kp.PublicKey()
	path := filepath.Join(t.TempDir(), pub[:8]+".nk")
	if err := keyfile.WriteSeed(path, kp); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitActivity checks the fingerprint's activity snapshot once the
// pipeline is idle (a stage writes it after its outcome, before it acks).
func waitActivity(t *testing.T, env *testenv.Env, fp string, ok func(*schema.Activity) bool) {
	t.Helper()
	env.Quiesce(t)
	kv, err := env.JS.KeyValue(context.Background(), env.Subjects.ActivityBucket())
	if err != nil {
		t.Fatal(err)
	}
	var a schema.Activity
	e, err := kv.Get(context.Background(), strings.TrimPrefix(fp, "sha256:"))
	if err != nil || schema.Decode(e.Value(), &a) != nil || !ok(&a) {
		t.Fatalf("the activity of %s does not satisfy the condition: %+v (%v)", fp, a, err)
	}
}

// cliCase is one run of the command line and what it must print.
type cliCase struct {
	name   string
	env    map[string]string // NATS_URL and PORTCULLIS_OPERATOR_NKEY: "" when absent
	args   []string
	code   int
	stdout []string
	stderr []string
	absent []string // in neither output
}

func runCases(t *testing.T, cases []cliCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range []string{EnvNATSURL, EnvOperatorNkey} {
				t.Setenv(k, c.env[k])
			}
			var out, errb bytes.Buffer
			code := run(c.args, nil, &out, &errb)
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.code, out.String(), errb.String())
			}
			for _, want := range c.stdout {
				if !strings.Contains(out.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, out.String())
				}
			}
			for _, want := range c.stderr {
				if !strings.Contains(errb.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, errb.String())
				}
			}
			for _, not := range c.absent {
				if strings.Contains(out.String()+errb.String(), not) {
					t.Errorf("the output holds %q", not)
				}
			}
		})
	}
}

// TestOperatorFlags: where the commands connect (--url, else --config,
// else NATS_URL, else the default) and who signs (--nkey, else
// PORTCULLIS_OPERATOR_NKEY, else nobody), against a processor that
// requires signed operator requests.
func TestOperatorFlags(t *testing.T) {
	clock := stages.NewManualClock(time.UnixMilli(1_764_424_800_000))
	env := testenv.New(t, testenv.WithClock(clock))
	useClock(t, clock)
	url := env.Server.ClientURL()
	dead := "nats://127.0.0.1:1"
	cfgFile := testenv.WriteConfig(t, env.Config)
	seed := writeSeed(t, env.Operator)
	stranger, _ := nkeys.CreateUser()
	strangerSeed := writeSeed(t, stranger)
	hostSeed := writeSeed(t, env.Host)
	notSeed := filepath.Join(t.TempDir(), "not-a-seed")
	os.WriteFile(notSeed, []byte("SUSECRETLOOKINGBUTNOSEED\n"), 0o600)
	seedText, _ := os.ReadFile(seed)
	list := func(extra ...string) []string { return append([]string{"reconcile", "list"}, extra...) }
	ok := []string{"no indeterminate actions"}
	unauth := []string{"unauthenticated", "--nkey", EnvOperatorNkey}
	secrets := []string{strings.TrimSpace(string(seedText)), "SUSECRETLOOKINGBUTNOSEED"}
	runCases(t, []cliCase{
		{name: "--nkey", args: list("--url", url, "--nkey", seed), stdout: ok},
		{name: "env nkey", env: map[string]string{EnvOperatorNkey: seed}, args: list("--url", url), stdout: ok},
		{name: "--nkey wins over env", env: map[string]string{EnvOperatorNkey: strangerSeed}, args: list("--url", url, "--nkey", seed), stdout: ok},
		{name: "env nkey of a stranger", env: map[string]string{EnvOperatorNkey: strangerSeed}, args: list("--url", url), code: 1, stderr: unauth},
		{name: "unsigned", args: list("--url", url), code: 1, stderr: append(unauth, "no signature")},
		{name: "a stranger's key", args: list("--url", url, "--nkey", strangerSeed), code: 1, stderr: append(unauth, "not the key of a configured operator")},
		{name: "a host's key", args: list("--url", url, "--nkey", hostSeed), code: 1, stderr: unauth},
		{name: "not a seed", args: list("--url", url, "--nkey", notSeed), code: 1, stderr: []string{"--nkey", "not a user nkey seed", notSeed}, absent: secrets},
		{name: "no seed file", args: list("--url", url, "--nkey", notSeed+".missing"), code: 1, stderr: []string{"--nkey", "no such file"}},
		{name: "--creds takes a seed", args: list("--url", url, "--creds", seed, "--nkey", seed), stdout: ok},
		{name: "--creds not a seed", args: list("--url", url, "--creds", notSeed, "--nkey", seed), code: 1, stderr: []string{"--creds", "not a user nkey seed"}, absent: secrets},
		{name: "NATS_URL", env: map[string]string{EnvNATSURL: url}, args: list("--nkey", seed), stdout: ok},
		{name: "--url wins over NATS_URL", env: map[string]string{EnvNATSURL: dead}, args: list("--url", url, "--nkey", seed), stdout: ok},
		{name: "NATS_URL is used", env: map[string]string{EnvNATSURL: dead, EnvOperatorNkey: seed}, args: list(), code: 1, stderr: []string{"cannot reach NATS at " + dead}},
		{name: "--config wins over NATS_URL", env: map[string]string{EnvNATSURL: dead}, args: list("--config", cfgFile, "--nkey", seed), stdout: ok},
		{name: "--url wins over --config", args: list("--config", cfgFile, "--url", dead, "--nkey", seed), code: 1, stderr: []string{"cannot reach NATS at " + dead}},
		{name: "password redacted", args: list("--url", "nats://op:hunter2@127.0.0.1:1"), code: 1, stderr: []string{"cannot reach NATS at nats://op:xxxxx@127.0.0.1:1"}, absent: []string{"hunter2"}},
		{name: "receipts --nkey", args: []string{"receipts", "get", "sha256:" + strings.Repeat("ab", 32), "--url", url, "--nkey", seed}, code: 1, stderr: []string{"not_found"}},
		{name: "receipts unsigned", args: []string{"receipts", "get", "sha256:" + strings.Repeat("ab", 32), "--url", url}, code: 1, stderr: unauth},
		{name: "resolve unsigned", args: []string{"reconcile", "resolve", "sha256:" + strings.Repeat("ab", 32), "--absent", "--evidence", "t:1", "--url", url}, code: 1, stderr: unauth},
		{name: "activity NATS_URL and env nkey", env: map[string]string{EnvNATSURL: url, EnvOperatorNkey: seed}, args: []string{"activity", "get", strings.Repeat("ab", 32)}, code: 1, stderr: []string{"no activity"}},
	})
	// A clock more than a minute off the processor's is refused.
	useClock(t, stages.SystemClock{}) // the processor's clock is at 2025-11-29
	runCases(t, []cliCase{
		{name: "stale", args: list("--url", url, "--nkey", seed), code: 1, stderr: []string{"stale", "clock"}},
	})
}

// TestOperatorCommandsInDev: a processor that accepts unsigned input
// answers the commands without --nkey, and a resolution sent so names no
// operator.
func TestOperatorCommandsInDev(t *testing.T) {
	clock := stages.NewManualClock(time.UnixMilli(1_764_424_800_000))
	env := testenv.New(t, testenv.WithClock(clock), testenv.WithConfig(func(c *config.Config) { c.Admission.AllowUnsigned = true }))
	useClock(t, clock)
	url := env.Server.ClientURL()
	stranger, _ := nkeys.CreateUser()
	runCases(t, []cliCase{
		{name: "unsigned", args: []string{"reconcile", "list", "--url", url}, stdout: []string{"no indeterminate actions"}},
		{name: "signed by the operator", args: []string{"reconcile", "list", "--url", url, "--nkey", writeSeed(t, env.Operator)}, stdout: []string{"no indeterminate actions"}},
		{name: "signed by a stranger", args: []string{"reconcile", "list", "--url", url, "--nkey", writeSeed(t, stranger)}, code: 1, stderr: []string{"unauthenticated"}},
	})
}

// serverLog keeps what nats-server logs, to find permission violations.
type serverLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *serverLog) add(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

func (l *serverLog) Noticef(format string, v ...any) { l.add(format, v...) }
func (l *serverLog) Warnf(format string, v ...any)   { l.add(format, v...) }
func (l *serverLog) Fatalf(format string, v ...any)  { l.add(format, v...) }
func (l *serverLog) Errorf(format string, v ...any)  { l.add(format, v...) }
func (l *serverLog) Debugf(format string, v ...any)  { l.add(format, v...) }
func (l *serverLog) Tracef(format string, v ...any)  { l.add(format, v...) }

func (l *serverLog) violations() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		if strings.Contains(s, "Violation") {
			out = append(out, s)
		}
	}
	return out
}

// operatorPermissions are exactly what the operator commands need (a
// subset of SPEC §2.8's operator row): request `<prefix>.admin.>`; stream
// info and direct gets of the activity bucket's stream; replies on its own
// inbox. No other JetStream API, no consumer.
func operatorPermissions(subj subjects.Subjects, pub string) *server.Permissions {
	stream := "KV_" + subj.ActivityBucket()
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			subj.Admins(),
			"$JS.API.STREAM.INFO." + stream,
			"$JS.API.DIRECT.GET." + stream,
			"$JS.API.DIRECT.GET." + stream + ".>",
		}},
		Subscribe: &server.SubjectPermission{Allow: []string{subjects.Inbox(pub) + ".>"}},
	}
}

// TestOperatorWithExactPermissions runs a real processor on a NATS server
// that authenticates every client, and the operator commands as a user
// with exactly operatorPermissions: each command works through an nkey
// login and its own inbox, and the server sees no permission violation.
func TestOperatorWithExactPermissions(t *testing.T) {
	proc, _ := nkeys.CreateUser()
	op, _ := nkeys.CreateUser()
	host, _ := nkeys.CreateUser()
	stranger, _ := nkeys.CreateUser()
	procPub, _ := proc.PublicKey()
	opPub, _ := op.PublicKey()
	hostPub, _ := host.PublicKey()
	subj := subjects.Default()

	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, JetStreamMaxStore: 1 << 40,
		Nkeys: []*server.NkeyUser{{Nkey: procPub}, {Nkey: opPub, Permissions: operatorPermissions(subj, opPub)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srvLog := &serverLog{}
	srv.SetLogger(srvLog, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	defer srv.WaitForShutdown()
	defer srv.Shutdown()
	url := srv.ClientURL()

	cfg := config.Defaults()
	cfg.NATS = config.NATS{URL: url, Replicas: 1, Credentials: writeSeed(t, proc)}
	cfg.Store.Dir = filepath.Join(t.TempDir(), "store")
	cfg.Metrics.Listen = ""
	cfg.Hosts = []trust.Host{{Name: testenv.HostName, PublicKey: hostPub, Tenants: []string{testenv.Tenant}}}
	cfg.Tenants = []trust.Tenant{{Ref: testenv.Tenant, SecurityDomains: []string{testenv.SecurityDomain}}}
	cfg.Operators = []config.Role{{Name: "oncall", PublicKey: opPub}}
	cfg.Providers = []config.Provider{{Name: "demo", Adapter: adapters.KindFake, Timeout: 2 * time.Second, UnavailableRetry: 2 * time.Second, MaxInFlight: 4,
		Settings: adapters.FakeScript{Dispatch: []string{schema.ReplyConfirmed}, Reconcile: []string{schema.ReplyConfirmed}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := engine.Start(ctx, engine.Options{Config: cfg, Log: slogDiscard(), DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Close(); err != nil {
			t.Errorf("processor: %v", err)
		}
	}()

	// One confirmed action, proposed by the host (published here over the
	// processor's own login; admission checks the host's signature).
	nc, err := nats.Connect(url, nats.Nkey(procPub, proc.Sign), nats.CustomInboxPrefix(subjects.Inbox(procPub)))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	outs, err := nc.SubscribeSync(subj.Outcomes())
	if err != nil {
		t.Fatal(err)
	}
	m := testenv.Granted(t, testenv.Lumber("prop-auth"), "sku-1001", time.Now())
	body := testenv.Body(t, m)
	js, _ := jetstream.New(nc)
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj.Proposal(testenv.HostName), Data: body, Header: testenv.Sign(t, host, body)}); err != nil {
		t.Fatal(err)
	}
	for {
		msg, err := outs.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("no outcome: %v", err)
		}
		var o schema.Outcome
		if schema.Decode(msg.Data, &o) == nil && o.Terminal {
			if o.Kind != schema.KindConfirmed {
				t.Fatalf("outcome %s", o.Kind)
			}
			break
		}
	}
	fp := testenv.FingerprintOf(t, m, "sku-1001")
	opSeed := writeSeed(t, op)
	flags := []string{"--url", url, "--timeout", "5s"}
	with := func(args ...string) []string { return append(args, flags...) }
	// The snapshot is written right after the outcome, before the ack.
	testenv.QuiesceConsumers(t, js, nil, testenv.StageConsumers(subj, cfg)...)
	runCases(t, []cliCase{
		{name: "list", args: with("reconcile", "list", "--nkey", opSeed), stdout: []string{"no indeterminate actions"}},
		{name: "receipts", args: with("receipts", "get", fp, "--nkey", opSeed), stdout: []string{fp, "CONFIRMED (terminal)"}},
		{name: "activity", args: with("activity", "get", fp, "--nkey", opSeed), stdout: []string{`"status": "confirmed"`, `"fingerprint": "` + fp + `"`}},
		{name: "activity unknown", args: with("activity", "get", strings.Repeat("ab", 32), "--nkey", opSeed), code: 1, stderr: []string{"no activity"}},
		{name: "resolve", args: with("reconcile", "resolve", fp, "--absent", "--evidence", "t:1", "--nkey", opSeed), code: 1, stderr: []string{"not_indeterminate"}},
		{name: "receipts by proposal", args: with("receipts", "get", testenv.HostName+"/prop-auth", "--nkey", opSeed), stdout: []string{fp, "CONFIRMED (terminal)"}},
		{name: "activity by proposal", args: with("activity", "get", testenv.HostName+"/prop-auth", "--nkey", opSeed), stdout: []string{`"status": "confirmed"`}},
		{name: "activity list", args: with("activity", "list", "--nkey", opSeed), stdout: []string{fp, "confirmed"}},
		{name: "approvals list", args: with("approvals", "list", "--nkey", opSeed), stdout: []string{"no proposals wait for approval"}},
		{name: "proposals get", args: with("proposals", "get", testenv.HostName, "prop-auth", "--nkey", opSeed), stdout: []string{fp, "CONFIRMED"}},
		{name: "env nkey", env: map[string]string{EnvOperatorNkey: opSeed}, args: with("reconcile", "list"), stdout: []string{"no indeterminate actions"}},
		{name: "--creds seed logs in, --nkey signs", args: with("reconcile", "list", "--creds", opSeed, "--nkey", opSeed), stdout: []string{"no indeterminate actions"}},
		{name: "--creds seed, unsigned", args: with("reconcile", "list", "--creds", opSeed), code: 1, stderr: []string{"unauthenticated"}},
		{name: "no login", args: with("reconcile", "list"), code: 1, stderr: []string{"refused an anonymous login", "uthorization", "--nkey FILE"}},
		{name: "a stranger's login", args: with("reconcile", "list", "--nkey", writeSeed(t, stranger)), code: 1, stderr: []string{"refused the login of U", "uthorization", "--nkey FILE"}},
	})
	if v := srvLog.violations(); len(v) > 0 {
		t.Errorf("permission violations:\n%s", strings.Join(v, "\n"))
	}

	// The check above can see a violation: creating a consumer is one.
	onc, err := nats.Connect(url, nats.Nkey(opPub, op.Sign), nats.CustomInboxPrefix(subjects.Inbox(opPub)), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer onc.Close()
	ojs, _ := jetstream.New(onc)
	cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
	defer ccancel()
	if _, err := ojs.CreateConsumer(cctx, "KV_"+subj.ActivityBucket(), jetstream.ConsumerConfig{}); err == nil {
		t.Error("the operator created a consumer")
	}
	testenv.WaitFor(t, "a violation in the server's log", func() bool { return len(srvLog.violations()) > 0 })
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }
