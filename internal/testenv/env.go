package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/seal"
	"github.com/portcullis/portcullis/schema/keyfile"
	"github.com/portcullis/portcullis/schema/trust"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// Tenants and hosts of the default test configuration.
const (
	// HostName is Host's name (its subject token); OtherHostName is OtherHost's.
	HostName       = "frontdesk"
	OtherHostName  = "elsewhere"
	Tenant         = "tenant:demo"
	SecurityDomain = "security-domain:demo"
	OtherTenant    = "tenant:other"
	// OtherSecurityDomain is OtherTenant's only security domain.
	OtherSecurityDomain = "security-domain:other"
	// OperatorName is the configured operator whose key is Env.Operator.
	OperatorName = "oncall"
	// ConnectorName is the configured connector (key Env.Connector) that
	// serves provider "inventory"; ResolverName the resolver (Env.Resolver).
	ConnectorName = "inventory-connector"
	ResolverName  = "profiles"
)

// Env is a running test deployment.
type Env struct {
	// handOffs are the stages' hand-offs as published (StageEnvelopes).
	handOffs *handOffLog
	Server   *server.Server
	NC       *nats.Conn
	JS       jetstream.JetStream
	Config   *config.Config
	Subjects subjects.Subjects
	Clock    stages.Clock
	Recorder *Recorder
	// Host signs for Tenant; OtherHost signs for OtherTenant only.
	Host, OtherHost nkeys.KeyPair
	// Operator is the key of the configured operator OperatorName.
	Operator nkeys.KeyPair
	// Connector and Resolver are the keys of ConnectorName and ResolverName.
	Connector, Resolver nkeys.KeyPair
	// Auth: the server requires every client to log in with its role's
	// key (WithAuth). NC and JS are then the processor's own identity.
	Auth bool
	// Logs holds everything the processor logged, for privacy checks.
	Logs *LogBuffer
	// Fakes are the fake adapters of the fake providers, by provider name.
	// They outlive restarts: their counters tell how often a provider was
	// really called.
	Fakes map[string]*adapters.Fake
	// Cluster is the three-server cluster of a Clustered Env (nil
	// otherwise); Server is then its first server.
	Cluster *Cluster

	mu   sync.Mutex // guards conns
	slot slot
	// serverAddr and serverDir are where Server listens and stores, for
	// RestartServer; auth is its accounts and users when Auth.
	serverAddr, serverDir string
	auth                  *serverAuth
	conns                 map[string]*nats.Conn // by public key, for ConnectAs
	// url and dialer are the servers of OnServers and how to reach them.
	url    string
	dialer nats.CustomDialer
	t      testing.TB
}

// Option adjusts an Env before it starts.
type Option func(*envOptions)

type envOptions struct {
	auth      bool
	cluster   bool
	configure []func(*config.Config)
	clock     stages.Clock
	noStart   bool
	storeFS   vfs.FS
	engine    []func(*engine.Options)
	servers   StartServers
}

// WithConfig edits the processor's configuration before start.
func WithConfig(f func(*config.Config)) Option {
	return func(o *envOptions) { o.configure = append(o.configure, f) }
}

// WithClock gives the processor a clock (a *stages.ManualClock, say).
func WithClock(c stages.Clock) Option { return func(o *envOptions) { o.clock = c } }

// WithStoreFS runs the processor's Pebble store on fs (vfs/errorfs for
// fault injection).
func WithStoreFS(fs vfs.FS) Option { return func(o *envOptions) { o.storeFS = fs } }

// WithEngine edits the processor's engine options (after testenv set its
// own: Adapters, Log, DrainTimeout, SchedulerPoll, ...).
func WithEngine(f func(*engine.Options)) Option {
	return func(o *envOptions) { o.engine = append(o.engine, f) }
}

// WithAuth runs the server with NATS authentication as a production
// deployment does (SPEC §2.8): every role in its own account, logging in
// with its key; the processor logs in with a seed file (nats.credentials).
// Publish and friends then go through each host's own login, the Recorder
// listens as the operator, and ConnectAs gives any role's connection.
func WithAuth() Option { return func(o *envOptions) { o.auth = true } }

// Clustered runs the Env on a three-server JetStream cluster (NewCluster)
// instead of one server, as processors sharing a cluster do (SPEC §6):
// nats.url lists the three servers, nats.replicas is 3, store.journal is
// replicated, and internal.key_file is a file every processor of the Env
// shares (AddProcessor, ProcessorConfig). With WithAuth every server has
// the accounts `processor nats-permissions` prints.
func Clustered() Option { return func(o *envOptions) { o.cluster = true } }

// StartServers starts the servers of an OnServers Env: it receives the
// Env's configuration (every WithConfig applied; nats.url not set yet)
// and the nats-server configuration text of its accounts (with WithAuth,
// as for ClusterAccounts; "" without), and returns the servers' client
// URLs (comma-separated) and the dialer through which the test's own
// clients reach them (nil: the default).
type StartServers func(t testing.TB, cfg *config.Config, accounts string) (url string, dial nats.CustomDialer)

// OnServers runs the Env on servers the test starts itself instead of
// one in process: three servers of package partition's, each in a
// network namespace (with Clustered), or the embedded server of a
// processor binary. Server and Cluster are nil; every connection of the
// test's (ConnectAs, the Recorder, Admin) goes through the dialer and
// pings its server every second, so that it leaves a server the test cut
// off within seconds. Processors run as binaries (ProcessorConfig,
// StartProcessIn).
func OnServers(start StartServers) Option {
	return func(o *envOptions) { o.servers = start }
}

// NotStarted leaves the processor stopped; call Start.
func NotStarted() Option { return func(o *envOptions) { o.noStart = true } }

// New starts a server, configures two signing hosts, a fake provider "demo"
// that confirms, a nats provider "inventory", records outcomes and incidents
// and starts a processor. Everything stops when the test ends.
func New(t testing.TB, opts ...Option) *Env {
	t.Helper()
	var o envOptions
	for _, f := range opts {
		f(&o)
	}
	e := &Env{Logs: &LogBuffer{}, Auth: o.auth, conns: map[string]*nats.Conn{}, t: t}
	for _, kp := range []*nkeys.KeyPair{&e.Host, &e.OtherHost, &e.Operator, &e.Connector, &e.Resolver} {
		*kp, _ = nkeys.CreateUser()
	}
	pub := func(kp nkeys.KeyPair) string { k, _ := kp.PublicKey(); return k }

	dir := t.TempDir()
	cfg := config.Defaults()
	cfg.NATS = config.NATS{Replicas: 1}
	cfg.Store.Dir = filepath.Join(dir, "store")
	// One processor on its own server: the journal in its store, where the
	// tests look (Processor().Store()).
	cfg.Store.Journal = config.JournalLocal
	if o.cluster {
		cfg.NATS.Replicas = 3
		cfg.Store.Journal = config.JournalReplicated
		cfg.Internal.KeyFile = filepath.Join(dir, "internal.key")
	}
	cfg.Metrics.Listen = "127.0.0.1:0"
	cfg.Hosts = []trust.Host{
		{Name: HostName, PublicKey: pub(e.Host), Tenants: []string{Tenant}},
		{Name: OtherHostName, PublicKey: pub(e.OtherHost), Tenants: []string{OtherTenant}},
	}
	cfg.Tenants = []trust.Tenant{
		{Ref: Tenant, SecurityDomains: []string{SecurityDomain}},
		{Ref: OtherTenant, SecurityDomains: []string{OtherSecurityDomain}},
	}
	cfg.Operators = []config.Role{{Name: OperatorName, PublicKey: pub(e.Operator)}}
	cfg.Connectors = []config.Connector{{Name: ConnectorName, PublicKey: pub(e.Connector), Providers: []string{"inventory"}}}
	cfg.Resolvers = []config.Role{{Name: ResolverName, PublicKey: pub(e.Resolver)}}
	cfg.Providers = []config.Provider{
		{Name: "demo", Adapter: adapters.KindFake, Timeout: 2 * time.Second, UnavailableRetry: 2 * time.Second, MaxInFlight: 16,
			Settings: adapters.FakeScript{Dispatch: []string{"confirmed"}, Reconcile: []string{"confirmed"}}},
		{Name: "inventory", Adapter: adapters.KindNATS, Timeout: 2 * time.Second, UnavailableRetry: 2 * time.Second, MaxInFlight: 16},
	}
	for _, f := range o.configure {
		f(cfg)
	}
	var err error
	e.Subjects, err = subjects.New(cfg.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	if o.auth {
		e.auth = newServerAuth(t, cfg, e.Subjects, filepath.Join(dir, "processor.nk"))
		cfg.NATS.Credentials = e.auth.seedFile
	}
	switch {
	case o.servers != nil:
		e.url, e.dialer = o.servers(t, cfg, e.accountsBlock(t, cfg))
		cfg.NATS.URL = e.url
	case o.cluster:
		e.Cluster = e.startCluster(t, cfg)
		e.Server = e.Cluster.Server(0)
		cfg.NATS.URL = e.Cluster.URL()
	default:
		e.serverDir = t.TempDir()
		e.Server = e.startServer(t, "127.0.0.1:0")
		e.serverAddr = e.Server.Addr().String()
		cfg.NATS.URL = e.Server.ClientURL()
	}
	e.Config = cfg
	e.NC = e.ConnectAs(t, e.auth.processorKey())
	if e.JS, err = jetstream.New(e.NC); err != nil {
		t.Fatal(err)
	}
	recorderConn := e.NC
	if o.auth {
		recorderConn = e.ConnectAs(t, e.Operator)
	}
	e.Clock = o.clock
	if e.Clock == nil {
		e.Clock = stages.SystemClock{}
	}
	e.Recorder = Record(t, recorderConn, e.Subjects)
	e.handOffs = recordHandOffs(t, e.NC, e.Subjects)
	e.Fakes = map[string]*adapters.Fake{}
	overrides := map[string]adapters.Adapter{}
	for _, p := range cfg.Providers {
		if p.Adapter == adapters.KindFake {
			script, _ := p.Settings.(adapters.FakeScript) // nil settings: the defaults
			f := adapters.NewFake(p.Name, script)
			f.SetClock(e.Clock.Now) // the processor's: it reads not_after_ms as the processor wrote it
			e.Fakes[p.Name] = f
			overrides[p.Name] = f
		}
	}
	e.slot.opts = engine.Options{
		Adapters:     overrides,
		StoreFS:      o.storeFS,
		Config:       cfg,
		Clock:        e.Clock,
		Log:          slog.New(slog.NewJSONHandler(io.MultiWriter(e.Logs), &slog.HandlerOptions{Level: slog.LevelDebug})),
		DrainTimeout: 5 * time.Second,
	}
	for _, f := range o.engine {
		f(&e.slot.opts)
	}
	t.Cleanup(func() { e.Stop(t) })
	// Runs before the processor stops (cleanups run last first).
	t.Cleanup(func() { e.ValidateActivity(t) })
	if !o.noStart {
		e.Start(t)
	}
	return e
}

// Start starts the processor (again).
func (e *Env) Start(t testing.TB) *engine.Processor {
	t.Helper()
	return e.slot.start(t)
}

// Stop drains and stops the processor, if running.
func (e *Env) Stop(t testing.TB) {
	t.Helper()
	e.slot.stop(t)
}

// Forget drops the running processor without stopping it again (a test
// that stopped it itself and checked its error).
func (e *Env) Forget() { e.slot.forget() }

// Restart stops and starts the processor on the same store and streams.
func (e *Env) Restart(t testing.TB) *engine.Processor {
	t.Helper()
	e.Stop(t)
	return e.Start(t)
}

// Admin is an operator API client that signs as Operator and stamps its
// requests with the processor's clock.
func (e *Env) Admin() *admin.Client {
	nc := e.NC
	if e.Auth {
		nc = e.ConnectAs(e.t, e.Operator)
	}
	return &admin.Client{NC: nc, Subjects: e.Subjects, Key: e.Operator, Now: e.Clock.Now}
}

// Processor returns the running processor.
func (e *Env) Processor() *engine.Processor { return e.slot.get() }

// Body encodes a fixture (a map from Lumber and friends, or any value) as
// JSON; []byte passes through unchanged.
func Body(t testing.TB, v any) []byte {
	t.Helper()
	if b, ok := v.([]byte); ok {
		return b
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Publish publishes a proposal unsigned on HostName's subject.
func (e *Env) Publish(t testing.TB, v any) {
	t.Helper()
	e.PublishWith(t, e.Subjects.Proposal(HostName), Body(t, v), nil)
}

// PublishSigned publishes a proposal signed by kp on the subject of the
// host whose key kp is.
func (e *Env) PublishSigned(t testing.TB, v any, kp nkeys.KeyPair) {
	t.Helper()
	body := Body(t, v)
	e.PublishWith(t, e.Subjects.Proposal(e.HostOf(t, kp)), body, Sign(t, kp, body))
}

// PublishGrant publishes a standalone grant (or decline) signed by kp on
// its host's grants subject; nil: unsigned, on HostName's.
func (e *Env) PublishGrant(t testing.TB, v any, kp nkeys.KeyPair) {
	t.Helper()
	body := Body(t, v)
	h := HostName
	var hdr nats.Header
	if kp != nil {
		hdr = Sign(t, kp, body)
		h = e.HostOf(t, kp)
	}
	e.PublishWith(t, e.Subjects.Grant(h), body, hdr)
}

// HostOf is the name of the configured host whose key kp is, or
// "unknown-host" for a key no host has.
func (e *Env) HostOf(t testing.TB, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := e.Config.HostForKey(pub); ok {
		return h.Name
	}
	return "unknown-host"
}

// PublishWith publishes raw bytes with headers to a subject through
// JetStream and waits for the PubAck. With WithAuth, a proposal or grant
// goes through its subject's host's own login (that host's key need not
// have signed it).
func (e *Env) PublishWith(t testing.TB, subject string, body []byte, hdr nats.Header) {
	t.Helper()
	js := e.JS
	if h, ok := e.Subjects.IngressHost(subject); ok && e.Auth {
		if host, found := e.Config.Host(h); found {
			js = e.jsAs(t, e.keyOf(t, host.PublicKey))
		}
	}
	m := nats.NewMsg(subject)
	m.Data = body
	for k, v := range hdr {
		m.Header[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatalf("publish to %s: %v", subject, err)
	}
}

// Sign returns the signature headers of body signed by kp.
func Sign(t testing.TB, kp nkeys.KeyPair, body []byte) nats.Header {
	t.Helper()
	h, err := trust.Sign(kp, body)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// LogBuffer is a concurrency-safe log sink.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	// grew is closed (and replaced) at every Write, for Wait.
	grew chan struct{}
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.grew != nil {
		close(l.grew)
		l.grew = nil
	}
	return l.buf.Write(p)
}

// Bytes returns everything written so far.
func (l *LogBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.buf.Bytes())
}

// Wait blocks until the buffer holds s; the test fails after WaitTimeout,
// showing what was written.
func (l *LogBuffer) Wait(t testing.TB, s string) {
	t.Helper()
	if !l.wait(s, nil, WaitTimeout) {
		t.Fatalf("testenv: %q not written within %s:\n%s", s, WaitTimeout, l.Bytes())
	}
}

// wait reports whether the buffer came to hold s before timeout or stop.
func (l *LogBuffer) wait(s string, stop <-chan struct{}, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		if bytes.Contains(l.buf.Bytes(), []byte(s)) {
			l.mu.Unlock()
			return true
		}
		if l.grew == nil {
			l.grew = make(chan struct{})
		}
		grew := l.grew
		l.mu.Unlock()
		select {
		case <-grew:
		case <-stop:
			return bytesContains(l.Bytes(), s)
		case <-deadline.C:
			return false
		}
	}
}

func bytesContains(b []byte, s string) bool { return bytes.Contains(b, []byte(s)) }

// Sealer returns the processor's internal-message sealer (its key file is
// created if the processor has not started yet).
func (e *Env) Sealer(t testing.TB) *seal.Sealer {
	t.Helper()
	path := e.Config.InternalKeyFile()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	key, err := keyfile.LoadOrCreateInternal(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := seal.New(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// PublishInternal publishes onto an internal subject, sealed as a stage
// would seal it: for tests that hand a stage a message directly.
func (e *Env) PublishInternal(t testing.TB, subject string, body []byte) {
	t.Helper()
	hdr := nats.Header{}
	e.Sealer(t).Seal(subject, body, hdr)
	e.PublishWith(t, subject, body, hdr)
}
