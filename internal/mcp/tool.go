package mcp

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
	sjs "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/grounding"
)

// ErrBadArguments: a tool call's arguments break the tool's input schema;
// nothing was published.
var ErrBadArguments = errors.New("mcp: bad arguments")

// Argument names. The model gives only these: what the user called the
// target, the payload, and after a clarification this server gave, the
// user's choice with that clarification's token.
const (
	argTarget        = "target"
	argChoice        = "choice"
	argClarification = "clarification"
	argPayload       = "payload"
)

// tool is one catalogue entry, ready to serve.
type tool struct {
	config.MCPTool
	input       map[string]any // the input schema the model sees
	validate    *sjs.Schema
	hasTarget   bool // candidates or a candidate source: the model names the target
	hasChoices  bool // the tool's own candidates: a clarification offers them
	description string
}

// args are a call's validated arguments.
type args struct {
	Target        string
	Choice        string
	Clarification string
	Payload       jsontext.Value
	// digest binds a request state to these exact arguments.
	digest string
}

func newTool(t config.MCPTool) (*tool, error) {
	var payload map[string]any
	if err := json.Unmarshal([]byte(t.PayloadSchema), &payload); err != nil {
		return nil, fmt.Errorf("tool %s: payload_schema: %w", t.Name, err)
	}
	tl := &tool{MCPTool: t, hasTarget: t.Referent == "", hasChoices: len(t.Candidates) > 0}
	props := map[string]any{argPayload: payload}
	required := []string{argPayload}
	desc := strings.TrimSpace(t.Description)
	if tl.hasTarget {
		props[argTarget] = map[string]any{"type": "string", "minLength": 1, "maxLength": schema.MaxRefLen,
			"description": "The target exactly as the user named it, in the user's words. Never guess or invent an identifier."}
		required = append(required, argTarget)
	}
	if tl.hasChoices {
		props[argChoice] = map[string]any{"type": "string", "minLength": 1, "maxLength": schema.MaxRefLen,
			"description": "Only after this tool answered needs_clarification: the `choice` of the candidate the USER picked from its `candidates`. Never pick one yourself. Requires `clarification`."}
		props[argClarification] = map[string]any{"type": "string", "minLength": 1, "maxLength": 512,
			"description": "With `choice` only: the `clarification` of the needs_clarification result that offered it, unchanged, with the same target and payload."}
		if err := tl.checkWords(); err != nil {
			return nil, err
		}
	}
	desc += "\n\nEvery call is a proposal that Portcullis checks, may ask the user to approve, and carries out at most once. " +
		"Tenant, actor and security domain are fixed by the server; do not pass them."
	tl.description = desc
	tl.input = map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
	raw, _ := json.Marshal(tl.input)
	doc, err := sjs.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("tool %s: %w", t.Name, err)
	}
	c := sjs.NewCompiler()
	c.DefaultDraft(sjs.Draft2020)
	url := "portcullis-mcp:" + t.Name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("tool %s: %w", t.Name, err)
	}
	if tl.validate, err = c.Compile(url); err != nil {
		return nil, fmt.Errorf("tool %s: payload_schema: %w", t.Name, err)
	}
	return tl, nil
}

// trustedArg reports whether an argument name looks like an attempt to set
// what only configuration sets.
func trustedArg(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"tenant", "actor", "security_domain", "securitydomain", "scope", "host", "grant", "approv"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// parse validates raw arguments against the tool's input schema. Its errors
// wrap ErrBadArguments and name the offending field; they never quote a
// value.
func (t *tool) parse(raw json.RawMessage) (args, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	if !jsontext.Value(raw).IsValid() { // also refuses duplicate member names
		return args{}, fmt.Errorf("%w: the arguments are not one JSON object without repeated names", ErrBadArguments)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return args{}, fmt.Errorf("%w: the arguments must be a JSON object", ErrBadArguments)
	}
	var refused []string
	for k := range top {
		if _, known := t.input["properties"].(map[string]any)[k]; !known && trustedArg(k) {
			refused = append(refused, k)
		}
	}
	if len(refused) > 0 {
		sort.Strings(refused)
		return args{}, fmt.Errorf("%w: %s: not an argument of this tool. The tenant, actor, security domain and approval of every action come from this server's configuration and the user, never from a tool call; call again without it",
			ErrBadArguments, strings.Join(refused, ", "))
	}
	doc, err := sjs.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return args{}, fmt.Errorf("%w: %v", ErrBadArguments, err)
	}
	if err := t.validate.Validate(doc); err != nil {
		var ve *sjs.ValidationError
		if errors.As(err, &ve) {
			return args{}, fmt.Errorf("%w: %s", ErrBadArguments, describe(ve))
		}
		return args{}, fmt.Errorf("%w: %v", ErrBadArguments, err)
	}
	var a args
	if v, ok := top[argTarget]; ok {
		_ = json.Unmarshal(v, &a.Target)
	}
	if v, ok := top[argChoice]; ok {
		_ = json.Unmarshal(v, &a.Choice)
	}
	if v, ok := top[argClarification]; ok {
		_ = json.Unmarshal(v, &a.Clarification)
	}
	a.Payload = jsontext.Value(bytes.Clone(top[argPayload]))
	if err := a.Payload.Canonicalize(); err != nil {
		return args{}, fmt.Errorf("%w: payload: %v", ErrBadArguments, err)
	}
	if a.Choice != "" && !slices.ContainsFunc(t.Candidates, func(c config.MCPCandidate) bool { return c.Referent == a.Choice }) {
		return args{}, fmt.Errorf("%w: choice: not one of the choices this tool offers; call again without `choice` and `clarification`: the user is asked again", ErrBadArguments)
	}
	a.digest = digest(t.Name, a.Target, a.Choice, a.Clarification, a.Payload)
	return a, nil
}

// describe lists the leaf errors of a validation as "field: rule" lines.
// The library's messages name the rule and, for enums and constants, the
// allowed values from the schema; they are about the arguments the model
// itself sent.
func describe(ve *sjs.ValidationError) string {
	var lines []string
	var walk func(u sjs.OutputUnit)
	walk = func(u sjs.OutputUnit) {
		if u.Error != nil && len(u.Errors) == 0 {
			where := strings.TrimPrefix(u.InstanceLocation, "/")
			if where == "" {
				where = "(arguments)"
			}
			lines = append(lines, where+": "+u.Error.String())
		}
		for _, c := range u.Errors {
			walk(c)
		}
	}
	walk(*ve.BasicOutput())
	slices.Sort(lines)
	lines = slices.Compact(lines)
	if len(lines) > 10 {
		lines = append(lines[:10], "…")
	}
	return strings.Join(lines, "; ")
}

func digest(parts ...any) string {
	b, _ := json.Marshal(parts)
	return hex.EncodeToString(sum(b))
}

// bound is the record a display summary, a question and a result name:
// a candidate of the tool's own list, or for a tool without one, the
// referent grounding bound (unknown before it did).
type bound struct {
	Referent string
	Summary  string // the candidate's summary; "" when the tool has none
}

// String is how a person reads the record: "payments API — staging
// (svc:payments-staging)".
func (b bound) String() string {
	if b.Summary == "" {
		return b.Referent
	}
	return b.Summary + " (" + b.Referent + ")"
}

// record returns the bound record of a referent grounding chose.
func (t *tool) record(referent string) bound {
	if i := slices.IndexFunc(t.Candidates, func(c config.MCPCandidate) bool { return c.Referent == referent }); i >= 0 {
		return bound{Referent: referent, Summary: t.Candidates[i].Summary}
	}
	return bound{Referent: referent}
}

// summary is the display summary shown to approvers and users: the tool's
// summary, the record it binds (rec; when not known yet, the target words
// as the user said them, marked so), and the payload's summary fields.
// Bounded; text from the model is shown as what it is (schema.Visible).
func (t *tool) summary(rec *bound, target string, payload jsontext.Value) string {
	var b strings.Builder
	b.WriteString(t.Summary)
	switch {
	case rec != nil:
		b.WriteString(": " + rec.String())
	case target != "":
		b.WriteString(": " + quoted(target) + " (as the user named it; not yet bound to one record)")
	}
	if fields := t.fields(payload); fields != "" {
		b.WriteString(" — " + fields)
	}
	s := strings.Join(strings.Fields(schema.Visible(b.String())), " ")
	if len(s) > schema.MaxSummaryLen {
		s = strings.ToValidUTF8(s[:schema.MaxSummaryLen-3], "") + "…"
	}
	return s
}

// fields renders the payload's summary fields: "reason: stuck, quantity: 20".
func (t *tool) fields(payload jsontext.Value) string {
	if len(t.SummaryFields) == 0 {
		return ""
	}
	var m map[string]json.RawMessage
	_ = json.Unmarshal(payload, &m)
	var parts []string
	for _, f := range t.SummaryFields {
		v, ok := m[f]
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal(v, &s) != nil {
			s = string(v)
		}
		parts = append(parts, f+": "+schema.Visible(s))
	}
	return strings.Join(parts, ", ")
}

func quoted(s string) string { return "\u201c" + s + "\u201d" }

// newID is a fresh random id with a prefix.
func newID(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// ProposalPrefix starts every proposal id this server makes (the status
// tool follows no other).
const ProposalPrefix = "mcp-"

// proposal builds the proposal of one call and returns the record its
// display summary names. The trusted context comes from configuration
// only; the model's arguments give the grounding subject and the payload.
// chosen, when set, is the one candidate the user picked.
func (s *Server) proposal(t *tool, a args, chosen *config.MCPCandidate) (*schema.Proposal, *bound) {
	id := newID(ProposalPrefix)
	m := s.cfg
	target := a.Target
	g := schema.Grounding{Scope: m.SecurityDomainRef, ObservationRef: "mcp-catalogue:" + t.Name}
	var rec *bound
	switch {
	case chosen != nil:
		target = chosen.Resource
		g.Candidates = []schema.Candidate{candidate(chosen.Referent, chosen.Resource)}
		rec = &bound{Referent: chosen.Referent, Summary: chosen.Summary}
	case t.Referent != "":
		target = t.Referent
		g.Candidates = []schema.Candidate{candidate(t.Referent, t.Referent)}
		rec = &bound{Referent: t.Referent}
	case t.CandidateSource != "":
		g.CandidateSource = t.CandidateSource
		g.ObservationRef = ""
	default:
		// Each record's resource and each of its aliases, one entry
		// each: grounding's exact match binds the user's words to the
		// record whose entry they name.
		for _, c := range t.Candidates {
			g.Candidates = append(g.Candidates, candidate(c.Referent, c.Resource))
			for _, w := range c.Aliases {
				g.Candidates = append(g.Candidates, candidate(c.Referent, w))
			}
		}
		if c := t.unique(a.Target); c != nil {
			rec = &bound{Referent: c.Referent, Summary: c.Summary}
		}
	}
	g.Subject, _ = jsontext.AppendQuote(nil, target)
	return &schema.Proposal{
		Schema:     schema.SchemaProposal,
		ProposalID: id,
		Context: schema.Context{
			Tenant:         schema.TenantContext{TenantRef: m.TenantRef, SecurityDomainRef: m.SecurityDomainRef},
			Actor:          schema.ActorContext{ActorRef: m.ActorRef, Assurance: m.ActorAssurance},
			Authorization:  schema.AuthorizationContext{ScopeRef: m.ScopeRef, PolicyRevision: m.PolicyRevision},
			Provider:       schema.ProviderContext{AccountRef: t.AccountRef},
			Delivery:       schema.DeliveryContext{DeliveryID: "delivery:" + id, Source: "mcp"},
			HostInvocation: schema.HostInvocation{InvocationID: "invocation:" + id},
		},
		Intent: schema.Intent{
			Provider: t.Provider, Capability: t.Capability, Operation: t.Operation, Environment: t.Environment,
			Payload: a.Payload, Display: schema.Display{Summary: t.summary(rec, a.Target, a.Payload)},
		},
		Grounding: g,
	}, rec
}

func candidate(referent, resource string) schema.Candidate {
	attrs, _ := json.Marshal(map[string]string{"resource": resource})
	return schema.Candidate{Referent: referent, Source: "authoritative", Attributes: attrs,
		EvidenceRefs: []string{"mcp-catalogue:" + referent}}
}

// words are what a record answers to: its resource and its aliases.
func words(c config.MCPCandidate) []string { return append([]string{c.Resource}, c.Aliases...) }

// matches are the records the target words name, as grounding matches
// them (normalized, exact), in the tool's order.
func (t *tool) matches(target string) []config.MCPCandidate {
	var out []config.MCPCandidate
	for _, c := range t.Candidates {
		if slices.ContainsFunc(words(c), func(w string) bool { return grounding.Match(w, target) }) {
			out = append(out, c)
		}
	}
	return out
}

// unique is the one record the target words name, or nil.
func (t *tool) unique(target string) *config.MCPCandidate {
	if m := t.matches(target); len(m) == 1 {
		return &m[0]
	}
	return nil
}

// choices are the candidates a clarification offers the user: those the
// target matched (ambiguous), else all of them (nothing matched).
func (t *tool) choices(target string) []config.MCPCandidate {
	if m := t.matches(target); len(m) > 1 {
		return m
	}
	return t.Candidates
}

// checkWords refuses a catalogue in which one record's words repeat once
// normalized (grounding would find its two entries ambiguous with each
// other, and the record could never be named by them).
func (t *tool) checkWords() error {
	for _, c := range t.Candidates {
		seen := map[string]bool{}
		for _, w := range words(c) {
			n := grounding.Normalize(w)
			if seen[n] {
				return fmt.Errorf("tool %s: candidate %s: the resource and aliases %q repeat once normalized: each must name the record differently", t.Name, c.Referent, w)
			}
			seen[n] = true
		}
	}
	return nil
}
