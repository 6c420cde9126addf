// Package admission is the first stage: strict decoding, host
// authentication, trusted-context completeness, tenant permission, known
// provider and delivery dedupe (SPEC §3 Admission).
package admission

import (
	"slices"

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
	Providers       []string
}

// Verdict is admission's decision about one body.
type Verdict struct {
	// ProposalID is the proposal's id when it can be read unambiguously
	// (even from a malformed body); "" when it cannot.
	ProposalID string
	// Proposal is the decoded, normalized proposal once it decoded.
	Proposal *schema.Proposal
	// Host is the authenticating host's name; "" for an unsigned proposal
	// admitted under allow_unsigned.
	Host string
	// Dedupe is set once the proposal is authenticated for its tenant: its
	// delivery id may be checked against earlier deliveries. Refusals before
	// this point are not deduplicated, so that nobody can claim another
	// tenant's delivery ids.
	Dedupe bool
	// Incident is the refusal, if any.
	Incident *schema.Incident
}

func refuse(v Verdict, code string) Verdict {
	inc := schema.NewIncident(schema.PhaseAdmission, code)
	v.Incident = &inc
	return v
}

// wellFormed decodes and validates a body: every ADMISSION_MALFORMED check.
func wellFormed(body []byte, maxBytes int) (Verdict, bool) {
	prop, err := schema.DecodeProposal(body, maxBytes)
	if err != nil {
		v := Verdict{}
		if len(body) <= config.MaxMaxPayloadBytes {
			v.ProposalID, _ = schema.PeekProposalID(body)
		}
		return refuse(v, schema.CodeAdmissionMalformed), false
	}
	v := Verdict{Proposal: prop}
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

// Offline judges a body without trust: what admission checks before and
// after authentication that needs no host keys or provider list (well
// formed, complete context). `processor fingerprint` uses it.
func Offline(body []byte, maxBytes int) Verdict {
	v, ok := wellFormed(body, maxBytes)
	if ok && !v.Proposal.Context.ContextComplete() {
		return refuse(v, schema.CodeAdmissionContextIncomplete)
	}
	return v
}

// Decide judges a proposal body and its headers. It has no side effects.
func Decide(p Policy, body []byte, hdr nats.Header) Verdict {
	v, ok := wellFormed(body, p.MaxPayloadBytes)
	if !ok {
		return v
	}
	prop := v.Proposal
	host, signed, err := trust.Authenticate(p.Hosts, body, hdr)
	if err != nil || (!signed && !p.AllowUnsigned) {
		return refuse(v, schema.CodeAdmissionUnauthenticated)
	}
	v.Host = host.Name
	if !prop.Context.ContextComplete() {
		return refuse(v, schema.CodeAdmissionContextIncomplete)
	}
	if signed && !host.Speaks(prop.Context.Tenant.TenantRef) {
		return refuse(v, schema.CodeAdmissionTenantNotPermitted)
	}
	v.Dedupe = true
	if !slices.Contains(p.Providers, prop.Intent.Provider) {
		return refuse(v, schema.CodeAdmissionProviderUnknown)
	}
	return v
}
