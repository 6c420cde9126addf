package kv

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/portcullis/portcullis/schema"
)

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
	return s.count([]byte{prefixPending})
}

// Parked is one entry of the index of parked proposals.
type Parked struct {
	Ref         schema.ProposalRef
	ExpiresAtMs int64
}

// readProposalKey decodes the key of a per-proposal record.
func readProposalKey(key []byte) (schema.ProposalRef, error) {
	if len(key) < 1 {
		return schema.ProposalRef{}, errBadKey
	}
	host, rest, err := readString(key[1:])
	if err != nil {
		return schema.ProposalRef{}, err
	}
	id, rest, err := readString(rest)
	if err != nil || len(rest) != 0 {
		return schema.ProposalRef{}, errBadKey
	}
	return schema.ProposalRef{Host: host, ProposalID: id}, nil
}

// ParkedApprovals returns the authorization records of the proposals
// waiting for a grant, the soonest to expire first (then by host and
// proposal id), at most limit of them (limit ≤ 0: all), and how many
// entries the index holds in all. It reads the index of parked proposals and each listed
// proposal's record; an index entry whose record is missing or no longer
// parked (a decision committed between the two reads) is left out.
func (s *Store) ParkedApprovals(limit int) (parked []Approval, total int, err error) {
	var idx []Parked
	err = s.scan([]byte{prefixPending}, func(key, val []byte) (bool, error) {
		ref, err := readProposalKey(key)
		if err != nil {
			return false, fmt.Errorf("%w: pending index: %w", ErrCorrupt, err)
		}
		var exp int64
		if err := decode(val, &exp); err != nil {
			return false, err
		}
		idx = append(idx, Parked{Ref: ref, ExpiresAtMs: exp})
		return true, nil
	})
	if err != nil {
		return nil, 0, err
	}
	slices.SortFunc(idx, func(a, b Parked) int {
		return cmp.Or(cmp.Compare(a.ExpiresAtMs, b.ExpiresAtMs), cmp.Compare(a.Ref.Host, b.Ref.Host), cmp.Compare(a.Ref.ProposalID, b.Ref.ProposalID))
	})
	total = len(idx)
	parked = []Approval{}
	for _, p := range idx {
		if limit > 0 && len(parked) == limit {
			break
		}
		a, found, err := s.Approval(p.Ref)
		if err != nil {
			return nil, 0, err
		}
		if found && a.State == ApprovalParked {
			parked = append(parked, a)
		}
	}
	return parked, total, nil
}

// ProposalFingerprint returns the fingerprint a proposal was grounded to:
// from its authorization record, else from the last outcome recorded for
// it (its fingerprint, approval or receipt). found is false for a proposal
// this store knows no fingerprint of (never admitted here, or ended before
// grounding bound it).
func (s *Store) ProposalFingerprint(ref schema.ProposalRef) (fingerprint string, found bool, err error) {
	a, found, err := s.Approval(ref)
	if err != nil {
		return "", false, err
	}
	if found && a.Fingerprint != "" {
		return a.Fingerprint, true, nil
	}
	o, found, err := s.LastOutcome(ref)
	if err != nil || !found {
		return "", false, err
	}
	switch {
	case o.Fingerprint != nil && *o.Fingerprint != "":
		return *o.Fingerprint, true, nil
	case o.Approval != nil && o.Approval.Fingerprint != "":
		return o.Approval.Fingerprint, true, nil
	case o.Receipt != nil && o.Receipt.Fingerprint != "":
		return o.Receipt.Fingerprint, true, nil
	}
	return "", false, nil
}
