package config

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/portcullis/portcullis/schema/trust"
)

var (
	// hostNamePattern: a host's name is the <h> token of its subjects.
	hostNamePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	// sourceNamePattern: a source's name is its candidate_source name.
	sourceNamePattern = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)
)

// Block kinds of the five roles (SPEC §2.8).
const (
	KindHost      = "host"
	KindConnector = "connector"
	KindResolver  = "resolver"
	KindSource    = "source"
	KindOperator  = "operator"
)

// problem is one semantic error of a configuration, located by block and
// attribute so that the HCL loader can point at its file:line.
type problem struct {
	block string // "" for a top-level block named by attr's prefix
	label string
	attr  string // "" for the block itself
	msg   string
}

func (p problem) Error() string {
	where := p.block
	if p.label != "" {
		where += " " + strconv.Quote(p.label)
	}
	if p.attr != "" {
		if where != "" {
			where += "."
		}
		where += p.attr
	}
	return where + ": " + p.msg
}

// RoleKey is one configured identity: its block kind, name and public key.
type RoleKey struct {
	Kind, Name, PublicKey string
}

// Roles lists every configured identity, hosts first.
func (c *Config) Roles() []RoleKey {
	var out []RoleKey
	for _, h := range c.Hosts {
		out = append(out, RoleKey{KindHost, h.Name, h.PublicKey})
	}
	for _, x := range c.Connectors {
		out = append(out, RoleKey{KindConnector, x.Name, x.PublicKey})
	}
	for _, x := range c.Resolvers {
		out = append(out, RoleKey{KindResolver, x.Name, x.PublicKey})
	}
	for _, x := range c.Sources {
		out = append(out, RoleKey{KindSource, x.Name, x.PublicKey})
	}
	for _, x := range c.Operators {
		out = append(out, RoleKey{KindOperator, x.Name, x.PublicKey})
	}
	return out
}

// Tenant returns the tenant block of a tenant_ref.
func (c *Config) Tenant(ref string) (trust.Tenant, bool) {
	i := slices.IndexFunc(c.Tenants, func(t trust.Tenant) bool { return t.Ref == ref })
	if i < 0 {
		return trust.Tenant{}, false
	}
	return c.Tenants[i], true
}

// Host returns the host block of that name.
func (c *Config) Host(name string) (trust.Host, bool) {
	i := slices.IndexFunc(c.Hosts, func(h trust.Host) bool { return h.Name == name })
	if i < 0 {
		return trust.Host{}, false
	}
	return c.Hosts[i], true
}

// Operator returns the operator with that public key.
func (c *Config) Operator(publicKey string) (Role, bool) {
	i := slices.IndexFunc(c.Operators, func(o Role) bool { return o.PublicKey == publicKey })
	if i < 0 {
		return Role{}, false
	}
	return c.Operators[i], true
}

// roleProblems checks the trust configuration across blocks: names and
// keys unique across the five role kinds, every host's tenants declared,
// connectors serving configured providers, each provider served by at most
// one connector block and at most one resolver block (SPEC §2.8: each
// role has its own NATS account), and a NATS listener that is
// authenticated unless it is loopback-only.
func (c *Config) roleProblems() []problem {
	var ps []problem
	add := func(block, label, attr, format string, args ...any) {
		ps = append(ps, problem{block, label, attr, fmt.Sprintf(format, args...)})
	}
	names := map[string]string{}
	keys := map[string]string{}
	for _, r := range c.Roles() {
		switch r.Kind {
		case KindHost:
			if !hostNamePattern.MatchString(r.Name) {
				add(r.Kind, r.Name, "", "a host's name is its subject token: 1–64 of A-Z a-z 0-9 _ -")
			}
		case KindSource:
			if !sourceNamePattern.MatchString(r.Name) {
				add(r.Kind, r.Name, "", "a source's name is its candidate_source: 1–64 of a-z 0-9 _ -")
			}
		default:
			if !blockNamePattern.MatchString(r.Name) {
				add(r.Kind, r.Name, "", "invalid name")
			}
		}
		if other, dup := names[r.Name]; dup {
			add(r.Kind, r.Name, "", "the name is taken by a %s block: names are unique across host, connector, resolver, source and operator", other)
		}
		names[r.Name] = r.Kind
		if !nkeys.IsValidPublicUserKey(r.PublicKey) {
			add(r.Kind, r.Name, "public_key", "must be an ed25519 public key in NATS nkey form (starts with U; `processor keygen %s` makes one)", r.Kind)
		} else if other, dup := keys[r.PublicKey]; dup {
			add(r.Kind, r.Name, "public_key", "the key is %s's too: every role has its own key", other)
		}
		keys[r.PublicKey] = r.Kind + " " + strconv.Quote(r.Name)
	}
	for _, h := range c.Hosts {
		if len(h.Tenants) == 0 || slices.Contains(h.Tenants, "") {
			add(KindHost, h.Name, "tenants", "list at least one non-empty tenant_ref")
		}
		for _, t := range h.Tenants {
			if _, ok := c.Tenant(t); !ok && t != "" {
				add(KindHost, h.Name, "tenants", "tenant %q has no tenant block (tenant %q { security_domains = [...] })", t, t)
			}
		}
	}
	seen := map[string]bool{}
	for _, t := range c.Tenants {
		if t.Ref == "" || len(t.Ref) > 512 || seen[t.Ref] {
			add("tenant", t.Ref, "", "a tenant_ref label must be non-empty, at most 512 bytes and unique")
		}
		seen[t.Ref] = true
		if len(t.SecurityDomains) == 0 || slices.Contains(t.SecurityDomains, "") {
			add("tenant", t.Ref, "security_domains", "list at least one non-empty security_domain_ref")
		}
	}
	// One connector block per provider, one resolver block: the processor's
	// NATS account imports each served subject from exactly one role's
	// account. Two imports of one subject would hand every request to both
	// accounts (queue groups do not span accounts): two dispatches.
	served := map[string]string{}
	for _, x := range c.Connectors {
		if len(x.Providers) == 0 {
			add(KindConnector, x.Name, "providers", "list the providers this connector serves")
		}
		for _, p := range x.Providers {
			if _, ok := c.Provider(p); !ok {
				add(KindConnector, x.Name, "providers", "provider %q is not configured", p)
			}
			switch other, dup := served[p]; {
			case dup && other == x.Name:
				add(KindConnector, x.Name, "providers", "provider %q is listed twice", p)
			case dup:
				add(KindConnector, x.Name, "providers", "provider %q is served by connector %q already: one connector block per provider (for availability, run several connector processes with that block's key in one NATS queue group)", p, other)
			}
			served[p] = x.Name
		}
	}
	for _, r := range c.Resolvers[min(1, len(c.Resolvers)):] {
		add(KindResolver, r.Name, "", "resolver %q is configured already: at most one resolver block (for availability, run several resolver processes with its key in one NATS queue group)", c.Resolvers[0].Name)
	}
	n := c.NATS
	if n.Embedded {
		if err := checkListen(n.Listen); err != nil {
			add("nats", "", "listen", "%v", err)
		} else if !n.Auth && !Loopback(n.Listen) {
			add("nats", "", "auth", "a listener on %s with auth = false would let anyone on the network act: authentication stays on unless listen is a loopback address", n.Listen)
		}
	}
	if c.Admission.AllowUnsigned && !n.onlyLocal() {
		where := "a server that is not on a loopback address"
		if n.Embedded {
			where = "a listener on " + n.Listen
		}
		add("admission", "", "allow_unsigned", "allow_unsigned = true with %s would let any client that can publish speak for any host's tenants unsigned: it is for local development only, with the embedded server on a loopback address", where)
	}
	if n.TLS != nil {
		t := n.TLS
		if (t.CertFile == "") != (t.KeyFile == "") {
			add("nats", "", "tls", "cert_file and key_file go together")
		}
		if n.Embedded && (t.CertFile == "" || t.CAFile == "") {
			add("nats", "", "tls", "the embedded server needs cert_file and key_file, and ca_file for the processor to verify it")
		}
		if !n.Embedded && t.CAFile == "" && t.CertFile == "" {
			add("nats", "", "tls", "with url, give ca_file (and cert_file/key_file for a client certificate)")
		}
	}
	if c.Metrics.Listen != "" {
		if err := checkListen(c.Metrics.Listen); err != nil {
			add("metrics", "", "listen", "%v", err)
		}
	}
	return ps
}

// checkListen checks a host:port listen address. Port 0 picks a free port.
func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%q: port must be 0–65535", addr)
	}
	if host != "" && net.ParseIP(host) == nil && !validHostname(host) {
		return fmt.Errorf("%q: not an IP address or host name", addr)
	}
	return nil
}

func validHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return false
			}
		}
	}
	return true
}

// Loopback reports whether a listen address accepts only local clients: its
// host is a loopback IP or "localhost" (an empty host, every interface, is
// not).
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// onlyLocal reports whether only local clients can reach the NATS server:
// the embedded one on a loopback listen address, or servers whose every
// url is a loopback address.
func (n NATS) onlyLocal() bool {
	if n.Embedded {
		return Loopback(n.Listen)
	}
	for _, u := range strings.Split(n.URL, ",") {
		parsed, err := url.Parse(strings.TrimSpace(u))
		if err != nil || parsed.Host == "" || !Loopback(hostPort(parsed.Host)) {
			return false
		}
	}
	return n.URL != ""
}

// hostPort adds a port to a host that has none, for loopback.
func hostPort(h string) string {
	if _, _, err := net.SplitHostPort(h); err == nil {
		return h
	}
	return net.JoinHostPort(h, "4222")
}

// IsLoopback reports whether the embedded listener accepts only local
// clients.
func (n NATS) IsLoopback() bool { return Loopback(n.Listen) }

// problem checks the stream limits against the approval TTL: a parked
// proposal's envelope must outlive its approval window twice over.
func (s Streams) problem(approvalTTL time.Duration) string {
	switch {
	case s.MaxAge < 2*approvalTTL:
		return fmt.Sprintf("max_age %s must be at least 2×approval.ttl (%s)", s.MaxAge, 2*approvalTTL)
	case s.IngressMaxBytes < MinStreamMaxBytes || s.StageMaxBytes < MinStreamMaxBytes || s.HistoryMaxBytes < MinStreamMaxBytes ||
		s.HostParkedMaxBytes < MinStreamMaxBytes || s.HostHeldMaxBytes < MinStreamMaxBytes:
		return "every max_bytes but host_history_max_bytes must be at least 1MiB"
	case s.HostHistoryMaxBytes < MinHostHistoryBytes:
		return fmt.Sprintf("host_history_max_bytes must be at least %d", MinHostHistoryBytes)
	case s.HostPipelineMaxMsgs < 1 || s.HostIncidentRate < 1:
		return "host_pipeline_max_msgs and host_incident_rate must be at least 1"
	}
	return ""
}

// ParseSize reads a byte size: a number with an optional unit, B, KB, MB,
// GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024).
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.TrimSpace(s[i:])
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size such as \"512MiB\" or \"1GiB\"", s)
	}
	mult := map[string]int64{"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
		"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[unit]
	if mult == 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size such as \"512MiB\" or \"1GiB\"", s)
	}
	return n * mult, nil
}
