package schema

import (
	"regexp"
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
// fits a log-free, bounded record. They are documented in README.md.
const (
	MaxNameLen        = 128  // provider, capability, operation
	MaxRefLen         = 512  // context fields, referents, observation and evidence refs
	MaxSummaryLen     = 2000 // display.summary
	MaxEvidenceRefs   = 64   // per candidate
	MaxRequesterField = 256
	MaxSpendMinor     = 1<<53 - 1
)

var (
	proposalIDPattern      = regexp.MustCompile(`^[A-Za-z0-9_:-]{1,128}$`)
	namePattern            = regexp.MustCompile(`^[a-z0-9][a-z0-9._:-]{0,127}$`)
	currencyPattern        = regexp.MustCompile(`^[A-Z]{3}$`)
	candidateSourcePattern = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)
)

// ValidProposalID reports whether id can name an outcome subject.
func ValidProposalID(id string) bool { return proposalIDPattern.MatchString(id) }

// ValidCandidateSource reports whether name is a valid candidate source name.
func ValidCandidateSource(name string) bool { return candidateSourcePattern.MatchString(name) }

// ValidName reports whether s is a valid normalized provider, capability or
// operation name.
func ValidName(s string) bool { return namePattern.MatchString(s) }

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
	return s == nil || (currencyPattern.MatchString(s.Currency) && s.AmountMinor >= 0 && s.AmountMinor <= MaxSpendMinor)
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
		if strings.TrimSpace(f) == "" {
			return false
		}
	}
	return true
}

func (c *Context) fields() []string {
	return []string{
		c.Tenant.TenantRef, c.Tenant.SecurityDomainRef,
		c.Actor.ActorRef, c.Actor.Assurance,
		c.Authorization.ScopeRef, c.Authorization.PolicyRevision,
		c.Provider.AccountRef,
		c.Delivery.DeliveryID, c.Delivery.Source,
		c.HostInvocation.InvocationID,
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

// Validate checks a decoded proposal's structure and formats beyond what the
// strict decoder checks. It expects a normalized intent and returns false
// for anything ADMISSION_MALFORMED covers. Context completeness is judged
// separately (ADMISSION_CONTEXT_INCOMPLETE); grounding.subject, candidate
// attributes and the grant's semantics are judged by later stages.
func (p *Proposal) Validate() bool {
	if p.Schema != SchemaProposal || !ValidProposalID(p.ProposalID) {
		return false
	}
	for _, f := range p.Context.fields() {
		if len(f) > MaxRefLen {
			return false
		}
	}
	in := &p.Intent
	if !ValidName(in.Provider) || !ValidName(in.Capability) || !ValidName(in.Operation) {
		return false
	}
	switch in.Environment {
	case EnvMock, EnvTest, EnvLive:
	default:
		return false
	}
	if !ValidSpend(in.ExternalSpend) {
		return false
	}
	if in.ProtectedDisclosure != nil && !in.ProtectedDisclosure.Valid() {
		return false
	}
	if utf8.RuneCountInString(in.Display.Summary) > MaxSummaryLen {
		return false
	}
	g := &p.Grounding
	if len(g.Scope) > MaxRefLen || len(g.ObservationRef) > MaxRefLen {
		return false
	}
	if g.CandidateSource != "" && (g.Candidates != nil || !ValidCandidateSource(g.CandidateSource)) {
		return false
	}
	for i := range g.Candidates {
		if !g.Candidates[i].Valid() {
			return false
		}
	}
	if r := p.Requester; r != nil {
		for _, f := range []string{r.AgentID, r.ModelProvider, r.ModelID, r.SessionID, r.RunID} {
			if len(f) > MaxRequesterField {
				return false
			}
		}
	}
	return true
}

// Valid checks a candidate's referent and references; its attributes are
// judged by the grounding stage.
func (c *Candidate) Valid() bool {
	if !singleLine(c.Referent, MaxRefLen) || len(c.Source) > MaxRefLen || len(c.EvidenceRefs) > MaxEvidenceRefs {
		return false
	}
	for _, e := range c.EvidenceRefs {
		if len(e) > MaxRefLen {
			return false
		}
	}
	return true
}
