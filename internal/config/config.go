// Package config loads Portcullis's HCL configuration (SPEC §5).
//
// Every key has a documented default (see config.example.hcl); unknown keys
// and bad values are errors that carry the file:line of the offending text.
//
// It owns the configuration's types, defaults and checks (with file:line).
// It imports the wire packages and the adapter, policy, trust and key
// helpers whose blocks it decodes; never a store, a stage or the engine.
package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/trust"
	"github.com/portcullis/portcullis/stages/policy"
	"github.com/portcullis/portcullis/subjects"
)

// Defaults.
const (
	DefaultListen           = "127.0.0.1:4222"
	DefaultNATSStoreDir     = "data/nats"
	DefaultStoreDir         = "data/store"
	DefaultMetricsListen    = "127.0.0.1:9464"
	DefaultMaxPayloadBytes  = 65536
	MaxMaxPayloadBytes      = schema.MaxMessageBytes // the NATS server's default max_payload
	DefaultMaxCandidates    = 32
	MaxMaxCandidates        = 1024
	DefaultSourceTimeout    = 2 * time.Second
	DefaultApprovalTTL      = 10 * time.Minute
	DefaultClockSkew        = 30 * time.Second
	DefaultMaxGrantLifetime = 24 * time.Hour
	DefaultMaxInFlight      = 16
	MaxMaxInFlight          = 4096
	DefaultStreamMaxAge     = 7 * 24 * time.Hour
	DefaultIngressMaxBytes  = 64 << 20
	DefaultIngressMaxMsgs   = 10_000
	DefaultHostHistoryMsgs  = 100_000
	DefaultHostHistoryBytes = 64 << 20
	DefaultHostPipelineMsgs = 1000
	DefaultHostParkedBytes  = 64 << 20
	DefaultHostHeldBytes    = 64 << 20
	DefaultHostIncidentRate = 100
	DefaultStageMaxBytes    = 1 << 30
	DefaultHistoryMaxBytes  = 1 << 30
	MinStreamMaxBytes       = 1 << 20
	// MinHostHistoryBytes is the least host_history_max_bytes: a few of the
	// largest outcomes and snapshots.
	MinHostHistoryBytes     = 64 << 10
	InternalKeyName         = "internal.key"
	DefaultReconcileEvery   = 5 * time.Second
	DefaultReconcileMax     = 10
	DefaultProviderTimeout  = adapters.DefaultTimeout
	DefaultUnavailableRetry = 30 * time.Second
	MaxReplicas             = 5
)

// DefaultSourceMaxInFlight bounds concurrent requests to one candidate
// source (grounding.source_max_in_flight).
const DefaultSourceMaxInFlight = 16

// Config is a loaded, validated configuration with defaults applied.
type Config struct {
	NATS           NATS
	Store          Store
	Metrics        Metrics
	Prefix         string
	Admission      Admission
	Hosts          []trust.Host
	Tenants        []trust.Tenant
	Connectors     []Connector
	Resolvers      []Role
	Sources        []Role
	Operators      []Role
	Internal       Internal
	Streams        Streams
	Policies       []policy.ManagedPolicy
	Providers      []Provider
	Grounding      Grounding
	Approval       Approval
	Reconciliation Reconciliation
	Retention      Retention
	// MCP configures `processor mcp`; nil without an mcp block.
	MCP *MCP
}

// NATS says where JetStream is: an embedded server (default) or a URL.
type NATS struct {
	// Embedded runs a nats-server with JetStream in process. Default true
	// unless URL is set.
	Embedded bool
	// Listen is the embedded server's client address. Default 127.0.0.1:4222.
	Listen string
	// StoreDir is the embedded server's JetStream file store. Default data/nats.
	StoreDir string
	// SyncAlways fsyncs every JetStream write before its PubAck (power-loss
	// durability; costs throughput). Default false: the server syncs every 2m.
	SyncAlways bool
	// URL of an existing server or cluster (nats://host:4222,…). Excludes Embedded.
	URL string
	// Credentials is a NATS .creds file for URL.
	Credentials string
	// Replicas of every stream and the activity bucket, 1–5. Default 1.
	Replicas int
	// Auth makes the embedded server require an nkey login from every
	// client, each with exactly its role's permissions (SPEC §2.8).
	// Default true; false only on a loopback listen address.
	Auth bool
	// TLS secures the embedded listener and the processor's own
	// connection; nil: plain TCP.
	TLS *TLS
}

// TLS names PEM files. CertFile and KeyFile are the embedded server's
// certificate; CAFile is the root the processor (and clients) verify it
// with, and is required with an external server that uses TLS.
type TLS struct {
	CertFile string
	KeyFile  string
	CAFile   string
}

// Internal configures the authentication of internal messages.
type Internal struct {
	// KeyFile holds the HMAC key (64 hex digits) that authenticates every
	// internal hand-off and timer message. Processors that share work share
	// its content. Created (mode 0600) at start if missing. Default
	// <store.dir>/internal.key.
	KeyFile string
}

// Streams bounds the JetStream streams.
type Streams struct {
	// MaxAge is how long any stream keeps a message. Default 168h (7 days);
	// at least 2×approval.ttl.
	MaxAge time.Duration
	// IngressMaxBytes and IngressMaxMsgs bound each host's proposals and
	// grants waiting for admission — each host's ingress streams, each:
	// one host at its limit has its publishes refused while every other
	// host's go on. Messages leave as admission takes them (refused ones
	// included). Defaults 64 MiB and 10,000. With unsigned input allowed
	// (local development) the hosts share one stream of IngressMaxBytes,
	// each host IngressMaxMsgs of it.
	IngressMaxBytes int64
	IngressMaxMsgs  int64
	// StageMaxBytes bounds each internal stage stream. When full a stage's
	// hand-off is refused and retried; nothing accepted is dropped.
	// Default 1 GiB.
	StageMaxBytes int64
	// HistoryMaxBytes bounds the outcomes and incidents streams and the
	// activity bucket each; when full the oldest messages (snapshots) go.
	// Default 1 GiB.
	HistoryMaxBytes int64
	// HostHistoryMaxMsgs is each host's budget of outcomes in the outcomes
	// stream: past it, that host's oldest outcomes go, never another
	// host's. Default 100,000.
	HostHistoryMaxMsgs int64
	// HostHistoryMaxBytes is each host's share, in bytes, of the outcomes
	// stream, of the incidents stream and of the activity bucket, each:
	// past it that host's oldest messages (snapshots) go, never another
	// host's. Events of input that names no configured host share one
	// more such share. Default 64 MiB; Budgets warns when the hosts' shares
	// do not fit history_max_bytes.
	HostHistoryMaxBytes int64
	// HostPipelineMaxMsgs bounds each host's proposals inside the
	// pipeline — admitted or resumed by a grant, and neither answered nor
	// parked yet — in the stage streams every host shares. A host at its
	// bound has its next proposals and grants wait in its own ingress
	// streams until some of its work is done. Default 1,000.
	HostPipelineMaxMsgs int64
	// HostParkedMaxBytes bounds each host's envelopes of proposals parked
	// for approval (its own stream): a proposal that would park past it is
	// refused at once, DENIED/APPROVALS_PENDING_EXCEEDED. Default 64 MiB.
	HostParkedMaxBytes int64
	// HostHeldMaxBytes bounds each host's envelopes of dispatches whose
	// effect is unknown (its own stream), kept so that a request found
	// lost in flight can be sent again: past it none is kept, and such a
	// request ends FAILED_BEFORE_DISPATCH instead. Default 64 MiB.
	HostHeldMaxBytes int64
	// HostIncidentRate is how many incident events per second each host
	// may cause of each phase and code, after a burst of ten seconds'
	// worth: the rest are not published (counted in
	// actions_incidents_suppressed_total). Input that names no
	// configured host shares one such allowance. Default 100.
	HostIncidentRate int
}

// Store is the local Pebble store of checkpoints and receipts.
type Store struct {
	// Dir is the Pebble directory. Default data/store.
	Dir string
	// Journal is where the dispatch journal lives — the record that makes
	// dispatch exactly-once, receipts, reconciliation attempts and their
	// timers (SPEC §3, §6):
	//   - JournalLocal: in Dir (Pebble), timers fired by this processor.
	//     Only for a processor that is alone on its NATS (and subject
	//     prefix): another processor sharing the streams would not see it.
	//   - JournalReplicated: in the JetStream KV bucket <prefix>_journal
	//     with nats.replicas replicas, timers as nats-server message
	//     schedules: any number of processors may share it. Needs url.
	//   - JournalAuto (default): replicated with url, local with the
	//     embedded server.
	// A processor whose Dir holds a local journal refuses to start on a
	// replicated one, which would not know what it dispatched.
	Journal string
}

// Journal backends (store.journal).
const (
	JournalAuto       = "auto"
	JournalLocal      = "local"
	JournalReplicated = "replicated"
)

// ReplicatedJournal reports whether store.journal, resolved, is the
// replicated journal.
func (c *Config) ReplicatedJournal() bool {
	switch c.Store.Journal {
	case JournalReplicated:
		return true
	case JournalLocal:
		return false
	}
	return !c.NATS.Embedded
}

// Metrics is the Prometheus endpoint.
type Metrics struct {
	// Listen is the /metrics address. Default 127.0.0.1:9464; "" disables it.
	Listen string
}

// Admission configures the first stage.
type Admission struct {
	// AllowUnsigned admits proposals and grants without a host signature,
	// and answers operator requests without an operator signature.
	// Development only; logged loudly. Default false.
	AllowUnsigned bool
	// MaxPayloadBytes bounds a proposal or grant body. Default 65536, at most 1 MiB.
	MaxPayloadBytes int
}

// Connector is a provider connector's NATS identity: it serves the
// dispatch and reconcile subjects of its providers.
type Connector struct {
	Name      string
	PublicKey string
	Providers []string
}

// Role is a NATS identity with a fixed role: a disclosure resolver, a
// candidate source (its name is the source's name) or an operator.
type Role struct {
	Name      string
	PublicKey string
}

// Provider is a configured provider and its adapter.
type Provider struct {
	Name string
	// Adapter is the adapter kind: nats (default), http, fake, or another
	// registered with adapters.Register.
	Adapter string
	// Settings are the adapter kind's own settings (the rest of the block,
	// decoded by the kind); nil: the kind's defaults.
	Settings adapters.Settings
	// Timeout bounds one dispatch or reconcile call. Default 10s.
	Timeout time.Duration
	// UnavailableRetry is how long a dispatch that provably reached nobody
	// is retried before ADAPTER_UNAVAILABLE. Default 30s.
	UnavailableRetry time.Duration
	// MaxInFlight bounds concurrent dispatches to this provider. Default 16.
	MaxInFlight int
}

// Grounding configures the grounding stage.
type Grounding struct {
	// MaxCandidates bounds a proposal's candidates. Default 32, at most 1024.
	MaxCandidates int
	// SourceTimeout bounds a candidate source request. Default 2s.
	SourceTimeout time.Duration
	// SourceMaxInFlight bounds the concurrent requests to each candidate
	// source; a source's further proposals wait without taking capacity
	// from other sources' (SPEC §3, Isolation). Default 16, at most
	// MaxMaxInFlight.
	SourceMaxInFlight int
}

// Approval configures parked proposals.
type Approval struct {
	// TTL is how long a proposal waits for a grant. Default 10m.
	TTL time.Duration
	// ClockSkew is how far in the future a grant's issued_at_ms may lie
	// (host clocks drift). Default 30s.
	ClockSkew time.Duration
	// MaxGrantLifetime bounds expires_at_ms − issued_at_ms
	// (GRANT_LIFETIME_EXCEEDED). Default 24h.
	MaxGrantLifetime time.Duration
}

// Reconciliation configures verification and reconciliation polling.
type Reconciliation struct {
	// Interval is the wait before the first poll; later polls back off
	// (doubling, at most 32×Interval). Default 5s.
	Interval time.Duration
	// MaxAttempts bounds polls before RECONCILE_EXHAUSTED. Default 10.
	MaxAttempts int
}

// Provider returns the configured provider of that name.
func (c *Config) Provider(name string) (Provider, bool) {
	for _, p := range c.Providers {
		if p.Name == name {
			return p, true
		}
	}
	return Provider{}, false
}

// ErrInvalid is wrapped by every configuration error.
var ErrInvalid = errors.New("config: invalid")

// Error is a configuration error: HCL diagnostics with file:line ranges.
type Error struct {
	Diags hcl.Diagnostics
}

// Error lists every diagnostic, one per line, each with its file:line.
func (e *Error) Error() string {
	lines := make([]string, 0, len(e.Diags))
	for _, d := range e.Diags {
		lines = append(lines, (hcl.Diagnostics{d}).Error())
	}
	return strings.Join(lines, "\n")
}
func (e *Error) Unwrap() error { return ErrInvalid }

// Defaults returns the configuration of an empty file.
func Defaults() *Config {
	return &Config{
		NATS:      NATS{Embedded: true, Listen: DefaultListen, StoreDir: DefaultNATSStoreDir, Replicas: 1, Auth: true},
		Store:     Store{Dir: DefaultStoreDir, Journal: JournalAuto},
		Metrics:   Metrics{Listen: DefaultMetricsListen},
		Prefix:    subjects.DefaultPrefix,
		Admission: Admission{MaxPayloadBytes: DefaultMaxPayloadBytes},
		Grounding: Grounding{MaxCandidates: DefaultMaxCandidates, SourceTimeout: DefaultSourceTimeout, SourceMaxInFlight: DefaultSourceMaxInFlight},
		Approval:  Approval{TTL: DefaultApprovalTTL, ClockSkew: DefaultClockSkew, MaxGrantLifetime: DefaultMaxGrantLifetime},
		Streams: Streams{MaxAge: DefaultStreamMaxAge, IngressMaxBytes: DefaultIngressMaxBytes, IngressMaxMsgs: DefaultIngressMaxMsgs,
			StageMaxBytes: DefaultStageMaxBytes, HistoryMaxBytes: DefaultHistoryMaxBytes, HostHistoryMaxMsgs: DefaultHostHistoryMsgs,
			HostHistoryMaxBytes: DefaultHostHistoryBytes, HostPipelineMaxMsgs: DefaultHostPipelineMsgs, HostParkedMaxBytes: DefaultHostParkedBytes,
			HostHeldMaxBytes: DefaultHostHeldBytes, HostIncidentRate: DefaultHostIncidentRate},
		Reconciliation: Reconciliation{Interval: DefaultReconcileEvery, MaxAttempts: DefaultReconcileMax},
		Retention:      Retention{SweepInterval: DefaultSweepInterval},
	}
}

// Dev is the configuration of `processor run --dev`: embedded defaults under
// dataDir without NATS authentication, unsigned input allowed, a fake
// provider "demo" that confirms everything, and a provider "inventory" (the
// SPEC §2.1 example's) whose connector runs on the far side of NATS, on
// actions.provider.inventory.dispatch|reconcile.
func Dev(dataDir string) *Config {
	c := Defaults()
	c.NATS.StoreDir = filepath.Join(dataDir, "nats")
	c.NATS.Auth = false
	c.Store.Dir = filepath.Join(dataDir, "store")
	c.Admission.AllowUnsigned = true
	c.Providers = []Provider{{
		Name: "demo", Adapter: adapters.KindFake, Timeout: DefaultProviderTimeout, UnavailableRetry: DefaultUnavailableRetry,
		MaxInFlight: DefaultMaxInFlight,
		Settings:    adapters.FakeScript{Dispatch: []string{schema.ReplyConfirmed}, Reconcile: []string{schema.ReplyConfirmed}},
	}, {
		Name: "inventory", Adapter: adapters.KindNATS, Settings: adapters.NATSSettings{}, Timeout: DefaultProviderTimeout,
		UnavailableRetry: DefaultUnavailableRetry, MaxInFlight: DefaultMaxInFlight,
	}}
	return c
}

// DevProviders describes the providers of Dev, for its banner.
const DevProviders = `demo (fake: confirms every dispatch), inventory (nats: a connector serves actions.provider.inventory.dispatch)`

// InternalKeyFile is internal.key_file, or its default under store.dir.
func (c *Config) InternalKeyFile() string {
	if c.Internal.KeyFile != "" {
		return c.Internal.KeyFile
	}
	return filepath.Join(c.Store.Dir, InternalKeyName)
}

// Load reads and validates a configuration file.
func Load(path string) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(src, path)
}

// Parse parses and validates HCL source; filename is used in diagnostics.
// Every problem it can find is reported, sorted by position: a syntax
// error ends parsing, but a value of the wrong type or an unknown key does
// not stop the checks of everything else (what failed to decode takes its
// default, and a check that would only repeat the decoding's complaint
// about the same key is left out).
func Parse(src []byte, filename string) (*Config, error) {
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, newError(diags)
	}
	var raw fileHCL
	decoded := gohcl.DecodeBody(f.Body, nil, &raw)
	c, built := raw.build()
	diags = append(decoded, unrepeated(built, decoded)...)
	if diags.HasErrors() {
		return nil, newError(diags)
	}
	return c, nil
}

// newError sorts diagnostics by file and position (those without a
// position last) into an Error.
func newError(diags hcl.Diagnostics) *Error {
	diags = slices.Clone(diags)
	slices.SortStableFunc(diags, func(a, b *hcl.Diagnostic) int {
		switch {
		case a.Subject == nil && b.Subject == nil:
			return 0
		case a.Subject == nil:
			return 1
		case b.Subject == nil:
			return -1
		}
		if c := strings.Compare(a.Subject.Filename, b.Subject.Filename); c != 0 {
			return c
		}
		if c := a.Subject.Start.Line - b.Subject.Start.Line; c != 0 {
			return c
		}
		return a.Subject.Start.Column - b.Subject.Start.Column
	})
	return &Error{diags}
}

// unrepeated drops the checks' diagnostics that repeat one of decoding's
// about the same attribute: a complaint about a value decoding found of
// the wrong type (the check saw the default or nothing), or about an
// attribute decoding reported missing.
func unrepeated(checks, decoded hcl.Diagnostics) hcl.Diagnostics {
	var out hcl.Diagnostics
	for _, c := range checks {
		if !slices.ContainsFunc(decoded, func(d *hcl.Diagnostic) bool { return repeats(c, d) }) {
			out = append(out, c)
		}
	}
	return out
}

func repeats(check, decoded *hcl.Diagnostic) bool {
	c, d := check.Subject, decoded.Subject
	if c == nil || d == nil || c.Filename != d.Filename {
		return false
	}
	within := c.Start.Byte <= d.Start.Byte && d.End.Byte <= c.End.Byte
	if c.Start.Byte == d.Start.Byte && c.End.Byte == d.End.Byte {
		return true
	}
	at, ok := check.Extra.(attrAt)
	switch {
	case !ok || !within:
		return false
	case at.written:
		// Decoding complained about this attribute's value.
		return true
	}
	return decoded.Summary == "Missing required argument" && strings.Contains(decoded.Detail, fmt.Sprintf("%q", at.name))
}

var (
	providerNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	blockNamePattern    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$`)
	currencyPattern     = regexp.MustCompile(`^[A-Z]{3}$`)
)

// Validate checks a configuration built in code (Dev, tests). Load and Parse
// validate already.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if _, err := subjects.New(c.Prefix); err != nil {
		add("subjects.prefix: %w", err)
	}
	if c.NATS.Embedded == (c.NATS.URL != "") {
		add("nats: exactly one of embedded and url")
	}
	if bad := NotNATS(c.NATS.URL); bad != "" {
		add("nats.url: %s is not a NATS server URL (nats://host:port)", bad)
	}
	if c.NATS.Replicas < 1 || c.NATS.Replicas > MaxReplicas || (c.NATS.Embedded && c.NATS.Replicas != 1) {
		add("nats.replicas: 1–%d, and 1 with the embedded server", MaxReplicas)
	}
	if c.Store.Dir == "" {
		add("store.dir: required")
	}
	switch c.Store.Journal {
	case JournalAuto, JournalLocal, "":
	case JournalReplicated:
		if c.NATS.Embedded {
			add("store.journal: a replicated journal needs nats.url")
		}
	default:
		add("store.journal: %q, %q or %q", JournalAuto, JournalLocal, JournalReplicated)
	}
	if c.Admission.MaxPayloadBytes < 1 || c.Admission.MaxPayloadBytes > MaxMaxPayloadBytes {
		add("admission.max_payload_bytes: 1–%d", MaxMaxPayloadBytes)
	}
	names := map[string]bool{}
	for _, p := range c.Providers {
		if !providerNamePattern.MatchString(p.Name) || names[p.Name] {
			add("provider %q: invalid or duplicate name", p.Name)
		}
		names[p.Name] = true
		if p.Timeout <= 0 || p.UnavailableRetry < 0 {
			add("provider %q: timeout must be > 0 and unavailable_retry ≥ 0", p.Name)
		}
		if _, ok := adapters.Lookup(p.Adapter); !ok {
			add("provider %q: unknown adapter %q (known: %s)", p.Name, p.Adapter, strings.Join(adapters.Kinds(), ", "))
		} else if p.Settings == nil {
			if _, err := adapters.Defaults(p.Adapter); err != nil {
				add("provider %q: the %s adapter needs settings of its own", p.Name, p.Adapter)
			}
		} else if p.Settings.Kind() != p.Adapter {
			add("provider %q: %s settings for a %s adapter", p.Name, p.Settings.Kind(), p.Adapter)
		}
	}
	for _, p := range c.roleProblems() {
		errs = append(errs, p)
	}
	for _, p := range c.Providers {
		if p.MaxInFlight < 1 || p.MaxInFlight > MaxMaxInFlight {
			add("provider %q: max_in_flight 1–%d", p.Name, MaxMaxInFlight)
		}
	}
	if c.Grounding.MaxCandidates < 1 || c.Grounding.MaxCandidates > MaxMaxCandidates || c.Grounding.SourceTimeout <= 0 {
		add("grounding: max_candidates 1–%d, source_timeout > 0", MaxMaxCandidates)
	}
	if c.Grounding.SourceMaxInFlight < 1 || c.Grounding.SourceMaxInFlight > MaxMaxInFlight {
		add("grounding: source_max_in_flight 1–%d", MaxMaxInFlight)
	}
	if c.Approval.TTL <= 0 || c.Reconciliation.Interval <= 0 || c.Reconciliation.MaxAttempts < 1 {
		add("approval.ttl, reconciliation.interval and reconciliation.max_attempts must be positive")
	}
	if c.Approval.ClockSkew < 0 || c.Approval.MaxGrantLifetime <= 0 {
		add("approval.clock_skew must be ≥ 0 and approval.max_grant_lifetime > 0")
	}
	if msg := c.Streams.problem(c.Approval.TTL); msg != "" {
		add("streams: %s", msg)
	}
	if attr, msg := c.retentionProblem(); msg != "" {
		add("retention.%s: %s", attr, msg)
	}
	if c.MCP != nil {
		for _, p := range append(c.MCP.problems(), c.mcpRoleProblems()...) {
			add("%s", p)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// natsSchemes are the URL schemes nats.go connects with.
var natsSchemes = []string{"nats", "tls", "ws", "wss"}

// NotNATS returns the first member of a comma-separated server URL list
// that nats.go could only time out on — a scheme other than nats://,
// tls://, ws:// or wss:// (http://, the metrics listener's), or no URL at
// all — with any password hidden; "" when every member is one (host:port
// alone is, nats.go adds nats://).
func NotNATS(list string) string {
	if list == "" {
		return ""
	}
	for _, one := range strings.Split(list, ",") {
		one = strings.TrimSpace(one)
		if !strings.Contains(one, "://") {
			continue
		}
		u, err := url.Parse(one)
		if err != nil {
			return "a server URL that does not parse"
		}
		if !slices.Contains(natsSchemes, strings.ToLower(u.Scheme)) {
			return u.Redacted()
		}
	}
	return ""
}

// HostForKey returns the configured host with that public key.
func (c *Config) HostForKey(key string) (trust.Host, bool) {
	i := slices.IndexFunc(c.Hosts, func(h trust.Host) bool { return h.PublicKey == key })
	if i < 0 {
		return trust.Host{}, false
	}
	return c.Hosts[i], true
}
