package pebble

import (
	"fmt"

	"github.com/portcullis/portcullis/kv"

	"github.com/portcullis/portcullis/schema"
)

// Approval decodes a proposal's authorization record (a kv.Approval)
// into v; found is false if there is none.
func (s *Store) Approval(ref schema.ProposalRef, v any) (bool, error) {
	return s.get(proposalKey(prefixApproval, ref), v)
}

// PutApproval writes a proposal's authorization record v and keeps the
// index of parked proposals in step: an entry with the approval deadline
// while parked, none otherwise. Callers serialize per proposal and put the
// approval's expiry timer in the same batch.
func (b *Batch) PutApproval(ref schema.ProposalRef, v any, parked bool, expiresAtMs int64) {
	key := proposalKey(prefixApproval, ref)
	b.set(key, v)
	b.file(ClassProposal, stampOf(v), key[1:])
	if parked {
		b.set(proposalKey(prefixPending, ref), expiresAtMs)
	} else {
		b.delete(proposalKey(prefixPending, ref))
	}
}

// CountParked counts the entries of the index of parked proposals.
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

// ParkedIndex returns the index of parked proposals, in key order (by
// host, then proposal id).
func (s *Store) ParkedIndex() ([]Parked, error) {
	var idx []Parked
	err := s.scan([]byte{prefixPending}, func(key, val []byte) (bool, error) {
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
	return idx, err
}

// ProposalFingerprint returns the fingerprint a proposal was grounded to:
// from its authorization record, else from the last outcome recorded for
// it (its fingerprint, approval or receipt). found is false for a proposal
// this store knows no fingerprint of (never admitted here, or ended before
// grounding bound it).
func (s *Store) ProposalFingerprint(ref schema.ProposalRef) (fingerprint string, found bool, err error) {
	var a kv.Approval
	found, err = s.Approval(ref, &a)
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
