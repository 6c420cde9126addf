package approvals

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// Writes are what one authorization step changes for a proposal. A Store
// commits them atomically and durably, before the step's results are
// published, and only if the stored record is still in state From.
type Writes struct {
	// From is the state the step decided from (StateNone: no record). The
	// commit fails with ErrConflict, writing nothing, if the stored record
	// is in another state by now.
	From State
	// Record, when set, replaces the proposal's record.
	Record *Record
	// Timer adds (or replaces) the proposal's expiry timer (ID TimerID);
	// CancelTimer removes it.
	Timer       *kv.Timer
	CancelTimer bool
}

// Empty reports whether there is nothing to write.
func (w *Writes) Empty() bool { return w.Record == nil && w.Timer == nil && !w.CancelTimer }

// Sentinel errors of Commit.
var (
	// ErrBadWrites: writes no step produces (a decision changed, a timer
	// both added and cancelled, a record of another proposal, …).
	ErrBadWrites = errors.New("approvals: inconsistent writes")
	// ErrConflict: the stored record is no longer in the state the step
	// decided from (another input decided first). Nothing was written;
	// loading again shows what won.
	ErrConflict = errors.New("approvals: record changed since it was read")
)

func (w *Writes) check(ref schema.ProposalRef) error {
	bad := func(msg string) error { return fmt.Errorf("%w: %s", ErrBadWrites, msg) }
	switch {
	case w.Timer != nil && w.CancelTimer:
		return bad("a timer both added and cancelled")
	case w.Timer != nil && w.Timer.ID != TimerID(ref):
		return bad("a timer of another proposal")
	case w.From != StateNone && w.From != StateParked && !w.Empty():
		return bad("a decision changed")
	case w.Record == nil && !w.Empty() && w.From != StateParked:
		return bad("a timer without a parked record")
	case w.Record == nil:
		return nil
	case w.Record.Ref() != ref:
		return bad("a record of another proposal")
	}
	switch r := w.Record; r.State {
	case StateParked:
		if w.From != StateNone {
			return bad("parked twice")
		}
		if r.ExpiresAtMs <= 0 {
			return bad("parked without a deadline")
		}
	case StatePermitted, StateDenied:
		if r.DecidedBy == "" {
			return bad("a decision without the input that made it")
		}
	default:
		return bad("unknown state " + string(r.State))
	}
	return nil
}

// parkedDelta is how the number of parked proposals changes when w is
// committed over a record in state w.From.
func (w *Writes) parkedDelta() int64 {
	if w.Record == nil {
		return 0
	}
	var d int64
	if w.Record.Parked() {
		d++
	}
	if w.From == StateParked {
		d--
	}
	return d
}

// Store is where approval records live. Every method is safe for
// concurrent use; callers hold Lock(ref) around each load-step-commit of
// one proposal, so that the consumers of the authorization stream and of
// the grants stream never interleave for it on one processor. Across
// processors, Commit's compare-and-set on From is what lets exactly one
// decision win.
type Store interface {
	// Lock serializes work on one proposal (in this process) and returns
	// its unlock.
	Lock(ref schema.ProposalRef) (unlock func())
	// Load returns a proposal's record; found is false if none.
	Load(ref schema.ProposalRef) (rec Record, found bool, err error)
	// Commit writes w for ref atomically and durably (a synced write, or a
	// replicated one), if the stored record is still in state w.From;
	// otherwise it returns ErrConflict and writes nothing. Empty writes
	// succeed without looking.
	Commit(ref schema.ProposalRef, w Writes) error
	// Parked returns the parked records, the soonest to expire first (then
	// by host and proposal id), at most limit of them (limit ≤ 0: all), and
	// how many proposals are parked in all.
	Parked(limit int) (parked []Record, total int, err error)
	// Count is the number of parked proposals. It must be cheap and never
	// block (a metrics scrape reads it): a backend keeps it current as
	// records change rather than counting on demand.
	Count() int
}

// Pebble keeps approvals in a processor's own Pebble store (single node),
// under kv's approval and parked-index keys, with the expiry timers in kv's
// timer table (the scheduler fires them).
type Pebble struct {
	kv *pebble.Store
	// cas makes Commit's check of the stored state and its write one step,
	// whether or not the caller holds Lock.
	cas kv.KeyedMutex
	// parked counts parked proposals: scanned at NewPebble, then adjusted
	// by each commit. Every write of approval records goes through Commit.
	parked atomic.Int64
}

var _ Store = (*Pebble)(nil)

// NewPebble returns the approvals on s, counting the parked ones.
func NewPebble(s *pebble.Store) (*Pebble, error) {
	n, err := s.CountParked()
	if err != nil {
		return nil, fmt.Errorf("approvals: count parked: %w", err)
	}
	p := &Pebble{kv: s}
	p.parked.Store(int64(n))
	return p, nil
}

func lockKey(ref schema.ProposalRef) string { return "approval/" + ref.Host + "\x00" + ref.ProposalID }

// Lock serializes on "approval/<host>\x00<proposal_id>".
func (p *Pebble) Lock(ref schema.ProposalRef) func() { return p.kv.Lock(lockKey(ref)) }

// Load reads a proposal's record.
func (p *Pebble) Load(ref schema.ProposalRef) (Record, bool, error) {
	var r Record
	found, err := p.kv.Approval(ref, &r)
	if err != nil {
		return Record{}, false, fmt.Errorf("approvals: load: %w", err)
	}
	return r, found, nil
}

// Commit checks the stored state and writes w in one synced batch.
func (p *Pebble) Commit(ref schema.ProposalRef, w Writes) error {
	if err := w.check(ref); err != nil {
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
		cur.State = StateNone
	}
	if cur.State != w.From {
		return fmt.Errorf("%w: %s is %q, the step saw %q", ErrConflict, ref, cur.State, w.From)
	}
	b := p.kv.NewBatch()
	if w.CancelTimer {
		b.CancelTimer(TimerID(ref))
	}
	if w.Timer != nil {
		b.AddTimer(*w.Timer)
	}
	if r := w.Record; r != nil {
		b.PutApproval(ref, r, r.Parked(), r.ExpiresAtMs)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("approvals: commit: %w", err)
	}
	p.parked.Add(w.parkedDelta())
	return nil
}

// Parked reads the index of parked proposals and each listed record; an
// entry whose record is no longer parked (decided between the two reads)
// is left out of the list, though counted in total.
func (p *Pebble) Parked(limit int) ([]Record, int, error) {
	idx, err := p.kv.ParkedIndex()
	if err != nil {
		return nil, 0, fmt.Errorf("approvals: parked: %w", err)
	}
	slices.SortFunc(idx, func(a, b pebble.Parked) int {
		return cmp.Or(cmp.Compare(a.ExpiresAtMs, b.ExpiresAtMs), cmp.Compare(a.Ref.Host, b.Ref.Host), cmp.Compare(a.Ref.ProposalID, b.Ref.ProposalID))
	})
	out := []Record{}
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
func (p *Pebble) Count() int { return int(p.parked.Load()) }
