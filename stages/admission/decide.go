// Package admission is the first stage (SPEC §3 Admission, §2.7): host
// authentication, strict decoding, trusted-context completeness, tenant and
// security-domain permission, known provider, and dedupe on the host's
// delivery and proposal ids.
package admission

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/trust"
	"github.com/portcullis/portcullis/schema"
)

// Policy is what admission decides with.
type Policy struct {
	AllowUnsigned   bool
	MaxPayloadBytes int
	Hosts           []config.Host
	Tenants         []config.Tenant
	Providers       []string
}

// Verdict is admission's decision about one message.
type Verdict struct {
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
}

// Ref is the proposal the verdict names ("" parts when unknown).
func (v *Verdict) Ref() schema.ProposalRef {
	return schema.ProposalRef{Host: v.Host, ProposalID: v.ProposalID}
}

// Authenticated reports whether the message is attributed to a host.
func (v *Verdict) Authenticated() bool { return v.Host != "" }

func refuse(v Verdict, code schema.Code) Verdict {
	inc := schema.NewIncident(schema.PhaseAdmission, code)
	v.Incident = &inc
	return v
}

// wellFormed decodes and validates a body: every ADMISSION_MALFORMED check.
func wellFormed(v Verdict, body []byte, maxBytes int) (Verdict, bool) {
	prop, err := schema.DecodeProposal(body, maxBytes)
	if err != nil {
		if len(body) <= config.MaxMaxPayloadBytes {
			v.ProposalID, _ = schema.PeekProposalID(body)
		}
		return refuse(v, schema.CodeAdmissionMalformed), false
	}
	v.Proposal = prop
	if schema.ValidProposalID(prop.ProposalID) {
		v.ProposalID = prop.ProposalID
	}
	// A payload number that no IEEE-754 double holds exactly would share
	// its fingerprint with a different amount (package fingerprint).
	if !prop.Validate() || fingerprint.CheckNumbers(prop.Intent.Payload) != nil {
		return refuse(v, schema.CodeAdmissionMalformed), false
	}
	return v, true
}

// Offline judges a body without trust: what admission checks that needs no
// host keys or provider list (well formed, complete context). `processor
// fingerprint` uses it.
func Offline(body []byte, maxBytes int) Verdict {
	v, ok := wellFormed(Verdict{}, body, maxBytes)
	if ok && !v.Proposal.Context.ContextComplete() {
		return refuse(v, schema.CodeAdmissionContextIncomplete)
	}
	return v
}

// Decide judges a message that arrived on host h's proposals subject, in
// the order of SPEC §2.7 and §3: authentication first (a message nothing
// proves came from h gets only an incident event), then strict decoding,
// complete context, tenant and domain, provider. It has no side effects.
func Decide(p Policy, h string, body []byte, hdr nats.Header) Verdict {
	host, signed, err := trust.Verifier{Hosts: p.Hosts, AllowUnsigned: p.AllowUnsigned}.Authenticate(h, body, hdr)
	if err != nil {
		return refuse(Verdict{AuthError: err}, schema.CodeAdmissionUnauthenticated)
	}
	v, ok := wellFormed(Verdict{Host: host.Name}, body, p.MaxPayloadBytes)
	if !ok {
		return v
	}
	ctx := &v.Proposal.Context
	if !ctx.ContextComplete() {
		return refuse(v, schema.CodeAdmissionContextIncomplete)
	}
	if signed && !trust.Permits(p.Tenants, host, ctx.Tenant.TenantRef, ctx.Tenant.SecurityDomainRef) {
		return refuse(v, schema.CodeAdmissionTenantNotPermitted)
	}
	v.Dedupe = true
	if !slices.Contains(p.Providers, v.Proposal.Intent.Provider) {
		return refuse(v, schema.CodeAdmissionProviderUnknown)
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
