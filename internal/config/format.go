package config

import (
	"time"

	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

// Format renders a configuration as HCL that Parse reads back to the same
// configuration: every key written out, defaults included. It lets tools and
// tests hand a configuration built in code to a `processor` process.
func Format(c *Config) []byte {
	f := hclwrite.NewEmptyFile()
	root := f.Body()
	str := func(b *hclwrite.Body, k, v string) { b.SetAttributeValue(k, cty.StringVal(v)) }
	boolean := func(b *hclwrite.Body, k string, v bool) { b.SetAttributeValue(k, cty.BoolVal(v)) }
	num := func(b *hclwrite.Body, k string, v int64) { b.SetAttributeValue(k, cty.NumberIntVal(v)) }
	dur := func(b *hclwrite.Body, k string, d time.Duration) { str(b, k, d.String()) }
	list := func(b *hclwrite.Body, k string, v []string) {
		vals := make([]cty.Value, len(v))
		for i, s := range v {
			vals[i] = cty.StringVal(s)
		}
		if len(vals) == 0 {
			b.SetAttributeValue(k, cty.ListValEmpty(cty.String))
			return
		}
		b.SetAttributeValue(k, cty.ListVal(vals))
	}

	n := root.AppendNewBlock("nats", nil).Body()
	boolean(n, "embedded", c.NATS.Embedded)
	if c.NATS.Embedded {
		str(n, "listen", c.NATS.Listen)
		str(n, "store_dir", c.NATS.StoreDir)
		boolean(n, "sync_always", c.NATS.SyncAlways)
	} else {
		str(n, "url", c.NATS.URL)
		if c.NATS.Credentials != "" {
			str(n, "credentials", c.NATS.Credentials)
		}
	}
	num(n, "replicas", int64(c.NATS.Replicas))
	boolean(n, "auth", c.NATS.Auth)
	if t := c.NATS.TLS; t != nil {
		tb := n.AppendNewBlock("tls", nil).Body()
		for _, kv := range [][2]string{{"cert_file", t.CertFile}, {"key_file", t.KeyFile}, {"ca_file", t.CAFile}} {
			if kv[1] != "" {
				str(tb, kv[0], kv[1])
			}
		}
	}
	sb := root.AppendNewBlock("store", nil).Body()
	str(sb, "dir", c.Store.Dir)
	if c.Store.Journal != "" {
		str(sb, "journal", c.Store.Journal)
	}
	str(root.AppendNewBlock("metrics", nil).Body(), "listen", c.Metrics.Listen)
	str(root.AppendNewBlock("subjects", nil).Body(), "prefix", c.Prefix)
	a := root.AppendNewBlock("admission", nil).Body()
	boolean(a, "allow_unsigned", c.Admission.AllowUnsigned)
	num(a, "max_payload_bytes", int64(c.Admission.MaxPayloadBytes))
	for _, h := range c.Hosts {
		b := root.AppendNewBlock("host", []string{h.Name}).Body()
		str(b, "public_key", h.PublicKey)
		list(b, "tenants", h.Tenants)
	}
	for _, t := range c.Tenants {
		list(root.AppendNewBlock("tenant", []string{t.Ref}).Body(), "security_domains", t.SecurityDomains)
	}
	for _, x := range c.Connectors {
		b := root.AppendNewBlock("connector", []string{x.Name}).Body()
		str(b, "public_key", x.PublicKey)
		list(b, "providers", x.Providers)
	}
	for _, kind := range []struct {
		name  string
		roles []Role
	}{{KindResolver, c.Resolvers}, {KindSource, c.Sources}, {KindOperator, c.Operators}} {
		for _, x := range kind.roles {
			str(root.AppendNewBlock(kind.name, []string{x.Name}).Body(), "public_key", x.PublicKey)
		}
	}
	if c.Internal.KeyFile != "" {
		str(root.AppendNewBlock("internal", nil).Body(), "key_file", c.Internal.KeyFile)
	}
	st := root.AppendNewBlock("streams", nil).Body()
	dur(st, "max_age", c.Streams.MaxAge)
	num(st, "ingress_max_bytes", c.Streams.IngressMaxBytes)
	num(st, "stage_max_bytes", c.Streams.StageMaxBytes)
	num(st, "history_max_bytes", c.Streams.HistoryMaxBytes)
	for _, p := range c.Policies {
		b := root.AppendNewBlock("managed_policy", []string{p.Name}).Body()
		if p.SecurityDomains != nil {
			list(b, "security_domains", p.SecurityDomains)
		}
		boolean(b, "disabled", p.Disabled)
		boolean(b, "automatic_approval_forbidden", p.AutomaticApprovalForbidden)
		boolean(b, "live_actions_forbidden", p.LiveActionsForbidden)
		if p.AllowedProviders != nil {
			list(b, "allowed_providers", p.AllowedProviders)
		}
		if p.AllowedCapabilities != nil {
			list(b, "allowed_capabilities", p.AllowedCapabilities)
		}
		if p.AllowedEnvironments != nil {
			list(b, "allowed_environments", p.AllowedEnvironments)
		}
		if p.MinimumAuthenticationAssurance != "" {
			str(b, "minimum_authentication_assurance", p.MinimumAuthenticationAssurance)
		}
		if p.MaxExternalSpend != nil {
			m := map[string]cty.Value{}
			for cur, amt := range p.MaxExternalSpend {
				m[cur] = cty.NumberIntVal(amt)
			}
			if len(m) == 0 {
				b.SetAttributeValue("max_external_spend", cty.MapValEmpty(cty.Number))
			} else {
				b.SetAttributeValue("max_external_spend", cty.MapVal(m))
			}
		}
	}
	for _, p := range c.Providers {
		b := root.AppendNewBlock("provider", []string{p.Name}).Body()
		str(b, "adapter", p.Adapter)
		dur(b, "timeout", p.Timeout)
		dur(b, "unavailable_retry", p.UnavailableRetry)
		num(b, "max_in_flight", int64(p.MaxInFlight))
		if p.Settings != nil {
			p.Settings.Encode(b)
		}
	}
	g := root.AppendNewBlock("grounding", nil).Body()
	num(g, "max_candidates", int64(c.Grounding.MaxCandidates))
	dur(g, "source_timeout", c.Grounding.SourceTimeout)
	num(g, "source_max_in_flight", int64(c.Grounding.SourceMaxInFlight))
	ap := root.AppendNewBlock("approval", nil).Body()
	dur(ap, "ttl", c.Approval.TTL)
	dur(ap, "clock_skew", c.Approval.ClockSkew)
	dur(ap, "max_grant_lifetime", c.Approval.MaxGrantLifetime)
	r := root.AppendNewBlock("reconciliation", nil).Body()
	dur(r, "interval", c.Reconciliation.Interval)
	num(r, "max_attempts", int64(c.Reconciliation.MaxAttempts))
	ret := root.AppendNewBlock("retention", nil).Body()
	// Unset horizons stay unset: derived from streams and approval.
	if c.Retention.Proposals != 0 {
		dur(ret, "proposals", c.Retention.Proposals)
	}
	if c.Retention.Receipts != 0 {
		dur(ret, "receipts", c.Retention.Receipts)
	}
	dur(ret, "sweep_interval", c.Retention.SweepInterval)
	if m := c.MCP; m != nil {
		b := root.AppendNewBlock("mcp", nil).Body()
		str(b, "host", m.Host)
		str(b, "tenant_ref", m.TenantRef)
		str(b, "security_domain_ref", m.SecurityDomainRef)
		str(b, "actor_ref", m.ActorRef)
		str(b, "actor_assurance", m.ActorAssurance)
		str(b, "scope_ref", m.ScopeRef)
		str(b, "policy_revision", m.PolicyRevision)
		str(b, "approver_assurance", m.ApproverAssurance)
		dur(b, "grant_lifetime", m.GrantLifetime)
		dur(b, "wait", m.Wait)
		for _, t := range m.Tools {
			tb := b.AppendNewBlock("tool", []string{t.Name}).Body()
			str(tb, "description", t.Description)
			str(tb, "provider", t.Provider)
			str(tb, "capability", t.Capability)
			str(tb, "operation", t.Operation)
			str(tb, "environment", t.Environment)
			str(tb, "account_ref", t.AccountRef)
			str(tb, "approval", t.Approval)
			if t.CandidateSource != "" {
				str(tb, "candidate_source", t.CandidateSource)
			}
			if t.Referent != "" {
				str(tb, "referent", t.Referent)
			}
			str(tb, "payload_schema", t.PayloadSchema)
			str(tb, "summary", t.Summary)
			if t.SummaryFields != nil {
				list(tb, "summary_fields", t.SummaryFields)
			}
			for _, c := range t.Candidates {
				cb := tb.AppendNewBlock("candidate", []string{c.Referent}).Body()
				str(cb, "resource", c.Resource)
				str(cb, "summary", c.Summary)
				if c.Aliases != nil {
					list(cb, "aliases", c.Aliases)
				}
			}
		}
	}
	return hclwrite.Format(f.Bytes())
}
