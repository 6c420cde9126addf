package schema

// Envelope is the internal message one stage hands to the next on
// `<prefix>.stage.<stage>.…`. It carries the admitted proposal (intent
// normalized) and what each stage has established so far. It travels only
// inside the stage streams; outcomes, incidents, Pebble and the activity
// bucket never hold it.
type Envelope struct {
	Schema   string   `json:"schema"`
	Proposal Proposal `json:"proposal"`
	// Host is the <h> token of the subject the proposal arrived on: the
	// configured host whose signature admitted it (or, with unsigned input
	// allowed, the host it was attributed to).
	Host          string               `json:"host"`
	AdmittedAtMs  int64                `json:"admitted_at_ms"`
	Grounded      *Grounded            `json:"grounded,omitempty"`
	Authorization *AuthorizationRecord `json:"authorization,omitempty"`
}

// Grounded is the grounding stage's result: the one exact target.
type Grounded struct {
	Referent       string `json:"referent"`
	Fingerprint    string `json:"fingerprint"`
	IdempotencyKey string `json:"idempotency_key"`
	ObservationRef string `json:"observation_ref"`
}

// AuthorizationRecord is the authorization stage's permit: the grant that
// authorized the exact fingerprint and every policy evaluation on the way.
type AuthorizationRecord struct {
	Grant       Grant              `json:"grant"`
	Evaluations []PolicyEvaluation `json:"evaluations"`
	DecidedAtMs int64              `json:"decided_at_ms"`
	// Bound: the proposal came without a grant for an intent that is
	// dispatched already (a receipt or an in-flight record binds its
	// fingerprint): it is answered from the intent (SPEC §2.4: the same
	// receipt), never dispatched. Grant is empty then.
	Bound bool `json:"bound,omitzero"`
}

// PolicyEvaluation is one layer's verdict, kept for the activity record.
type PolicyEvaluation struct {
	// Layer is "grant" or "managed_policy:<configured name>".
	Layer string `json:"layer"`
	// Outcome is "pass" or "deny".
	Outcome    string `json:"outcome"`
	ReasonCode Code   `json:"reason_code,omitempty"`
}

// Policy evaluation outcomes.
const (
	EvalPass = "pass"
	EvalDeny = "deny"
)

// Ref is the proposal the envelope carries.
func (e *Envelope) Ref() ProposalRef {
	return ProposalRef{Host: e.Host, ProposalID: e.Proposal.ProposalID}
}
