// The approval records: the authorization stage's state (SPEC §2.2, §3
// Authorization): one record per proposal — (host, proposal_id) — kept
// while the proposal is parked for a grant and then as its decision, and
// the expiry timer of a parked one.
//
// Stages reach it through Store: Pebble on a single node (NewPebble), a
// replicated backend on a cluster (SPEC §6: "a parked proposal is resumed
// or declined by a grant whichever processor parked it; an approval times
// out once"). Commit is a compare-and-set on the record's state, so that a
// backend that cannot hold a lock across processors (JetStream KV: Create,
// or Update at the revision read) still lets exactly one decision win.

package kv

import (
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// ApprovalState is where a proposal's authorization stands.
type ApprovalState string

// Approval states.
const (
	// StateNone: no record (the proposal was never seen here).
	StateNone ApprovalState = ""
	// StateParked: waiting for a standalone grant or the approval TTL.
	StateParked ApprovalState = "parked"
	// StatePermitted: handed to dispatch.
	StatePermitted ApprovalState = "permitted"
	// StateDenied: ended with a DENIED (or PROCESSING_FAILED) outcome.
	StateDenied ApprovalState = "denied"
)

// Approval is the authorization stage's record of one proposal: parked while
// it waits for a grant, then kept as the decision, so that a redelivered
// input republishes exactly what was decided and a second grant or a late
// timer changes nothing. It is value-free: the payload and the tenant and
// actor ids stay in the authorization stream, where the parked envelope is
// re-read (by Seq) when its grant arrives.
type Approval struct {
	Host        string `json:"host"`
	ProposalID  string `json:"proposal_id"`
	Fingerprint string `json:"fingerprint"`
	Referent    string `json:"referent"`
	// Seq is the authorization-stream sequence of the proposal's envelope.
	Seq   uint64        `json:"seq"`
	State ApprovalState `json:"state"`
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
	// Bound: permitted without a grant, because the intent was dispatched
	// already (schema.AuthorizationRecord.Bound).
	Bound bool `json:"bound,omitzero"`
	// Evaluations are the policy layers' verdicts of the decision (of the
	// screen before parking, while parked).
	Evaluations []schema.PolicyEvaluation `json:"evaluations"`
}

// Ref is the proposal the record is about.
func (r *Approval) Ref() schema.ProposalRef {
	return schema.ProposalRef{Host: r.Host, ProposalID: r.ProposalID}
}

// Parked reports whether the proposal waits for a grant.
func (r *Approval) Parked() bool { return r.State == StateParked }

// ApprovalTimerID is the ID of a proposal's one expiry timer: re-arming it
// replaces the pending one.
func ApprovalTimerID(ref schema.ProposalRef) string {
	return "approval/" + subjects.ProposalToken(ref.Host, ref.ProposalID)
}

// ExpiryTimer fires a parked proposal's expiry at dueMs on subject (the
// authorization stage's timer subject for the proposal). msgID dedupes
// the scheduler's republishing after a crash: TimerID for the first arming,
// a new one for each re-arming.
func ExpiryTimer(subject string, ref schema.ProposalRef, dueMs int64, msgID string) Timer {
	return Timer{
		ID:      ApprovalTimerID(ref),
		DueMs:   dueMs,
		Subject: subject,
		Data:    []byte(subjects.ProposalToken(ref.Host, ref.ProposalID)),
		MsgID:   msgID,
	}
}

// EndApproval records that proposal ref ended before authorization decided it (a
// stage before it gave up on it, by input by), unless the proposal has a
// record already: then what the record holds — a decision, a parked
// proposal — is the proposal's, and End reports false. So a stage before
// authorization never announces a give-up after authorization decided,
// and a hand-off it may have made, reaching authorization later, finds the
// proposal ended and changes nothing.
func EndApproval(s Approvals, ref schema.ProposalRef, code schema.Code, by string, nowMs int64) (bool, error) {
	unlock := s.Lock(ref)
	defer unlock()
	cur, found, err := s.Load(ref)
	if err != nil {
		return false, err
	}
	if found {
		// Its own earlier write, whose answer was lost, is its own.
		return cur.State == StateDenied && cur.DecidedBy == by, nil
	}
	rec := Approval{
		Host: ref.Host, ProposalID: ref.ProposalID, State: StateDenied, Code: code,
		DecidedBy: by, ArrivedAtMs: nowMs, DecidedAtMs: nowMs, Evaluations: []schema.PolicyEvaluation{},
	}
	if err := s.Commit(ref, ApprovalWrites{From: StateNone, Record: &rec}); err != nil {
		return false, err // a conflict or an unknown outcome: the caller's retry reads what won
	}
	return true, nil
}
