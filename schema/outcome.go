package schema

import "strings"

// Schema identifiers of the wire messages.
const (
	SchemaProposal    = "actions.proposal.v1"
	SchemaGrant       = "actions.grant.v1"
	SchemaDecline     = "actions.decline.v1"
	SchemaOutcome     = "actions.outcome.v1"
	SchemaFingerprint = "actions.fingerprint.v2"
	SchemaDispatch    = "actions.dispatch.v1"
	SchemaReconcile   = "actions.reconcile.v1"
	SchemaEnvelope    = "actions.envelope.v1"
	SchemaActivity    = "actions.activity.v1"
	SchemaDisclosure  = "actions.disclosure.v1"
)

// ProposalRef identifies a proposal: the host that sent it (the <h> token
// of its subjects) and its proposal_id, unique per host (SPEC §1).
type ProposalRef struct {
	Host       string `json:"host"`
	ProposalID string `json:"proposal_id"`
}

// Outcome is what a proposer reads on `<prefix>.outcomes.<h>.<proposal_id>`
// (SPEC §2.4). Null fields stay null on the wire.
type Outcome struct {
	// Host addresses the outcome (the subject's <h> token); it is not part
	// of the message body.
	Host        string      `json:"-"`
	Schema      string      `json:"schema"`
	ProposalID  string      `json:"proposal_id"`
	Kind        Kind        `json:"kind"`
	Terminal    bool        `json:"terminal"`
	EffectTruth EffectTruth `json:"effect_truth"`
	Incidents   []Incident  `json:"incidents"`
	Fingerprint *string     `json:"fingerprint"`
	Referent    *string     `json:"referent"`
	Receipt     *Receipt    `json:"receipt"`
	Approval    *Approval   `json:"approval"`
	AtMs        int64       `json:"at_ms"`
	// RecordedEarlier is set on an outcome whose receipt came from the
	// dispatch of another proposal of the same intent (SPEC §2.4): the
	// effect, if any, is not this proposal's doing; a host tells "I just
	// did it" from "it was done already" by it. Absent (false) otherwise,
	// and on every outcome without a receipt.
	RecordedEarlier bool `json:"recorded_earlier,omitzero"`
}

// NamedFingerprint is the fingerprint the outcome names: its own, its
// approval's or its receipt's ("" for none).
func (o *Outcome) NamedFingerprint() string {
	switch {
	case o.Fingerprint != nil && *o.Fingerprint != "":
		return *o.Fingerprint
	case o.Approval != nil && o.Approval.Fingerprint != "":
		return o.Approval.Fingerprint
	case o.Receipt != nil && o.Receipt.Fingerprint != "":
		return o.Receipt.Fingerprint
	}
	return ""
}

// Approval tells a frontend what to ask its user before sending a grant.
type Approval struct {
	Fingerprint   string `json:"fingerprint"`
	Summary       string `json:"summary"`
	ExternalSpend *Spend `json:"external_spend"`
	ExpiresAtMs   int64  `json:"expires_at_ms"`
}

// NewOutcome builds an outcome of a kind with the kind's effect truth and
// terminality. Incidents is never nil so it encodes as [].
func NewOutcome(to ProposalRef, kind Kind, atMs int64, incidents ...Incident) Outcome {
	if incidents == nil {
		incidents = []Incident{}
	}
	return Outcome{
		Host:        to.Host,
		Schema:      SchemaOutcome,
		ProposalID:  to.ProposalID,
		Kind:        kind,
		Terminal:    kind.Terminal(),
		EffectTruth: kind.EffectTruth(),
		Incidents:   incidents,
		AtMs:        atMs,
	}
}

// FailureOutcome is the outcome of one incident, with the kind the code
// table assigns it.
func FailureOutcome(to ProposalRef, inc Incident, atMs int64) Outcome {
	info, _ := LookupCode(inc.Phase, inc.Code)
	return NewOutcome(to, info.Kind, atMs, inc)
}

// To is the proposal the outcome is addressed to.
func (o *Outcome) To() ProposalRef { return ProposalRef{Host: o.Host, ProposalID: o.ProposalID} }

// StringPtr returns a pointer to s, for the nullable outcome fields.
func StringPtr(s string) *string { return &s }

// String is "<h>/<proposal_id>", for people.
func (r ProposalRef) String() string { return r.Host + "/" + r.ProposalID }

// JoinRefs lists proposals for people, separated by sep.
func JoinRefs(refs []ProposalRef, sep string) string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.String()
	}
	return strings.Join(out, sep)
}
