package schema

import "slices"

// Activity is the one value-free snapshot per intent that the KV bucket
// `<prefix>_activity` holds under the fingerprint's 64 hex digits (SPEC §3
// Activity, seed 003's external_action_activity). It never holds a payload,
// protected values, credentials, grant signatures, or tenant and actor
// identifiers; every section is replaced by the stage that owns it.
type Activity struct {
	Schema      string `json:"schema"`
	Fingerprint string `json:"fingerprint"`
	// Proposals are the proposals that carried this intent (bounded).
	Proposals []ProposalRef `json:"proposals"`
	Target
	Summary string `json:"summary"`
	// ExternalSpend is the intent's spend, null if none.
	ExternalSpend *Spend `json:"external_spend"`
	// Status is the intent's state: awaiting_approval, denied, authorized,
	// or the latest receipt's status.
	Status            string                  `json:"status"`
	Requester         *Requester              `json:"requester"`
	PolicyEvaluations []PolicyEvaluation      `json:"policy_evaluations"`
	Decision          *ActivityDecision       `json:"decision"`
	Authorization     *ActivityAuthorization  `json:"authorization"`
	Disclosure        *DisclosureRecord       `json:"disclosure"`
	Dispatch          *ActivityDispatch       `json:"dispatch"`
	Reconciliation    *ActivityReconciliation `json:"reconciliation"`
	Receipt           *Receipt                `json:"receipt"`
	UpdatedAtMs       int64                   `json:"updated_at_ms"`
}

// Activity statuses before a receipt exists.
const (
	ActivityAwaitingApproval = "awaiting_approval"
	ActivityDenied           = "denied"
	ActivityAuthorized       = "authorized"
)

// MaxActivityProposals bounds Activity.Proposals (the oldest are kept).
const MaxActivityProposals = 32

// ActivityDecision is the authorization decision.
type ActivityDecision struct {
	// Outcome is "pending", "permit" or "deny".
	Outcome     string `json:"outcome"`
	ReasonCode  Code   `json:"reason_code,omitempty"`
	DecidedAtMs int64  `json:"decided_at_ms"`
}

// ActivityAuthorization describes the grant without its author or signature.
type ActivityAuthorization struct {
	// Method, Assurance, IssuedAtMs and ExpiresAtMs are those of the
	// well-formed grant the decision saw; all four are absent (zero) when
	// there was none (a parked proposal, a malformed grant).
	Method      string `json:"method,omitempty"`
	Assurance   string `json:"assurance,omitempty"`
	IssuedAtMs  int64  `json:"issued_at_ms,omitzero"`
	ExpiresAtMs int64  `json:"expires_at_ms,omitzero"`
	// ApprovalExpiresAtMs is when a parked proposal stops waiting; 0 if it
	// never waited (and then absent).
	ApprovalExpiresAtMs int64 `json:"approval_expires_at_ms,omitzero"`
}

// ActivityDispatch describes the dispatch attempt.
type ActivityDispatch struct {
	Adapter      string `json:"adapter"`
	Attempted    bool   `json:"attempted"`
	StartedAtMs  int64  `json:"started_at_ms"`
	FinishedAtMs int64  `json:"finished_at_ms"`
	Status       Status `json:"status"`
	ErrorCode    string `json:"error_code,omitempty"`
}

// ActivityReconciliation describes verification and reconciliation.
type ActivityReconciliation struct {
	Attempts      int    `json:"attempts"`
	LastAttemptID string `json:"last_attempt_id,omitempty"`
	NextAtMs      int64  `json:"next_at_ms,omitzero"` // absent when no poll is due
	Exhausted     bool   `json:"exhausted"`
	// Resolution is "", "provider", or "operator" (processor reconcile resolve).
	Resolution string `json:"resolution,omitempty"`
	// ResolvedBy is the configured name of the operator who resolved the
	// effect (the receipt's reconciliation.operator); absent unless
	// Resolution is "operator" and the request was signed.
	ResolvedBy string `json:"resolved_by,omitempty"`
}

// AddProposal records a proposal on the activity, bounded and without repeats.
func (a *Activity) AddProposal(ref ProposalRef) { a.Proposals = AppendProposal(a.Proposals, ref) }

// AppendProposal appends ref unless it is there already or the list holds
// MaxActivityProposals proposals (the oldest are kept).
func AppendProposal(refs []ProposalRef, ref ProposalRef) []ProposalRef {
	if len(refs) >= MaxActivityProposals || slices.Contains(refs, ref) {
		return refs
	}
	return append(refs, ref)
}
