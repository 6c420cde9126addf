// Package admission is the first stage (SPEC §3 Admission, §2.7): host
// authentication, strict decoding, trusted-context completeness, tenant and
// security-domain permission, known provider, and dedupe on the host's
// delivery and proposal ids.
package admission

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/trust"
	"github.com/portcullis/portcullis/stages"
)

// Policy is what admission decides with.
type Policy struct {
	// Trust authenticates hosts (unsigned proposals only under
	// admission.allow_unsigned, development only) and says which tenants
	// and security domains each may speak for (trust.Policy). nil:
	// nothing is authenticated.
	Trust           stages.Trust
	MaxPayloadBytes int
	Providers       []string
}

// trust is p.Trust, trust.Policy{} (no host) when unset.
func (p Policy) trust() stages.Trust {
	if p.Trust == nil {
		return trust.Policy{}
	}
	return p.Trust
}

// Screening is admission's decision about one message: whom it is
// from, whether it is well formed and permitted, and whether it takes ids.
type Screening struct {
	// Host is the host the message is attributed to: the subject's <h>
	// token once authenticated; "" when authentication failed.
	Host string
	// AuthError says which authentication check failed (value-free).
	AuthError error
	// ProposalID is the proposal's id when it can be read unambiguously
	// (even from a malformed body); "" when it cannot.
	ProposalID string
	// Proposal is the decoded, normalized proposal once it decoded.
	Proposal *schema.Proposal
	// Dedupe is set once the proposal is well formed, complete and
	// permitted for its tenant: it takes its proposal id and delivery id,
	// and a repeat of either is answered from the record.
	Dedupe bool
	// Incident is the refusal, if any.
	Incident *schema.Incident
	// Problems say, value-free, what earned the refusal: a field path and
	// the rule it breaks (every problem for a proposal that decoded; the
	// one that stopped strict decoding otherwise). Empty for
	// authentication failures (AuthError says which check failed).
	Problems []schema.Problem
}

// Ref is the proposal the screening names ("" parts when unknown).
func (v *Screening) Ref() schema.ProposalRef {
	return schema.ProposalRef{Host: v.Host, ProposalID: v.ProposalID}
}

// Authenticated reports whether the message is attributed to a host.
func (v *Screening) Authenticated() bool { return v.Host != "" }

func refuse(v Screening, code schema.Code, problems ...schema.Problem) Screening {
	inc := schema.NewIncident(schema.PhaseAdmission, code)
	v.Incident = &inc
	v.Problems = problems
	return v
}

// checked runs every check of a body on its own (schema.CheckProposal):
// the ADMISSION_MALFORMED rules, then context completeness.
func checked(v Screening, body []byte, maxBytes int) (Screening, bool) {
	prop, err := schema.CheckProposal(body, maxBytes)
	if prop == nil {
		if len(body) <= schema.MaxMessageBytes {
			v.ProposalID, _ = schema.PeekProposalID(body)
		}
		return refuse(v, schema.CodeAdmissionMalformed, problemsOf(err)...), false
	}
	v.Proposal = prop
	if schema.ValidProposalID(prop.ProposalID) {
		v.ProposalID = prop.ProposalID
	}
	if err != nil {
		var ve *schema.ValidationError
		if errors.As(err, &ve) {
			return refuse(v, ve.Code(), ve.Problems...), false
		}
		return refuse(v, schema.CodeAdmissionMalformed), false
	}
	return v, true
}

func problemsOf(err error) []schema.Problem {
	var ve *schema.ValidationError
	if errors.As(err, &ve) {
		return ve.Problems
	}
	return nil
}

// Offline judges a body without trust: what admission checks that needs no
// host keys or provider list (well formed, complete context). `processor
// fingerprint` and `processor check` use it.
func Offline(body []byte, maxBytes int) Screening {
	v, _ := checked(Screening{}, body, maxBytes)
	return v
}

// ProviderProblem is admission's provider check: nil when the (normalized)
// provider is configured, else why ADMISSION_PROVIDER_UNKNOWN.
func ProviderProblem(providers []string, p *schema.Proposal) *schema.Problem {
	if slices.Contains(providers, p.Intent.Provider) {
		return nil
	}
	return &schema.Problem{Path: "/intent/provider", Rule: RuleProviderUnknown, Code: schema.CodeAdmissionProviderUnknown, Offset: -1}
}

// Rules of the refusals that need configuration or the store.
const (
	RuleProviderUnknown schema.Rule = "not a configured provider"
	RuleTenantForeign   schema.Rule = "not a tenant this host may speak for"
	RuleDomainForeign   schema.Rule = "not a security domain of this tenant"
	RuleIDTaken         schema.Rule = "taken by an earlier proposal of this host with another body"
)

// TenantProblem is admission's tenant and domain check of a signed
// proposal from host (SPEC §2.7, Trust.Permits): nil when the host may
// speak for the tenant and the domain is one of the tenant's, else which of
// the two earned ADMISSION_TENANT_NOT_PERMITTED.
func TenantProblem(t stages.Trust, host string, ctx *schema.Context) *schema.Problem {
	if t.Permits(host, ctx.Tenant.TenantRef, ctx.Tenant.SecurityDomainRef) {
		return nil
	}
	p := schema.Problem{Path: "/context/tenant/security_domain_ref", Rule: RuleDomainForeign, Code: schema.CodeAdmissionTenantNotPermitted, Offset: -1}
	if !t.Speaks(host, ctx.Tenant.TenantRef) {
		p.Path, p.Rule = "/context/tenant/tenant_ref", RuleTenantForeign
	}
	return &p
}

// Decide judges a message that arrived on host h's proposals subject, in
// the order of SPEC §2.7 and §3: authentication first (a message nothing
// proves came from h gets only an incident event), then strict decoding,
// complete context, tenant and domain, provider. It has no side effects.
func Decide(p Policy, h string, body []byte, hdr nats.Header) Screening {
	signed, err := p.trust().Authenticate(h, body, hdr)
	if err != nil {
		return refuse(Screening{AuthError: err}, schema.CodeAdmissionUnauthenticated)
	}
	v, ok := checked(Screening{Host: h}, body, p.MaxPayloadBytes)
	if !ok {
		return v
	}
	if signed {
		if pr := TenantProblem(p.trust(), h, &v.Proposal.Context); pr != nil {
			return refuse(v, pr.Code, *pr)
		}
	}
	v.Dedupe = true
	if pr := ProviderProblem(p.Providers, v.Proposal); pr != nil {
		return refuse(v, pr.Code, *pr)
	}
	return v
}

// Digest identifies a proposal's content apart from its delivery id: the
// same proposal sent again under a new delivery id has the same digest
// (SPEC §2.1, a repeat); any other change gives another.
func Digest(p *schema.Proposal) string {
	q := *p
	q.Context.Delivery.DeliveryID = ""
	b := jsontext.Value(schema.MustMarshal(&q))
	// Canonical (RFC 8785): member order, white space and number spelling
	// inside the payload and attributes do not make another proposal.
	_ = b.Canonicalize() // cannot fail on our own encoding; on error the digest is of b as is
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
