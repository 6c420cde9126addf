package kv

import "github.com/portcullis/portcullis/schema"

// Approval states.
const (
	// ApprovalParked: waiting for a standalone grant or the approval TTL.
	ApprovalParked = "parked"
	// ApprovalPermitted: handed to dispatch.
	ApprovalPermitted = "permitted"
	// ApprovalDenied: ended with a DENIED (or PROCESSING_FAILED) outcome.
	ApprovalDenied = "denied"
)

// Approval is the authorization stage's record of one proposal: parked
// while it waits for a grant, then kept as the decision, so that a
// redelivered input republishes exactly what was decided and a second grant
// or a late timer changes nothing. It is value-free: the payload and the
// tenant and actor ids stay in the authorization stream, where the parked
// envelope is re-read (by Seq) when its grant arrives.
type Approval struct {
	Host        string `json:"host"`
	ProposalID  string `json:"proposal_id"`
	Fingerprint string `json:"fingerprint"`
	Referent    string `json:"referent"`
	// Seq is the authorization-stream sequence of the proposal's envelope.
	Seq   uint64 `json:"seq"`
	State string `json:"state"`
	// ArrivedAtMs is when the proposal was first decided or parked.
	ArrivedAtMs int64 `json:"arrived_at_ms"`
	// ExpiresAtMs is the approval deadline of a parked proposal; 0 if it
	// never waited.
	ExpiresAtMs int64 `json:"expires_at_ms,omitempty"`
	// DecidedBy names the input that decided ("<stream>/<seq>": the
	// proposal itself, a grant or the expiry timer); "" while parked.
	DecidedBy   string `json:"decided_by,omitempty"`
	DecidedAtMs int64  `json:"decided_at_ms,omitempty"`
	// Code is the denial's closed code; "" when permitted or parked.
	Code schema.Code `json:"code,omitempty"`
	// Evaluations are the policy layers' verdicts of the decision (of the
	// screen before parking, while parked).
	Evaluations []schema.PolicyEvaluation `json:"evaluations"`
}

// Ref is the proposal the record is about.
func (a *Approval) Ref() schema.ProposalRef {
	return schema.ProposalRef{Host: a.Host, ProposalID: a.ProposalID}
}

// Approval returns a proposal's authorization record.
func (s *Store) Approval(ref schema.ProposalRef) (Approval, bool, error) {
	var a Approval
	found, err := s.get(proposalKey(prefixApproval, ref), &a)
	return a, found, err
}

// PutApproval writes a proposal's authorization record and keeps the index
// of parked proposals in step. Callers serialize per proposal id (they hold
// Store.Lock) and put the approval's expiry timer in the same batch.
func (b *Batch) PutApproval(a Approval) {
	b.set(proposalKey(prefixApproval, a.Ref()), a)
	if a.State == ApprovalParked {
		b.set(proposalKey(prefixPending, a.Ref()), a.ExpiresAtMs)
	} else {
		b.delete(proposalKey(prefixPending, a.Ref()))
	}
}

// CountParked counts the proposals waiting for a grant.
func (s *Store) CountParked() (int, error) {
	n := 0
	err := s.scan([]byte{prefixPending}, func(_, _ []byte) (bool, error) {
		n++
		return true, nil
	})
	return n, err
}
