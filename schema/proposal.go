package schema

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Proposal is the untrusted input of SPEC §2.1, as decoded by DecodeProposal.
type Proposal struct {
	Schema     string     `json:"schema"`
	ProposalID string     `json:"proposal_id"`
	Context    Context    `json:"context"`
	Intent     Intent     `json:"intent"`
	Grounding  Grounding  `json:"grounding"`
	Grant      *Grant     `json:"grant"`
	Requester  *Requester `json:"requester,omitempty"`
}

// Context is the host's trusted context. Every field is a required,
// non-empty string.
type Context struct {
	Tenant         TenantContext        `json:"tenant"`
	Actor          ActorContext         `json:"actor"`
	Authorization  AuthorizationContext `json:"authorization"`
	Provider       ProviderContext      `json:"provider"`
	Delivery       DeliveryContext      `json:"delivery"`
	HostInvocation HostInvocation       `json:"host_invocation"`
}

type TenantContext struct {
	TenantRef         string `json:"tenant_ref"`
	SecurityDomainRef string `json:"security_domain_ref"`
}

type ActorContext struct {
	ActorRef  string `json:"actor_ref"`
	Assurance string `json:"assurance"`
}

type AuthorizationContext struct {
	ScopeRef       string `json:"scope_ref"`
	PolicyRevision string `json:"policy_revision"`
}

type ProviderContext struct {
	AccountRef string `json:"account_ref"`
}

type DeliveryContext struct {
	DeliveryID string `json:"delivery_id"`
	Source     string `json:"source"`
}

type HostInvocation struct {
	InvocationID string `json:"invocation_id"`
}

// Intent is the proposed operation (seed 003). Admission normalizes
// provider, capability, operation and environment (trimmed, lowercased).
type Intent struct {
	Provider            string          `json:"provider"`
	Capability          string          `json:"capability"`
	Operation           string          `json:"operation"`
	Environment         string          `json:"environment"`
	Payload             jsontext.Value  `json:"payload"`
	ExternalSpend       *Spend          `json:"external_spend"`
	ProtectedDisclosure *DisclosurePlan `json:"protected_disclosure"`
	Display             Display         `json:"display"`
}

// Spend is an amount of money in minor units of an ISO 4217 currency.
type Spend struct {
	Currency    string `json:"currency"`
	AmountMinor int64  `json:"amount_minor"`
}

type Display struct {
	Summary string `json:"summary"`
}

// Grounding carries the subject to ground and either inline candidates or
// the name of a candidate source. Subject and candidate attributes stay raw:
// the grounding stage judges them.
type Grounding struct {
	Subject         jsontext.Value `json:"subject"`
	Scope           string         `json:"scope"`
	ObservationRef  string         `json:"observation_ref"`
	Candidates      []Candidate    `json:"candidates,omitempty"`
	CandidateSource string         `json:"candidate_source,omitempty"`
}

// Candidate is one bounded possible target.
type Candidate struct {
	Referent     string         `json:"referent"`
	Source       string         `json:"source"`
	Attributes   jsontext.Value `json:"attributes"`
	EvidenceRefs []string       `json:"evidence_refs"`
}

// Requester is optional metadata about the proposing agent, copied into the
// activity record.
type Requester struct {
	AgentID       string `json:"agent_id,omitempty"`
	ModelProvider string `json:"model_provider,omitempty"`
	ModelID       string `json:"model_id,omitempty"`
	SessionID     string `json:"session_id,omitempty"`
	RunID         string `json:"run_id,omitempty"`
}

// Environments a proposal may target.
const (
	EnvMock = "mock"
	EnvTest = "test"
	EnvLive = "live"
)

// Limits on proposal fields beyond the spec's own, chosen so that every field
// fits a log-free, bounded record. They are documented in PROTOCOL.md §2.
const (
	MaxNameLen        = 128  // provider, capability, operation
	MaxRefLen         = 512  // context fields, referents, observation and evidence refs
	MaxSummaryLen     = 2000 // display.summary
	MaxEvidenceRefs   = 64   // per candidate
	MaxRequesterField = 256
	MaxSpendMinor     = 1<<53 - 1
)

// The name formats, as byte sets: each check runs for every proposal at
// several stages, where a regular expression cost a few percent of the
// processor's CPU (TestNameFormats holds them to the expressions).
var (
	idChars        = charset("AZaz09__::--") // proposal ids: ^[A-Za-z0-9_:-]{1,128}$
	nameFirst      = charset("az09")         // names: ^[a-z0-9][a-z0-9._:-]{0,127}$
	nameChars      = charset("az09..__::--")
	upperChars     = charset("AZ")             // currencies: ^[A-Z]{3}$
	sourceChars    = charset("az09__--")       // candidate sources: ^[a-z0-9_-]{1,64}$
	errorCodeChars = charset("AZaz09..__::--") // error codes: ^[A-Za-z0-9._:-]{1,128}$
)

// byteSet is a set of ASCII bytes.
type byteSet [256]bool

// charset is the set of the inclusive byte ranges given as pairs ("az09").
func charset(ranges string) *byteSet {
	var set byteSet
	for i := 0; i+1 < len(ranges); i += 2 {
		for c := ranges[i]; c <= ranges[i+1]; c++ {
			set[c] = true
		}
	}
	return &set
}

// spells reports whether s is min to max bytes, each in the set.
func (set *byteSet) spells(s string, min, max int) bool {
	if len(s) < min || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !set[s[i]] {
			return false
		}
	}
	return true
}

// ValidProposalID reports whether id can name an outcome subject.
func ValidProposalID(id string) bool { return idChars.spells(id, 1, 128) }

// ValidCandidateSource reports whether name is a valid candidate source name.
func ValidCandidateSource(name string) bool { return sourceChars.spells(name, 1, 64) }

// ValidName reports whether s is a valid normalized provider, capability or
// operation name.
func ValidName(s string) bool { return s != "" && nameFirst[s[0]] && nameChars.spells(s, 1, 128) }

// validCurrency reports whether s is three capital letters.
func validCurrency(s string) bool { return upperChars.spells(s, 3, 3) }

// NormalizeName trims and lowercases a provider, capability, operation or
// environment name. Both are ASCII-only, so that hosts in every language
// normalize alike (Unicode trimming and case mapping differ between
// languages: Go lowercases "İ" to "i", JavaScript to "i̇"); a name with
// other characters stays as it is and fails ValidName.
func NormalizeName(s string) string { return asciiLower(TrimASCII(s)) }

// TrimASCII removes leading and trailing ASCII white space (space, tab,
// CR, LF, VT, FF) and nothing else.
func TrimASCII(s string) string { return strings.Trim(s, " \t\r\n\v\f") }

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// ValidSpend checks an external spend or spend ceiling.
func ValidSpend(s *Spend) bool {
	return s == nil || (validCurrency(s.Currency) && s.AmountMinor >= 0 && s.AmountMinor <= MaxSpendMinor)
}

// singleLine reports whether s is non-empty after trimming, at most max
// runes, and has no line breaks.
func singleLine(s string, max int) bool {
	if strings.TrimSpace(s) == "" || utf8.RuneCountInString(s) > max {
		return false
	}
	return !strings.ContainsAny(s, "\r\n\u2028\u2029\u0085")
}

// ContextComplete reports whether every trusted-context field is non-empty.
func (c *Context) ContextComplete() bool {
	for _, f := range c.fields() {
		if strings.TrimSpace(f.value) == "" {
			return false
		}
	}
	return true
}

// contextField is one trusted-context field and its JSON pointer.
type contextField struct {
	path, value string
}

func (c *Context) fields() []contextField {
	return []contextField{
		{"/context/tenant/tenant_ref", c.Tenant.TenantRef},
		{"/context/tenant/security_domain_ref", c.Tenant.SecurityDomainRef},
		{"/context/actor/actor_ref", c.Actor.ActorRef},
		{"/context/actor/assurance", c.Actor.Assurance},
		{"/context/authorization/scope_ref", c.Authorization.ScopeRef},
		{"/context/authorization/policy_revision", c.Authorization.PolicyRevision},
		{"/context/provider/account_ref", c.Provider.AccountRef},
		{"/context/delivery/delivery_id", c.Delivery.DeliveryID},
		{"/context/delivery/source", c.Delivery.Source},
		{"/context/host_invocation/invocation_id", c.HostInvocation.InvocationID},
	}
}

// Normalize trims and lowercases the intent's names in place and sorts
// a disclosure plan's classes, so that every later stage and the fingerprint
// see one form.
func (in *Intent) Normalize() {
	in.Provider = NormalizeName(in.Provider)
	in.Capability = NormalizeName(in.Capability)
	in.Operation = NormalizeName(in.Operation)
	in.Environment = NormalizeName(in.Environment)
	if in.ProtectedDisclosure != nil {
		in.ProtectedDisclosure.Normalize()
	}
}

// Validate reports whether a decoded proposal (intent normalized) breaks
// none of the rules ADMISSION_MALFORMED covers beyond strict decoding.
// Context completeness is judged separately (ADMISSION_CONTEXT_INCOMPLETE);
// grounding.subject, candidate attributes and the grant's semantics are
// judged by later stages. Check says which rules are broken, and where.
func (p *Proposal) Validate() bool {
	for _, pr := range p.problems() {
		if pr.Code == CodeAdmissionMalformed {
			return false
		}
	}
	return true
}

// Check applies every rule admission judges a decoded proposal by on its
// own (without keys, tenants or providers): its formats
// (ADMISSION_MALFORMED, as Validate) and its trusted context's completeness
// (ADMISSION_CONTEXT_INCOMPLETE). It returns nil or a *ValidationError
// wrapping ErrMalformed with every problem, in document order.
func (p *Proposal) Check() error {
	if problems := p.problems(); len(problems) > 0 {
		return &ValidationError{Problems: problems, err: ErrMalformed}
	}
	return nil
}

// problems lists every rule the proposal breaks. It is the one place the
// proposal's format rules live: Validate, Check and admission all use it.
func (p *Proposal) problems() []Problem {
	var out []Problem
	add := func(code Code, path string, rule Rule) {
		out = append(out, Problem{Path: path, Rule: rule, Code: code, Offset: -1})
	}
	bad := func(path string, rule Rule) { add(CodeAdmissionMalformed, path, rule) }
	switch {
	case p.Schema == "":
		bad("/schema", RuleRequired)
	case p.Schema != SchemaProposal:
		bad("/schema", RuleSchemaProposal)
	}
	switch {
	case p.ProposalID == "":
		bad("/proposal_id", RuleRequired)
	case !ValidProposalID(p.ProposalID):
		bad("/proposal_id", RuleProposalID)
	}
	for _, f := range p.Context.fields() {
		switch {
		case len(f.value) > MaxRefLen:
			bad(f.path, RuleRefLen)
		case f.value == "":
			add(CodeAdmissionContextIncomplete, f.path, RuleRequired)
		case strings.TrimSpace(f.value) == "":
			add(CodeAdmissionContextIncomplete, f.path, RuleBlank)
		}
	}
	in := &p.Intent
	for _, f := range []struct{ path, value string }{
		{"/intent/provider", in.Provider}, {"/intent/capability", in.Capability}, {"/intent/operation", in.Operation},
	} {
		switch {
		case f.value == "":
			bad(f.path, RuleRequired)
		case !ValidName(f.value):
			bad(f.path, RuleName)
		}
	}
	switch in.Environment {
	case EnvMock, EnvTest, EnvLive:
	case "":
		bad("/intent/environment", RuleRequired)
	default:
		bad("/intent/environment", RuleEnvironment)
	}
	if len(in.Payload) > 0 && !ExactNumbers(in.Payload) {
		// A payload number that no IEEE-754 double holds exactly would share
		// its fingerprint with a different amount (package fingerprint).
		bad("/intent/payload", RuleExactNumbers)
	}
	if s := in.ExternalSpend; s != nil {
		if !validCurrency(s.Currency) {
			bad("/intent/external_spend/currency", RuleCurrency)
		}
		if s.AmountMinor < 0 || s.AmountMinor > MaxSpendMinor {
			bad("/intent/external_spend/amount_minor", RuleAmount)
		}
	}
	if d := in.ProtectedDisclosure; d != nil {
		for _, pr := range d.problems() {
			bad("/intent/protected_disclosure"+pr.Path, pr.Rule)
		}
	}
	if utf8.RuneCountInString(in.Display.Summary) > MaxSummaryLen {
		bad("/intent/display/summary", RuleSummaryLen)
	} else if HasInvisibleFormat(in.Display.Summary) {
		bad("/intent/display/summary", RuleSummaryHidden)
	}
	g := &p.Grounding
	if len(g.Scope) > MaxRefLen {
		bad("/grounding/scope", RuleRefLen)
	}
	if len(g.ObservationRef) > MaxRefLen {
		bad("/grounding/observation_ref", RuleRefLen)
	}
	switch {
	case g.CandidateSource == "":
	case g.Candidates != nil:
		bad("/grounding/candidate_source", RuleSourceExclusive)
	case !ValidCandidateSource(g.CandidateSource):
		bad("/grounding/candidate_source", RuleCandidateSource)
	}
	for i := range g.Candidates {
		for _, pr := range g.Candidates[i].problems() {
			bad("/grounding/candidates/"+strconv.Itoa(i)+pr.Path, pr.Rule)
		}
	}
	if r := p.Requester; r != nil {
		for _, f := range []struct{ path, value string }{
			{"/requester/agent_id", r.AgentID}, {"/requester/model_provider", r.ModelProvider},
			{"/requester/model_id", r.ModelID}, {"/requester/session_id", r.SessionID}, {"/requester/run_id", r.RunID},
		} {
			if len(f.value) > MaxRequesterField {
				bad(f.path, RuleRequesterLen)
			}
		}
	}
	return out
}

// Valid checks a candidate's referent and references; its attributes are
// judged by the grounding stage.
func (c *Candidate) Valid() bool { return len(c.problems()) == 0 }

// problems lists the rules a candidate breaks, paths relative to it.
func (c *Candidate) problems() []Problem {
	var out []Problem
	bad := func(path string, rule Rule) { out = append(out, Problem{Path: path, Rule: rule, Offset: -1}) }
	if !singleLine(c.Referent, MaxRefLen) {
		bad("/referent", RuleSingleLine)
	}
	if len(c.Source) > MaxRefLen {
		bad("/source", RuleRefLen)
	}
	if len(c.EvidenceRefs) > MaxEvidenceRefs {
		bad("/evidence_refs", RuleEvidenceCount)
	}
	for i, e := range c.EvidenceRefs {
		if len(e) > MaxRefLen {
			bad("/evidence_refs/"+strconv.Itoa(i), RuleRefLen)
		}
	}
	return out
}
