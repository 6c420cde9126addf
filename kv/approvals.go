package kv

import (
	"cmp"
	"fmt"

	"github.com/portcullis/portcullis/schema"
)

// ApprovalWrites are what one authorization step changes for a proposal. A Store
// commits them atomically and durably, before the step's results are
// published, and only if the stored record is still in state From.
type ApprovalWrites struct {
	// From is the state the step decided from (StateNone: no record). The
	// commit fails with ErrConflict, writing nothing, if the stored record
	// is in another state by now.
	From ApprovalState
	// Record, when set, replaces the proposal's record.
	Record *Approval
	// Timer adds (or replaces) the proposal's expiry timer (ID TimerID);
	// CancelTimer removes it.
	Timer       *Timer
	CancelTimer bool
}

// Empty reports whether there is nothing to write.
func (w *ApprovalWrites) Empty() bool { return w.Record == nil && w.Timer == nil && !w.CancelTimer }

// Check refuses writes no step produces (ErrBadWrites). Commit's
// ErrConflict on approvals: the stored record is no longer in the state
// the step decided from (another input decided first). Nothing was
// written; loading again shows what won.
func (w *ApprovalWrites) Check(ref schema.ProposalRef) error {
	bad := func(msg string) error { return fmt.Errorf("%w: %s", ErrBadWrites, msg) }
	switch {
	case w.Timer != nil && w.CancelTimer:
		return bad("a timer both added and cancelled")
	case w.Timer != nil && w.Timer.ID != ApprovalTimerID(ref):
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

// ParkedDelta is how the number of parked proposals changes when w is
// committed over a record in state w.From.
func (w *ApprovalWrites) ParkedDelta() int64 {
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

// Approvals is where approval records live. Every method is safe for
// concurrent use; callers hold Lock(ref) around each load-step-commit of
// one proposal, so that the consumers of the authorization stream and of
// the grants stream never interleave for it on one processor. Across
// processors, Commit's compare-and-set on From is what lets exactly one
// decision win.
type Approvals interface {
	// Lock serializes work on one proposal (in this process) and returns
	// its unlock.
	Lock(ref schema.ProposalRef) (unlock func())
	// Load returns a proposal's record; found is false if none.
	Load(ref schema.ProposalRef) (rec Approval, found bool, err error)
	// Commit writes w for ref atomically and durably (a synced write, or a
	// replicated one), if the stored record is still in state w.From;
	// otherwise it returns ErrConflict and writes nothing. Empty writes
	// succeed without looking.
	Commit(ref schema.ProposalRef, w ApprovalWrites) error
	// Parked returns the parked records, the soonest to expire first (then
	// by host and proposal id), at most limit of them (limit ≤ 0: all), and
	// how many proposals are parked in all.
	Parked(limit int) (parked []Approval, total int, err error)
	// Count is the number of parked proposals. It must be cheap and never
	// block (a metrics scrape reads it): a backend keeps it current as
	// records change rather than counting on demand.
	Count() int
}

// CompareParked is the order in which every backend's Parked lists parked
// approvals: the soonest to expire first, then by host and proposal id.
func CompareParked(aExpiresAtMs int64, a schema.ProposalRef, bExpiresAtMs int64, b schema.ProposalRef) int {
	return cmp.Or(cmp.Compare(aExpiresAtMs, bExpiresAtMs), cmp.Compare(a.Host, b.Host), cmp.Compare(a.ProposalID, b.ProposalID))
}
