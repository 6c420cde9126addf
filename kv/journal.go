package kv

import (
	"errors"
	"fmt"

	"github.com/portcullis/portcullis/schema"
)

// IntentWrites are what one step of dispatch or reconciliation changes for a
// fingerprint. A Store commits them atomically and durably (Sync), before
// the step's external call or its outcomes.
type IntentWrites struct {
	// Record, when set, replaces the fingerprint's record.
	Record *Intent
	// Receipt, when set, is appended to the history as number
	// Record.ReceiptSeq.
	Receipt *schema.Receipt
	// Attempt, when set, writes a reconciliation attempt's checkpoint.
	Attempt *Attempt
	// Timer adds (or replaces) the fingerprint's reconciliation timer;
	// CancelTimer removes it.
	Timer       *Timer
	CancelTimer bool
	// Indeterminate adds (+1, since SinceMs) or removes (-1) the
	// fingerprint from the index of actions whose effect is unknown.
	Indeterminate int
	SinceMs       int64
	// Ended records a proposal this stage ended without dispatching.
	Ended *EndedProposal
}

// EndedProposal is a proposal ended at dispatch's re-check (SPEC §3
// Dispatch step 3): it binds the proposal, never the fingerprint.
type EndedProposal struct {
	Ref   schema.ProposalRef `json:"proposal"`
	Ended Ended              `json:"ended"`
}

// Empty reports whether there is nothing to write.
func (w *IntentWrites) Empty() bool {
	return w.Record == nil && w.Receipt == nil && w.Attempt == nil && w.Timer == nil && !w.CancelTimer && w.Indeterminate == 0 && w.Ended == nil
}

// Errors of a store's Commit (the journal's, the approvals').
var (
	// ErrBadWrites is returned for writes no step produces.
	ErrBadWrites = errors.New("kv: inconsistent writes")
)

// Check refuses writes no step produces (ErrBadWrites): every backend's
// Commit checks them first.
func (w *IntentWrites) Check() error {
	switch {
	case w.Receipt != nil && w.Record == nil:
		return fmt.Errorf("%w: a receipt without its record", ErrBadWrites)
	case w.Receipt != nil && w.Record.ReceiptSeq == 0:
		return fmt.Errorf("%w: a receipt numbered 0", ErrBadWrites)
	case w.Timer != nil && w.CancelTimer:
		return fmt.Errorf("%w: a timer both added and cancelled", ErrBadWrites)
	}
	return nil
}

// Journal is the intent journal: the storage of dispatch and
// reconciliation. Every method is safe for concurrent use; callers hold Lock(fingerprint) around each read-decide-write of one
// fingerprint (Load, decide, Commit), so that dispatch, reconciliation and
// an operator's settlement never interleave for it in one processor.
//
// Across processors sharing a replicated journal, Lock excludes nothing:
// Commit is a compare-and-set against the record the last Load under the
// same Lock returned, and fails with ErrConflict when another writer got
// there first. A Pebble journal belongs to one processor and never
// conflicts.
type Journal interface {
	// Lock serializes work on one fingerprint in this process and returns
	// its unlock.
	Lock(fingerprint string) (unlock func())
	// Load returns a fingerprint's record; found is false if none. Under
	// Lock, the first Load (and the first after a Commit's ErrConflict) is
	// what the next Commit compares against.
	Load(fingerprint string) (rec Intent, found bool, err error)
	// Commit writes w for fingerprint, durably: the record, when w has
	// one, only if it is still the one Load returned (none, if nothing was
	// loaded), else ErrConflict. The Pebble journal writes everything in
	// one atomic batch; a replicated one commits at the record's
	// compare-and-set and repairs the rest (see Replicated).
	Commit(fingerprint string, w IntentWrites) error
	// Receipts returns a fingerprint's receipts, oldest first.
	Receipts(fingerprint string) ([]schema.Receipt, error)
	// Attempt returns a reconciliation attempt's checkpoint.
	Attempt(fingerprint, attemptID string) (Attempt, bool, error)
	// Ended returns a proposal's dispatch-time end, if any.
	Ended(ref schema.ProposalRef) (Ended, bool, error)
	// Indeterminates lists every fingerprint whose effect is unknown.
	Indeterminates() ([]Indeterminate, error)
	// CountIndeterminate counts them (actions_indeterminate_actions reads
	// it at each scrape: cheap, no network wait).
	CountIndeterminate() (int, error)
}
