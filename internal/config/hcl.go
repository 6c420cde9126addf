package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/trust"
	"github.com/portcullis/portcullis/stages/policy"
	"github.com/portcullis/portcullis/subjects"
)

// The HCL schema. Optional attributes are pointers so that "absent" (take
// the default) differs from "set to the zero value".
type fileHCL struct {
	NATS           *natsHCL           `hcl:"nats,block"`
	Store          *storeHCL          `hcl:"store,block"`
	Metrics        *metricsHCL        `hcl:"metrics,block"`
	Subjects       *subjectsHCL       `hcl:"subjects,block"`
	Admission      *admissionHCL      `hcl:"admission,block"`
	Hosts          []hostHCL          `hcl:"host,block"`
	Tenants        []tenantHCL        `hcl:"tenant,block"`
	Connectors     []connectorHCL     `hcl:"connector,block"`
	Resolvers      []roleHCL          `hcl:"resolver,block"`
	Sources        []roleHCL          `hcl:"source,block"`
	Operators      []roleHCL          `hcl:"operator,block"`
	Internal       *internalHCL       `hcl:"internal,block"`
	Streams        *streamsHCL        `hcl:"streams,block"`
	Policies       []policyHCL        `hcl:"managed_policy,block"`
	Providers      []providerHCL      `hcl:"provider,block"`
	Grounding      *groundingHCL      `hcl:"grounding,block"`
	Approval       *approvalHCL       `hcl:"approval,block"`
	Reconciliation *reconciliationHCL `hcl:"reconciliation,block"`
	Retention      *retentionHCL      `hcl:"retention,block"`
	MCP            *mcpHCL            `hcl:"mcp,block"`
}

type retentionHCL struct {
	Proposals     *string   `hcl:"proposals,optional"`
	Receipts      *string   `hcl:"receipts,optional"`
	SweepInterval *string   `hcl:"sweep_interval,optional"`
	Body          hcl.Body  `hcl:",body"`
	Range         hcl.Range `hcl:",def_range"`
}

type natsHCL struct {
	Embedded    *bool     `hcl:"embedded,optional"`
	Listen      *string   `hcl:"listen,optional"`
	StoreDir    *string   `hcl:"store_dir,optional"`
	SyncAlways  *bool     `hcl:"sync_always,optional"`
	URL         *string   `hcl:"url,optional"`
	Credentials *string   `hcl:"credentials,optional"`
	Replicas    *int      `hcl:"replicas,optional"`
	Auth        *bool     `hcl:"auth,optional"`
	TLS         *tlsHCL   `hcl:"tls,block"`
	Body        hcl.Body  `hcl:",body"`
	Range       hcl.Range `hcl:",def_range"`
}

type tlsHCL struct {
	CertFile *string   `hcl:"cert_file,optional"`
	KeyFile  *string   `hcl:"key_file,optional"`
	CAFile   *string   `hcl:"ca_file,optional"`
	Body     hcl.Body  `hcl:",body"`
	Range    hcl.Range `hcl:",def_range"`
}

type tenantHCL struct {
	Ref             string    `hcl:"ref,label"`
	SecurityDomains []string  `hcl:"security_domains"`
	Body            hcl.Body  `hcl:",body"`
	Range           hcl.Range `hcl:",def_range"`
}

type connectorHCL struct {
	Name      string    `hcl:"name,label"`
	PublicKey string    `hcl:"public_key"`
	Providers []string  `hcl:"providers"`
	Body      hcl.Body  `hcl:",body"`
	Range     hcl.Range `hcl:",def_range"`
}

type roleHCL struct {
	Name      string    `hcl:"name,label"`
	PublicKey string    `hcl:"public_key"`
	Body      hcl.Body  `hcl:",body"`
	Range     hcl.Range `hcl:",def_range"`
}

type internalHCL struct {
	KeyFile *string  `hcl:"key_file,optional"`
	Body    hcl.Body `hcl:",body"`
}

type streamsHCL struct {
	MaxAge          *string   `hcl:"max_age,optional"`
	IngressMaxBytes *string   `hcl:"ingress_max_bytes,optional"`
	IngressMaxMsgs  *int      `hcl:"ingress_max_msgs,optional"`
	HostHistoryMsgs *int      `hcl:"host_history_max_msgs,optional"`
	StageMaxBytes   *string   `hcl:"stage_max_bytes,optional"`
	HistoryMaxBytes *string   `hcl:"history_max_bytes,optional"`
	HostHistBytes   *string   `hcl:"host_history_max_bytes,optional"`
	HostPipeline    *int      `hcl:"host_pipeline_max_msgs,optional"`
	HostParked      *string   `hcl:"host_parked_max_bytes,optional"`
	HostHeld        *string   `hcl:"host_held_max_bytes,optional"`
	HostIncidents   *int      `hcl:"host_incident_rate,optional"`
	Body            hcl.Body  `hcl:",body"`
	Range           hcl.Range `hcl:",def_range"`
}

type storeHCL struct {
	Dir     *string  `hcl:"dir,optional"`
	Journal *string  `hcl:"journal,optional"`
	Body    hcl.Body `hcl:",body"`
}

type metricsHCL struct {
	Listen *string  `hcl:"listen,optional"`
	Body   hcl.Body `hcl:",body"`
}

type subjectsHCL struct {
	Prefix *string  `hcl:"prefix,optional"`
	Body   hcl.Body `hcl:",body"`
}

type admissionHCL struct {
	AllowUnsigned   *bool     `hcl:"allow_unsigned,optional"`
	MaxPayloadBytes *int      `hcl:"max_payload_bytes,optional"`
	Body            hcl.Body  `hcl:",body"`
	Range           hcl.Range `hcl:",def_range"`
}

type hostHCL struct {
	Name      string    `hcl:"name,label"`
	PublicKey string    `hcl:"public_key"`
	Tenants   []string  `hcl:"tenants"`
	Body      hcl.Body  `hcl:",body"`
	Range     hcl.Range `hcl:",def_range"`
}

type policyHCL struct {
	Name                           string            `hcl:"name,label"`
	SecurityDomains                *[]string         `hcl:"security_domains,optional"`
	Disabled                       *bool             `hcl:"disabled,optional"`
	AutomaticApprovalForbidden     *bool             `hcl:"automatic_approval_forbidden,optional"`
	LiveActionsForbidden           *bool             `hcl:"live_actions_forbidden,optional"`
	AllowedProviders               *[]string         `hcl:"allowed_providers,optional"`
	AllowedCapabilities            *[]string         `hcl:"allowed_capabilities,optional"`
	AllowedEnvironments            *[]string         `hcl:"allowed_environments,optional"`
	MinimumAuthenticationAssurance *string           `hcl:"minimum_authentication_assurance,optional"`
	MaxExternalSpend               *map[string]int64 `hcl:"max_external_spend,optional"`
	Body                           hcl.Body          `hcl:",body"`
	Range                          hcl.Range         `hcl:",def_range"`
}

type providerHCL struct {
	Name             string  `hcl:"name,label"`
	Adapter          *string `hcl:"adapter,optional"`
	Timeout          *string `hcl:"timeout,optional"`
	UnavailableRetry *string `hcl:"unavailable_retry,optional"`
	MaxInFlight      *int    `hcl:"max_in_flight,optional"`
	// Rest is what the adapter kind decodes itself (adapters.Kind).
	Rest  hcl.Body  `hcl:",remain"`
	Body  hcl.Body  `hcl:",body"`
	Range hcl.Range `hcl:",def_range"`
}

type groundingHCL struct {
	MaxCandidates     *int     `hcl:"max_candidates,optional"`
	SourceTimeout     *string  `hcl:"source_timeout,optional"`
	SourceMaxInFlight *int     `hcl:"source_max_in_flight,optional"`
	Body              hcl.Body `hcl:",body"`
}

type approvalHCL struct {
	TTL              *string   `hcl:"ttl,optional"`
	ClockSkew        *string   `hcl:"clock_skew,optional"`
	MaxGrantLifetime *string   `hcl:"max_grant_lifetime,optional"`
	Body             hcl.Body  `hcl:",body"`
	Range            hcl.Range `hcl:",def_range"`
}

type reconciliationHCL struct {
	Interval    *string  `hcl:"interval,optional"`
	MaxAttempts *int     `hcl:"max_attempts,optional"`
	Body        hcl.Body `hcl:",body"`
}

// blockAt is where a block is written.
type blockAt struct {
	body hcl.Body
	r    hcl.Range
}

// diags collects errors pinned to the source range of an attribute.
type diags struct{ hcl.Diagnostics }

func (d *diags) at(body hcl.Body, attr string, format string, args ...any) {
	r, written := attrRange(body, attr)
	d.Diagnostics = append(d.Diagnostics, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Invalid value for " + attr,
		Detail:   fmt.Sprintf(format, args...),
		Subject:  r,
		Extra:    attrAt{name: attr, written: written},
	})
}

// attrAt is the Extra of a diagnostic about an attribute: written is true
// when its Subject is the attribute's value, false when the attribute is
// absent and the Subject is its block's body.
type attrAt struct {
	name    string
	written bool
}

func (d *diags) atRange(r hcl.Range, summary, format string, args ...any) {
	d.Diagnostics = append(d.Diagnostics, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(format, args...),
		Subject:  r.Ptr(),
	})
}

// attrRange finds an attribute's source range in a native-syntax body
// (written), or the body's own range if it is not there.
func attrRange(body hcl.Body, name string) (r *hcl.Range, written bool) {
	sb, ok := body.(*hclsyntax.Body)
	if !ok {
		return nil, false
	}
	if a, ok := sb.Attributes[name]; ok {
		r := a.Expr.Range()
		return &r, true
	}
	br := sb.Range()
	return &br, false
}

func (d *diags) duration(body hcl.Body, attr string, v *string, def time.Duration) time.Duration {
	if v == nil {
		return def
	}
	t, err := time.ParseDuration(*v)
	if err != nil || t <= 0 {
		d.at(body, attr, "%q is not a positive duration such as \"2s\" or \"10m\"", *v)
		return def
	}
	return t
}

// nonNegative is duration for a value that may be zero.
func (d *diags) nonNegative(body hcl.Body, attr string, v *string, def time.Duration) time.Duration {
	if v == nil {
		return def
	}
	t, err := time.ParseDuration(*v)
	if err != nil || t < 0 {
		d.at(body, attr, "%q is not a duration ≥ 0 such as \"0s\" or \"30s\"", *v)
		return def
	}
	return t
}

func (d *diags) size(body hcl.Body, attr string, v *string, def int64) int64 {
	if v == nil {
		return def
	}
	n, err := ParseSize(*v)
	if err != nil {
		d.at(body, attr, "%v", err)
		return def
	}
	return n
}

func (d *diags) intIn(body hcl.Body, attr string, v *int, def, lo, hi int) int {
	if v == nil {
		return def
	}
	if *v < lo || *v > hi {
		d.at(body, attr, "must be between %d and %d", lo, hi)
		return def
	}
	return *v
}

func or[T any](v *T, def T) T {
	if v == nil {
		return def
	}
	return *v
}

func (f *fileHCL) build() (*Config, hcl.Diagnostics) {
	c := Defaults()
	var d diags
	if n := f.NATS; n != nil {
		c.NATS.URL = or(n.URL, "")
		c.NATS.Embedded = or(n.Embedded, c.NATS.URL == "")
		c.NATS.Listen = or(n.Listen, c.NATS.Listen)
		c.NATS.StoreDir = or(n.StoreDir, c.NATS.StoreDir)
		c.NATS.SyncAlways = or(n.SyncAlways, false)
		c.NATS.Credentials = or(n.Credentials, "")
		c.NATS.Replicas = d.intIn(n.Body, "replicas", n.Replicas, 1, 1, MaxReplicas)
		c.NATS.Auth = or(n.Auth, true)
		if t := n.TLS; t != nil {
			c.NATS.TLS = &TLS{CertFile: or(t.CertFile, ""), KeyFile: or(t.KeyFile, ""), CAFile: or(t.CAFile, "")}
		}
		if c.NATS.Embedded && c.NATS.URL != "" {
			d.at(n.Body, "url", "url and embedded = true exclude each other")
		}
		if !c.NATS.Embedded && c.NATS.URL == "" {
			d.at(n.Body, "embedded", "embedded = false needs url")
		}
		if c.NATS.Embedded && c.NATS.Replicas != 1 {
			d.at(n.Body, "replicas", "the embedded server is a single node: replicas must be 1")
		}
		if c.NATS.Embedded && c.NATS.Listen == "" {
			d.at(n.Body, "listen", "the embedded server needs a listen address")
		}
		if c.NATS.Credentials != "" && c.NATS.URL == "" {
			d.at(n.Body, "credentials", "credentials go with url")
		}
		if bad := NotNATS(c.NATS.URL); bad != "" {
			d.at(n.Body, "url", "%s is not a NATS server URL: give nats://host:port (tls://, ws:// and wss:// work too); an http:// address (the /metrics listener) is not NATS", bad)
		}
	}
	if s := f.Store; s != nil {
		c.Store.Dir = or(s.Dir, c.Store.Dir)
		if c.Store.Dir == "" {
			d.at(s.Body, "dir", "must not be empty")
		}
		c.Store.Journal = or(s.Journal, c.Store.Journal)
		switch c.Store.Journal {
		case JournalAuto, JournalLocal:
		case JournalReplicated:
			if c.NATS.Embedded {
				d.at(s.Body, "journal", "the embedded server serves one processor: a replicated journal needs nats.url")
			}
		default:
			d.at(s.Body, "journal", "must be %q, %q or %q", JournalAuto, JournalLocal, JournalReplicated)
		}
	}
	if m := f.Metrics; m != nil {
		c.Metrics.Listen = or(m.Listen, c.Metrics.Listen)
	}
	if s := f.Subjects; s != nil {
		c.Prefix = or(s.Prefix, c.Prefix)
		if _, err := subjects.New(c.Prefix); err != nil {
			d.at(s.Body, "prefix", "must be one or more dot-separated tokens of letters, digits, _ and -")
		}
	}
	if a := f.Admission; a != nil {
		c.Admission.AllowUnsigned = or(a.AllowUnsigned, false)
		c.Admission.MaxPayloadBytes = d.intIn(a.Body, "max_payload_bytes", a.MaxPayloadBytes, DefaultMaxPayloadBytes, 1, MaxMaxPayloadBytes)
	}
	// Role and tenant blocks: their cross-block rules live in roleProblems,
	// shared with Validate; blocks remembers where each one is written.
	blocks := map[[2]string]blockAt{}
	at := func(kind, label string, body hcl.Body, r hcl.Range) {
		if _, dup := blocks[[2]string{kind, label}]; !dup {
			blocks[[2]string{kind, label}] = blockAt{body, r}
		}
	}
	for _, h := range f.Hosts {
		c.Hosts = append(c.Hosts, trust.Host{Name: h.Name, PublicKey: h.PublicKey, Tenants: h.Tenants})
		at(KindHost, h.Name, h.Body, h.Range)
	}
	for _, t := range f.Tenants {
		c.Tenants = append(c.Tenants, trust.Tenant{Ref: t.Ref, SecurityDomains: t.SecurityDomains})
		at("tenant", t.Ref, t.Body, t.Range)
	}
	for _, x := range f.Connectors {
		c.Connectors = append(c.Connectors, Connector{Name: x.Name, PublicKey: x.PublicKey, Providers: x.Providers})
		at(KindConnector, x.Name, x.Body, x.Range)
	}
	for kind, list := range map[string]struct {
		raw []roleHCL
		dst *[]Role
	}{KindResolver: {f.Resolvers, &c.Resolvers}, KindSource: {f.Sources, &c.Sources}, KindOperator: {f.Operators, &c.Operators}} {
		for _, x := range list.raw {
			*list.dst = append(*list.dst, Role{Name: x.Name, PublicKey: x.PublicKey})
			at(kind, x.Name, x.Body, x.Range)
		}
	}
	if a := f.Admission; a != nil {
		at("admission", "", a.Body, a.Range)
	}
	if n := f.NATS; n != nil {
		at("nats", "", n.Body, n.Range)
		if n.TLS != nil {
			blocks[[2]string{"nats", "tls"}] = blockAt{n.TLS.Body, n.TLS.Range}
		}
	}
	if i := f.Internal; i != nil {
		c.Internal.KeyFile = or(i.KeyFile, "")
		if i.KeyFile != nil && *i.KeyFile == "" {
			d.at(i.Body, "key_file", "must not be empty (omit it for the default <store.dir>/%s)", InternalKeyName)
		}
	}
	for _, p := range f.Policies {
		c.Policies = append(c.Policies, p.build(&d, c.Policies))
	}
	for _, p := range f.Providers {
		c.Providers = append(c.Providers, p.build(&d, c.Providers))
	}
	if g := f.Grounding; g != nil {
		c.Grounding.MaxCandidates = d.intIn(g.Body, "max_candidates", g.MaxCandidates, DefaultMaxCandidates, 1, MaxMaxCandidates)
		c.Grounding.SourceTimeout = d.duration(g.Body, "source_timeout", g.SourceTimeout, DefaultSourceTimeout)
		c.Grounding.SourceMaxInFlight = d.intIn(g.Body, "source_max_in_flight", g.SourceMaxInFlight, DefaultSourceMaxInFlight, 1, MaxMaxInFlight)
	}
	if a := f.Approval; a != nil {
		c.Approval.TTL = d.duration(a.Body, "ttl", a.TTL, DefaultApprovalTTL)
		c.Approval.ClockSkew = d.nonNegative(a.Body, "clock_skew", a.ClockSkew, DefaultClockSkew)
		c.Approval.MaxGrantLifetime = d.duration(a.Body, "max_grant_lifetime", a.MaxGrantLifetime, DefaultMaxGrantLifetime)
	}
	if st := f.Streams; st != nil {
		c.Streams.MaxAge = d.duration(st.Body, "max_age", st.MaxAge, DefaultStreamMaxAge)
		c.Streams.IngressMaxBytes = d.size(st.Body, "ingress_max_bytes", st.IngressMaxBytes, DefaultIngressMaxBytes)
		c.Streams.IngressMaxMsgs = int64(d.intIn(st.Body, "ingress_max_msgs", st.IngressMaxMsgs, DefaultIngressMaxMsgs, 1, 100_000_000))
		c.Streams.HostHistoryMaxMsgs = int64(d.intIn(st.Body, "host_history_max_msgs", st.HostHistoryMsgs, DefaultHostHistoryMsgs, 10, 100_000_000))
		c.Streams.StageMaxBytes = d.size(st.Body, "stage_max_bytes", st.StageMaxBytes, DefaultStageMaxBytes)
		c.Streams.HistoryMaxBytes = d.size(st.Body, "history_max_bytes", st.HistoryMaxBytes, DefaultHistoryMaxBytes)
		c.Streams.HostHistoryMaxBytes = d.size(st.Body, "host_history_max_bytes", st.HostHistBytes, DefaultHostHistoryBytes)
		c.Streams.HostPipelineMaxMsgs = int64(d.intIn(st.Body, "host_pipeline_max_msgs", st.HostPipeline, DefaultHostPipelineMsgs, 1, 100_000_000))
		c.Streams.HostParkedMaxBytes = d.size(st.Body, "host_parked_max_bytes", st.HostParked, DefaultHostParkedBytes)
		c.Streams.HostHeldMaxBytes = d.size(st.Body, "host_held_max_bytes", st.HostHeld, DefaultHostHeldBytes)
		c.Streams.HostIncidentRate = d.intIn(st.Body, "host_incident_rate", st.HostIncidents, DefaultHostIncidentRate, 1, 1_000_000)
		if msg := c.Streams.problem(c.Approval.TTL); msg != "" {
			d.atRange(st.Range, "Invalid streams", "%s", msg)
		}
	} else if msg := c.Streams.problem(c.Approval.TTL); msg != "" && f.Approval != nil {
		d.at(f.Approval.Body, "ttl", "%s (set streams.max_age)", msg)
	}
	for _, p := range c.roleProblems() {
		b, ok := blocks[[2]string{p.block, p.label}]
		if p.block == "nats" && p.attr == "tls" {
			if tb, ok := blocks[[2]string{"nats", "tls"}]; ok {
				d.atRange(tb.r, "Invalid tls", "%s", p.msg)
				continue
			}
		}
		switch {
		case ok && p.attr != "":
			d.at(b.body, p.attr, "%s", p.msg)
		case ok:
			d.atRange(b.r, "Invalid "+p.block, "%s", p.msg)
		case p.block == "metrics" && f.Metrics != nil:
			d.at(f.Metrics.Body, p.attr, "%s", p.msg)
		default:
			// A default value is at fault (no block to point at).
			d.Diagnostics = append(d.Diagnostics, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid configuration", Detail: p.Error()})
		}
	}
	if r := f.Reconciliation; r != nil {
		c.Reconciliation.Interval = d.duration(r.Body, "interval", r.Interval, DefaultReconcileEvery)
		c.Reconciliation.MaxAttempts = d.intIn(r.Body, "max_attempts", r.MaxAttempts, DefaultReconcileMax, 1, 1000)
	}
	if r := f.Retention; r != nil {
		// 0 (absent): derived from streams and approval (RetentionHorizons).
		c.Retention.Proposals = d.duration(r.Body, "proposals", r.Proposals, 0)
		c.Retention.Receipts = d.duration(r.Body, "receipts", r.Receipts, 0)
		c.Retention.SweepInterval = d.duration(r.Body, "sweep_interval", r.SweepInterval, DefaultSweepInterval)
		if attr, msg := c.retentionProblem(); msg != "" {
			d.at(r.Body, attr, "%s", msg)
		}
	}
	if m := f.MCP; m != nil {
		c.MCP = m.build(&d)
		m.report(&d, c.mcpRoleProblems())
	}
	return c, d.Diagnostics
}

func (p *policyHCL) build(d *diags, prev []policy.ManagedPolicy) policy.ManagedPolicy {
	if !blockNamePattern.MatchString(p.Name) || slices.ContainsFunc(prev, func(o policy.ManagedPolicy) bool { return o.Name == p.Name }) {
		d.atRange(p.Range, "Invalid managed_policy", "name %q is invalid or repeated", p.Name)
	}
	m := policy.ManagedPolicy{
		Name:                           p.Name,
		Disabled:                       or(p.Disabled, false),
		AutomaticApprovalForbidden:     or(p.AutomaticApprovalForbidden, false),
		LiveActionsForbidden:           or(p.LiveActionsForbidden, false),
		MinimumAuthenticationAssurance: or(p.MinimumAuthenticationAssurance, ""),
	}
	list := func(attr string, v *[]string, check func(string) bool) []string {
		if v == nil {
			return nil
		}
		out := []string{}
		for _, s := range *v {
			if check != nil && !check(s) {
				d.at(p.Body, attr, "%q is not allowed here", s)
			}
			out = append(out, schema.NormalizeName(s))
		}
		return out
	}
	m.SecurityDomains = nil
	if p.SecurityDomains != nil {
		// An empty list would make a restriction apply nowhere: fail
		// loudly rather than open.
		if len(*p.SecurityDomains) == 0 || slices.Contains(*p.SecurityDomains, "") {
			d.at(p.Body, "security_domains", "list non-empty security_domain_ref values, or omit the key to apply everywhere")
		}
		m.SecurityDomains = append([]string{}, *p.SecurityDomains...)
	}
	m.AllowedProviders = list("allowed_providers", p.AllowedProviders, nil)
	m.AllowedCapabilities = list("allowed_capabilities", p.AllowedCapabilities, nil)
	m.AllowedEnvironments = list("allowed_environments", p.AllowedEnvironments, func(s string) bool {
		e := schema.NormalizeName(s)
		return e == schema.EnvMock || e == schema.EnvTest || e == schema.EnvLive
	})
	if a := m.MinimumAuthenticationAssurance; a != "" && schema.AssuranceRank(a) < 0 {
		d.at(p.Body, "minimum_authentication_assurance", "must be none, session, biometric or managed")
	}
	if p.MaxExternalSpend != nil {
		m.MaxExternalSpend = map[string]int64{}
		for cur, amt := range *p.MaxExternalSpend {
			if !currencyPattern.MatchString(cur) || amt < 0 || amt > schema.MaxSpendMinor {
				d.at(p.Body, "max_external_spend", "%s: currency must be three capital letters and the ceiling 0 … 2^53−1 minor units", cur)
			}
			m.MaxExternalSpend[cur] = amt
		}
	}
	return m
}

func (p *providerHCL) build(d *diags, prev []Provider) Provider {
	if !providerNamePattern.MatchString(p.Name) || slices.ContainsFunc(prev, func(o Provider) bool { return o.Name == p.Name }) {
		d.atRange(p.Range, "Invalid provider", "provider name %q must match %s and be unique", p.Name, providerNamePattern)
	}
	out := Provider{
		Name:             p.Name,
		Adapter:          or(p.Adapter, adapters.KindNATS),
		Timeout:          d.duration(p.Body, "timeout", p.Timeout, DefaultProviderTimeout),
		UnavailableRetry: DefaultUnavailableRetry,
		MaxInFlight:      d.intIn(p.Body, "max_in_flight", p.MaxInFlight, DefaultMaxInFlight, 1, MaxMaxInFlight),
	}
	if p.UnavailableRetry != nil {
		if t, err := time.ParseDuration(*p.UnavailableRetry); err != nil || t < 0 {
			d.at(p.Body, "unavailable_retry", "%q is not a duration ≥ 0", *p.UnavailableRetry)
		} else {
			out.UnavailableRetry = t
		}
	}
	if k, ok := adapters.Lookup(out.Adapter); !ok {
		d.at(p.Body, "adapter", "must be one of %s", strings.Join(adapters.Kinds(), ", "))
	} else {
		s, diags := k.Decode(p.Rest)
		d.Diagnostics = append(d.Diagnostics, diags...)
		out.Settings = s
	}
	return out
}
