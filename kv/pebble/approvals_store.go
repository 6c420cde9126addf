package pebble

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// Approvals keeps approvals in a processor's own Pebble store (single node),
// under kv's approval and parked-index keys, with the expiry timers in kv's
// timer table (the scheduler fires them).
type Approvals struct {
	kv *Store
	// cas makes Commit's check of the stored state and its write one step,
	// whether or not the caller holds Lock.
	cas kv.KeyedMutex
	// parked counts parked proposals: scanned at NewPebble, then adjusted
	// by each commit. Every write of approval records goes through Commit.
	parked atomic.Int64
}

var _ kv.Approvals = (*Approvals)(nil)

// NewApprovals returns the approvals on s, counting the parked ones.
func NewApprovals(s *Store) (*Approvals, error) {
	n, err := s.CountParked()
	if err != nil {
		return nil, fmt.Errorf("approvals: count parked: %w", err)
	}
	p := &Approvals{kv: s}
	p.parked.Store(int64(n))
	return p, nil
}

func lockKey(ref schema.ProposalRef) string { return "approval/" + ref.Host + "\x00" + ref.ProposalID }

// Lock serializes on "approval/<host>\x00<proposal_id>".
func (p *Approvals) Lock(ref schema.ProposalRef) func() { return p.kv.Lock(lockKey(ref)) }

// Load reads a proposal's record.
func (p *Approvals) Load(ref schema.ProposalRef) (kv.Approval, bool, error) {
	var r kv.Approval
	found, err := p.kv.Approval(ref, &r)
	if err != nil {
		return kv.Approval{}, false, fmt.Errorf("approvals: load: %w", err)
	}
	return r, found, nil
}

// Commit checks the stored state and writes w in one synced batch.
func (p *Approvals) Commit(ref schema.ProposalRef, w kv.ApprovalWrites) error {
	if err := w.Check(ref); err != nil {
		return err
	}
	if w.Empty() {
		return nil
	}
	unlock := p.cas.Lock(lockKey(ref))
	defer unlock()
	cur, found, err := p.Load(ref)
	if err != nil {
		return fmt.Errorf("approvals: commit: %w", err)
	}
	if !found {
		cur.State = kv.StateNone
	}
	if cur.State != w.From {
		return fmt.Errorf("%w: %s is %q, the step saw %q", kv.ErrConflict, ref, cur.State, w.From)
	}
	b := p.kv.NewBatch()
	if w.CancelTimer {
		b.CancelTimer(kv.ApprovalTimerID(ref))
	}
	if w.Timer != nil {
		b.AddTimer(*w.Timer)
	}
	if r := w.Record; r != nil {
		b.PutApproval(ref, r, r.Parked(), r.ExpiresAtMs)
	}
	if err := b.Commit(Sync); err != nil {
		return fmt.Errorf("approvals: commit: %w", err)
	}
	p.parked.Add(w.ParkedDelta())
	return nil
}

// Parked reads the index of parked proposals and each listed record; an
// entry whose record is no longer parked (decided between the two reads)
// is left out of the list, though counted in total.
func (p *Approvals) Parked(limit int) ([]kv.Approval, int, error) {
	idx, err := p.kv.ParkedIndex()
	if err != nil {
		return nil, 0, fmt.Errorf("approvals: parked: %w", err)
	}
	slices.SortFunc(idx, func(a, b Parked) int {
		return kv.CompareParked(a.ExpiresAtMs, a.Ref, b.ExpiresAtMs, b.Ref)
	})
	out := []kv.Approval{}
	for _, e := range idx {
		if limit > 0 && len(out) == limit {
			break
		}
		r, found, err := p.Load(e.Ref)
		if err != nil {
			return nil, 0, err
		}
		if found && r.Parked() {
			out = append(out, r)
		}
	}
	return out, len(idx), nil
}

// Count is the number of parked proposals, kept in memory.
func (p *Approvals) Count() int { return int(p.parked.Load()) }
