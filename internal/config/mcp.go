package config

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	sjs "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/portcullis/portcullis/schema"
)

// MCP configures `processor mcp` (SPEC §7): the host it speaks as, the
// trusted context every proposal it sends carries, and the catalogue of
// tools it offers a model. Nothing here comes from a model: a tool's
// arguments are only its target and its payload.
type MCP struct {
	// Host is the host block whose key the server logs in and signs with.
	Host string
	// The trusted context of every proposal (SPEC §2.1 context).
	TenantRef, SecurityDomainRef, ActorRef, ActorAssurance string
	ScopeRef, PolicyRevision                               string
	// ApproverAssurance is the grant's authentication_assurance when the
	// user accepts an approval through elicitation (default session).
	ApproverAssurance string
	// GrantLifetime is the validity of such a grant (default 5m).
	GrantLifetime time.Duration
	// Wait bounds how long one tool call follows its proposal before it
	// answers "pending" (default 60s); the status tool follows it further.
	Wait  time.Duration
	Tools []MCPTool
}

// MCPTool is one action offered to a model as a tool.
type MCPTool struct {
	Name        string
	Description string
	Provider    string
	Capability  string
	Operation   string
	Environment string
	AccountRef  string
	// Approval is who approves a NEEDS_APPROVAL: MCPApproveUser (the user,
	// asked by elicitation) or MCPApprovePolicy (this configuration's
	// standing approval, a grant with authorization_method "policy" that
	// managed policies may forbid).
	Approval string
	// Grounding: exactly one of CandidateSource (the processor asks the
	// source), Candidates (the host's own bounded list) and Referent (a
	// fixed target: the model names none).
	CandidateSource string
	Candidates      []MCPCandidate
	Referent        string
	// PayloadSchema is the JSON Schema (draft 2020-12) of intent.payload.
	PayloadSchema string
	// Summary starts the display summary; SummaryFields name the payload
	// members appended to it ("Adjust stock: cedar — quantity: 20").
	Summary       string
	SummaryFields []string
}

// MCPCandidate is one target of a tool's own candidate list.
type MCPCandidate struct {
	Referent string
	Resource string // attributes.resource, what grounding matches
	Summary  string // shown to the user when asked to choose, and in every approval question naming it
	// Aliases are other words users say for this record ("cedar grade A
	// boards"). Each is sent as one more candidate entry of the same
	// referent, so that grounding's exact match binds the user's words to
	// it; two records sharing a word make that word ambiguous (a
	// clarification), as two records sharing a resource do.
	Aliases []string
}

// Entries is how many candidate entries the record sends: its resource and
// each alias.
func (c MCPCandidate) Entries() int { return 1 + len(c.Aliases) }

// Approval modes of a tool.
const (
	MCPApproveUser   = "user"
	MCPApprovePolicy = "policy"
)

// MCP defaults.
const (
	DefaultMCPActorAssurance    = "mcp-session"
	DefaultMCPScopeRef          = "policy-scope:mcp"
	DefaultMCPPolicyRevision    = "policy:mcp"
	DefaultMCPApproverAssurance = schema.AssuranceSession
	DefaultMCPGrantLifetime     = 5 * time.Minute
	DefaultMCPWait              = 60 * time.Second
)

// mcpToolNamePattern: MCP tool names (letters, digits, _ and -).
var mcpToolNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)

type mcpHCL struct {
	Host              string    `hcl:"host"`
	TenantRef         string    `hcl:"tenant_ref"`
	SecurityDomainRef string    `hcl:"security_domain_ref"`
	ActorRef          string    `hcl:"actor_ref"`
	ActorAssurance    *string   `hcl:"actor_assurance,optional"`
	ScopeRef          *string   `hcl:"scope_ref,optional"`
	PolicyRevision    *string   `hcl:"policy_revision,optional"`
	ApproverAssurance *string   `hcl:"approver_assurance,optional"`
	GrantLifetime     *string   `hcl:"grant_lifetime,optional"`
	Wait              *string   `hcl:"wait,optional"`
	Tools             []toolHCL `hcl:"tool,block"`
	Body              hcl.Body  `hcl:",body"`
	Range             hcl.Range `hcl:",def_range"`
}

type toolHCL struct {
	Name            string         `hcl:"name,label"`
	Description     string         `hcl:"description"`
	Provider        string         `hcl:"provider"`
	Capability      string         `hcl:"capability"`
	Operation       string         `hcl:"operation"`
	Environment     string         `hcl:"environment"`
	AccountRef      string         `hcl:"account_ref"`
	Approval        *string        `hcl:"approval,optional"`
	CandidateSource *string        `hcl:"candidate_source,optional"`
	Referent        *string        `hcl:"referent,optional"`
	PayloadSchema   string         `hcl:"payload_schema"`
	Summary         string         `hcl:"summary"`
	SummaryFields   *[]string      `hcl:"summary_fields,optional"`
	Candidates      []candidateHCL `hcl:"candidate,block"`
	Body            hcl.Body       `hcl:",body"`
	Range           hcl.Range      `hcl:",def_range"`
}

type candidateHCL struct {
	Referent string    `hcl:"referent,label"`
	Resource string    `hcl:"resource"`
	Summary  string    `hcl:"summary"`
	Aliases  *[]string `hcl:"aliases,optional"`
	Body     hcl.Body  `hcl:",body"`
	Range    hcl.Range `hcl:",def_range"`
}

func (m *mcpHCL) build(d *diags) *MCP {
	out := &MCP{
		Host: m.Host, TenantRef: m.TenantRef, SecurityDomainRef: m.SecurityDomainRef, ActorRef: m.ActorRef,
		ActorAssurance:    or(m.ActorAssurance, DefaultMCPActorAssurance),
		ScopeRef:          or(m.ScopeRef, DefaultMCPScopeRef),
		PolicyRevision:    or(m.PolicyRevision, DefaultMCPPolicyRevision),
		ApproverAssurance: or(m.ApproverAssurance, DefaultMCPApproverAssurance),
		GrantLifetime:     d.duration(m.Body, "grant_lifetime", m.GrantLifetime, DefaultMCPGrantLifetime),
		Wait:              d.duration(m.Body, "wait", m.Wait, DefaultMCPWait),
	}
	for _, t := range m.Tools {
		tool := MCPTool{
			Name: t.Name, Description: t.Description, Provider: t.Provider, Capability: t.Capability,
			Operation: t.Operation, Environment: t.Environment, AccountRef: t.AccountRef,
			Approval: or(t.Approval, MCPApproveUser), CandidateSource: or(t.CandidateSource, ""),
			Referent: or(t.Referent, ""), PayloadSchema: t.PayloadSchema, Summary: t.Summary,
			SummaryFields: or(t.SummaryFields, nil),
		}
		for _, c := range t.Candidates {
			tool.Candidates = append(tool.Candidates, MCPCandidate{Referent: c.Referent, Resource: c.Resource, Summary: c.Summary, Aliases: or(c.Aliases, nil)})
		}
		out.Tools = append(out.Tools, tool)
	}
	m.report(d, out.problems())
	return out
}

// report pins each problem to its block or attribute.
func (m *mcpHCL) report(d *diags, ps []mcpProblem) {
	for _, p := range ps {
		switch {
		case p.tool < 0:
			d.at(m.Body, p.attr, "%s", p.msg)
		case p.candidate >= 0:
			c := m.Tools[p.tool].Candidates[p.candidate]
			if p.attr == "" {
				d.atRange(c.Range, "Invalid candidate", "%s", p.msg)
			} else {
				d.at(c.Body, p.attr, "%s", p.msg)
			}
		case p.attr == "":
			d.atRange(m.Tools[p.tool].Range, "Invalid tool", "%s", p.msg)
		default:
			d.at(m.Tools[p.tool].Body, p.attr, "%s", p.msg)
		}
	}
}

// mcpProblem locates one problem of an mcp block: tool and candidate are
// indexes (-1: the mcp block itself, or the tool itself).
type mcpProblem struct {
	tool, candidate int
	attr, msg       string
}

// problems checks an MCP configuration on its own (Validate and the HCL
// loader share it); the cross-block checks (host, tenant, providers) are in
// mcpRoleProblems.
func (m *MCP) problems() []mcpProblem {
	var ps []mcpProblem
	top := func(attr, format string, args ...any) {
		ps = append(ps, mcpProblem{-1, -1, attr, fmt.Sprintf(format, args...)})
	}
	for attr, v := range map[string]string{"tenant_ref": m.TenantRef, "security_domain_ref": m.SecurityDomainRef,
		"actor_ref": m.ActorRef, "actor_assurance": m.ActorAssurance, "scope_ref": m.ScopeRef, "policy_revision": m.PolicyRevision} {
		if !refOK(v) {
			top(attr, "must be a non-empty single line of at most %d bytes", schema.MaxRefLen)
		}
	}
	if !hostNamePattern.MatchString(m.Host) {
		top("host", "must name a host block (1–64 of A-Z a-z 0-9 _ -)")
	}
	if r := schema.AssuranceRank(m.ApproverAssurance); r < 0 {
		top("approver_assurance", "must be none, session, biometric or managed")
	}
	if len(m.Tools) == 0 {
		top("tool", "an mcp block offers at least one tool")
	}
	seen := map[string]bool{}
	for i, t := range m.Tools {
		at := func(attr, format string, args ...any) {
			ps = append(ps, mcpProblem{i, -1, attr, fmt.Sprintf(format, args...)})
		}
		if !mcpToolNamePattern.MatchString(t.Name) || seen[t.Name] || t.Name == StatusToolName {
			at("", "tool name %q must match %s, be unique and not be %q", t.Name, mcpToolNamePattern, StatusToolName)
		}
		seen[t.Name] = true
		if strings.TrimSpace(t.Description) == "" {
			at("description", "describe the tool for a model: what it does, what its target is")
		}
		for attr, v := range map[string]string{"provider": t.Provider, "capability": t.Capability, "operation": t.Operation} {
			if n := schema.NormalizeName(v); n == "" || len(n) > schema.MaxNameLen {
				at(attr, "must be a non-empty name of at most %d bytes", schema.MaxNameLen)
			}
		}
		if e := schema.NormalizeName(t.Environment); e != schema.EnvMock && e != schema.EnvTest && e != schema.EnvLive {
			at("environment", "must be mock, test or live")
		}
		if !refOK(t.AccountRef) {
			at("account_ref", "must be a non-empty single line of at most %d bytes", schema.MaxRefLen)
		}
		if t.Approval != MCPApproveUser && t.Approval != MCPApprovePolicy {
			at("approval", "must be %q (ask the user by elicitation) or %q (this configuration's standing approval)", MCPApproveUser, MCPApprovePolicy)
		}
		kinds := 0
		for _, set := range []bool{t.CandidateSource != "", len(t.Candidates) > 0, t.Referent != ""} {
			if set {
				kinds++
			}
		}
		if kinds != 1 {
			at("", "ground the target in exactly one way: candidate_source, candidate blocks, or a fixed referent")
		}
		if t.CandidateSource != "" && !sourceNamePattern.MatchString(t.CandidateSource) {
			at("candidate_source", "must match %s", sourceNamePattern)
		}
		if t.Referent != "" && !refOK(t.Referent) {
			at("referent", "must be a single line of at most %d bytes", schema.MaxRefLen)
		}
		refs, summaries := map[string]bool{}, map[string]bool{}
		entries := 0
		for j, c := range t.Candidates {
			cat := func(attr, format string, args ...any) {
				ps = append(ps, mcpProblem{i, j, attr, fmt.Sprintf(format, args...)})
			}
			if !refOK(c.Referent) || refs[c.Referent] {
				cat("", "referent %q must be a unique single line of at most %d bytes", c.Referent, schema.MaxRefLen)
			}
			refs[c.Referent] = true
			if strings.TrimSpace(c.Resource) == "" {
				cat("resource", "must not be empty: grounding matches the target against it")
			}
			if !refOK(c.Summary) || summaries[c.Summary] || schema.HasInvisibleFormat(c.Summary) {
				cat("summary", "must be a unique, non-empty single line without invisible format characters: the user chooses by it")
			}
			summaries[c.Summary] = true
			for _, a := range c.Aliases {
				if strings.TrimSpace(a) == "" || len(a) > schema.MaxRefLen || strings.ContainsAny(a, "\r\n") {
					cat("aliases", "each alias is a non-empty single line of at most %d bytes: words users say for this record", schema.MaxRefLen)
					break
				}
			}
			entries += c.Entries()
		}
		if entries > MaxMaxCandidates {
			at("", "at most %d candidate entries (each candidate's resource and each of its aliases)", MaxMaxCandidates)
		}
		if msg := payloadSchemaProblem(t.PayloadSchema); msg != "" {
			at("payload_schema", "%s", msg)
		}
		if strings.TrimSpace(t.Summary) == "" || strings.ContainsAny(t.Summary, "\r\n") || schema.HasInvisibleFormat(t.Summary) {
			at("summary", "must be a non-empty single line without invisible format characters")
		}
		for _, f := range t.SummaryFields {
			if f == "" {
				at("summary_fields", "names payload members: none may be empty")
			}
		}
	}
	return ps
}

// StatusToolName is the tool that follows a pending proposal; no
// catalogue tool may take its name.
const StatusToolName = "portcullis_status"

// payloadSchemaProblem compiles a payload schema; "" when it is usable: a
// JSON Schema (2020-12) whose top level is an object schema.
func payloadSchemaProblem(src string) string {
	doc, err := sjs.UnmarshalJSON(bytes.NewReader([]byte(src)))
	if err != nil {
		return fmt.Sprintf("not JSON: %v", err)
	}
	obj, ok := doc.(map[string]any)
	if !ok || obj["type"] != "object" {
		return `must be a JSON Schema with "type": "object" (the payload is an object)`
	}
	c := sjs.NewCompiler()
	c.DefaultDraft(sjs.Draft2020)
	if err := c.AddResource("payload.json", doc); err != nil {
		return err.Error()
	}
	if _, err := c.Compile("payload.json"); err != nil {
		return fmt.Sprintf("not a valid JSON Schema: %v", err)
	}
	return ""
}

func refOK(s string) bool {
	return strings.TrimSpace(s) != "" && len(s) <= schema.MaxRefLen && !strings.ContainsAny(s, "\r\n")
}

// mcpRoleProblems checks the mcp block against the rest: it speaks as a
// configured host (unless input may be unsigned: run --dev) for one of
// its tenants and that tenant's security domain, and its tools name
// configured providers.
func (c *Config) mcpRoleProblems() []mcpProblem {
	m := c.MCP
	if m == nil {
		return nil
	}
	var ps []mcpProblem
	h, ok := c.Host(m.Host)
	switch {
	case !ok && !c.Admission.AllowUnsigned:
		ps = append(ps, mcpProblem{-1, -1, "host", fmt.Sprintf("no host block %q: the MCP server logs in and signs with a host's key", m.Host)})
	case ok && !h.Speaks(m.TenantRef):
		ps = append(ps, mcpProblem{-1, -1, "tenant_ref", fmt.Sprintf("host %q may not speak for this tenant (its tenants list)", m.Host)})
	case ok:
		if t, ok := c.Tenant(m.TenantRef); ok && !slices.Contains(t.SecurityDomains, m.SecurityDomainRef) {
			ps = append(ps, mcpProblem{-1, -1, "security_domain_ref", "not a security domain of the tenant block"})
		}
	}
	for i, t := range m.Tools {
		if _, ok := c.Provider(schema.NormalizeName(t.Provider)); !ok {
			ps = append(ps, mcpProblem{i, -1, "provider", fmt.Sprintf("no provider block %q", t.Provider)})
		}
		entries := 0
		for _, cd := range t.Candidates {
			entries += cd.Entries()
		}
		if entries > c.Grounding.MaxCandidates {
			ps = append(ps, mcpProblem{i, -1, "", fmt.Sprintf("%d candidate entries (resources and aliases), more than grounding.max_candidates (%d): every call would be GROUNDING_CANDIDATES_UNBOUNDED", entries, c.Grounding.MaxCandidates)})
		}
	}
	return ps
}

func (p mcpProblem) String() string {
	where := "mcp"
	if p.tool >= 0 {
		where += fmt.Sprintf(".tool[%d]", p.tool)
	}
	if p.candidate >= 0 {
		where += fmt.Sprintf(".candidate[%d]", p.candidate)
	}
	if p.attr != "" {
		where += "." + p.attr
	}
	return where + ": " + p.msg
}

// DevMCPHost is the host name `processor mcp --dev` proposes as. A --dev
// processor admits its unsigned messages and attributes them to it.
const DevMCPHost = "mcp-agent"

// DevMCP is the catalogue of `processor mcp --dev`, on the providers of
// Dev: adjust_stock (the fake provider "demo", approved by this
// configuration, so an unambiguous call ends CONFIRMED; "Lumber: Pine-8ft"
// is two records, so it asks which), and restart_service (the same
// provider, approved by the user: "payments API" is two services, "search
// API" one, whose restart asks the user to approve). Each record lists the
// words users say for it (docs/agents.md's table, checked by a test).
func DevMCP() *MCP {
	return &MCP{
		Host: DevMCPHost, TenantRef: "tenant:demo", SecurityDomainRef: "security-domain:demo", ActorRef: "actor:demo",
		ActorAssurance: DefaultMCPActorAssurance, ScopeRef: DefaultMCPScopeRef, PolicyRevision: DefaultMCPPolicyRevision,
		ApproverAssurance: DefaultMCPApproverAssurance, GrantLifetime: DefaultMCPGrantLifetime, Wait: DefaultMCPWait,
		Tools: []MCPTool{{
			Name: "adjust_stock",
			Description: "Adjust the stock count of one lumber item in the demo inventory by a quantity. " +
				`The items are "Lumber: Cedar-8ft-GradeA" ("cedar grade A"), "Lumber: Cedar-8ft-GradeB" ("cedar grade B") and ` +
				`"Lumber: Pine-8ft" ("pine 8ft": two records, in aisle 4 and in the lumber yard). Pass the user's own words as target. ` +
				"Approved in advance by the server's configuration.",
			Provider: "demo", Capability: "inventory.adjust", Operation: "adjust_stock", Environment: "test", AccountRef: "inventory:demo",
			Approval: MCPApprovePolicy,
			Candidates: []MCPCandidate{
				{Referent: "sku-1001", Resource: "Lumber: Cedar-8ft-GradeA", Summary: "Cedar board, 8 ft, grade A",
					Aliases: []string{"cedar grade A", "cedar grade A boards", "cedar 8ft grade A"}},
				{Referent: "sku-1002", Resource: "Lumber: Cedar-8ft-GradeB", Summary: "Cedar board, 8 ft, grade B",
					Aliases: []string{"cedar grade B", "cedar grade B boards", "cedar 8ft grade B"}},
				{Referent: "sku-2001", Resource: "Lumber: Pine-8ft", Summary: "Pine board, 8 ft, aisle 4",
					Aliases: []string{"pine 8ft", "pine boards", "pine 8ft aisle 4"}},
				{Referent: "sku-2002", Resource: "Lumber: Pine-8ft", Summary: "Pine board, 8 ft, lumber yard",
					Aliases: []string{"pine 8ft", "pine boards", "pine 8ft lumber yard"}},
			},
			PayloadSchema: `{"type": "object", "properties": {"quantity": {"type": "integer", "minimum": -1000, "maximum": 1000, ` +
				`"description": "boards to add (negative: remove)"}}, "required": ["quantity"], "additionalProperties": false}`,
			Summary: "Adjust stock", SummaryFields: []string{"quantity"},
		}, {
			Name: "restart_service",
			Description: "Restart one service of the demo deployment. " +
				`The services are "payments API" (a production and a staging service: "production payments API", "staging payments API") ` +
				`and "search API". Pass the user's own words as target. The user approves every restart.`,
			Provider: "demo", Capability: "ops.restart", Operation: "restart", Environment: "test", AccountRef: "ops:demo",
			Approval: MCPApproveUser,
			Candidates: []MCPCandidate{
				{Referent: "svc:payments-prod", Resource: "payments API", Summary: "payments API — production",
					Aliases: []string{"production payments API", "payments API production", "prod payments API"}},
				{Referent: "svc:payments-staging", Resource: "payments API", Summary: "payments API — staging",
					Aliases: []string{"staging payments API", "payments API staging"}},
				{Referent: "svc:search", Resource: "search API", Summary: "search API — production",
					Aliases: []string{"search"}},
			},
			PayloadSchema: `{"type": "object", "properties": {"reason": {"type": "string", "minLength": 1, "maxLength": 200, ` +
				`"description": "why, in a few words"}}, "required": ["reason"], "additionalProperties": false}`,
			Summary: "Restart", SummaryFields: []string{"reason"},
		}},
	}
}
