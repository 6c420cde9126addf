package schema

// Schema identifiers of the wire messages.
const (
	SchemaProposal    = "actions.proposal.v1"
	SchemaGrant       = "actions.grant.v1"
	SchemaOutcome     = "actions.outcome.v1"
	SchemaFingerprint = "actions.fingerprint.v2"
	SchemaDispatch    = "actions.dispatch.v1"
	SchemaReconcile   = "actions.reconcile.v1"
	SchemaEnvelope    = "actions.envelope.v1"
	SchemaActivity    = "actions.activity.v1"
	SchemaDisclosure  = "actions.disclosure.v1"
)

// Outcome is what a proposer reads on `<prefix>.outcomes.<proposal_id>`
// (SPEC §2.4). Null fields stay null on the wire.
type Outcome struct {
	Schema      string     `json:"schema"`
	ProposalID  string     `json:"proposal_id"`
	Kind        string     `json:"kind"`
	Terminal    bool       `json:"terminal"`
	EffectTruth string     `json:"effect_truth"`
	Incidents   []Incident `json:"incidents"`
	Fingerprint *string    `json:"fingerprint"`
	Referent    *string    `json:"referent"`
	Receipt     *Receipt   `json:"receipt"`
	Approval    *Approval  `json:"approval"`
	AtMs        int64      `json:"at_ms"`
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
func NewOutcome(proposalID, kind string, atMs int64, incidents ...Incident) Outcome {
	info := Kinds[kind]
	if incidents == nil {
		incidents = []Incident{}
	}
	return Outcome{
		Schema:      SchemaOutcome,
		ProposalID:  proposalID,
		Kind:        kind,
		Terminal:    info.Terminal,
		EffectTruth: info.EffectTruth,
		Incidents:   incidents,
		AtMs:        atMs,
	}
}

// FailureOutcome is the outcome of one incident, with the kind the code
// table assigns it.
func FailureOutcome(proposalID string, inc Incident, atMs int64) Outcome {
	info, _ := LookupCode(inc.Phase, inc.Code)
	return NewOutcome(proposalID, info.Kind, atMs, inc)
}

// StringPtr returns a pointer to s, for the nullable outcome fields.
func StringPtr(s string) *string { return &s }
