package journal

import (
	"errors"
	"fmt"

	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// Writes are what one step of dispatch or reconciliation changes for a
// fingerprint. A Store commits them atomically and durably (Sync), before
// the step's external call or its outcomes.
type Writes struct {
	// Record, when set, replaces the fingerprint's record.
	Record *Record
	// Receipt, when set, is appended to the history as number
	// Record.ReceiptSeq.
	Receipt *schema.Receipt
	// Attempt, when set, writes a reconciliation attempt's checkpoint.
	Attempt *Attempt
	// Timer adds (or replaces) the fingerprint's reconciliation timer;
	// CancelTimer removes it.
	Timer       *kv.Timer
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
	Ended kv.Ended           `json:"ended"`
}

// Empty reports whether there is nothing to write.
func (w *Writes) Empty() bool {
	return w.Record == nil && w.Receipt == nil && w.Attempt == nil && w.Timer == nil && !w.CancelTimer && w.Indeterminate == 0 && w.Ended == nil
}

// Errors of Commit.
var (
	// ErrBadWrites is returned for writes no step produces.
	ErrBadWrites = errors.New("journal: inconsistent writes")
	// ErrConflict: another writer changed the fingerprint's record since
	// this caller's Load (another processor on a shared journal). Nothing
	// of the commit took effect (writes that are harmless on their own, a
	// timer or an index entry, may have); Load again and step again. A
	// caller that has called a provider since its Load never calls it again.
	ErrConflict = errors.New("journal: the record changed since it was loaded")
	// ErrUncertain: a write may or may not have been stored (a replicated
	// write that timed out and could not be read back). Treat it as both:
	// act on nothing it would have allowed, and expect to find it later.
	ErrUncertain = errors.New("journal: the write's outcome is unknown")
)

func (w *Writes) check() error {
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

// Store is the journal's storage. Every method is safe for concurrent use;
// callers hold Lock(fingerprint) around each read-decide-write of one
// fingerprint (Load, decide, Commit), so that dispatch, reconciliation and
// an operator's settlement never interleave for it in one processor.
//
// Across processors sharing a replicated journal, Lock excludes nothing:
// Commit is a compare-and-set against the record the last Load under the
// same Lock returned, and fails with ErrConflict when another writer got
// there first. A Pebble journal belongs to one processor and never
// conflicts.
type Store interface {
	// Lock serializes work on one fingerprint in this process and returns
	// its unlock.
	Lock(fingerprint string) (unlock func())
	// Load returns a fingerprint's record; found is false if none. Under
	// Lock, the first Load (and the first after a Commit's ErrConflict) is
	// what the next Commit compares against.
	Load(fingerprint string) (rec Record, found bool, err error)
	// Commit writes w for fingerprint, durably: the record, when w has
	// one, only if it is still the one Load returned (none, if nothing was
	// loaded), else ErrConflict. The Pebble journal writes everything in
	// one atomic batch; a replicated one commits at the record's
	// compare-and-set and repairs the rest (see Replicated).
	Commit(fingerprint string, w Writes) error
	// Receipts returns a fingerprint's receipts, oldest first.
	Receipts(fingerprint string) ([]schema.Receipt, error)
	// Attempt returns a reconciliation attempt's checkpoint.
	Attempt(fingerprint, attemptID string) (Attempt, bool, error)
	// Ended returns a proposal's dispatch-time end, if any.
	Ended(ref schema.ProposalRef) (kv.Ended, bool, error)
	// Indeterminates lists every fingerprint whose effect is unknown.
	Indeterminates() ([]kv.Indeterminate, error)
	// CountIndeterminate counts them (actions_indeterminate_actions reads
	// it at each scrape: cheap, no network wait).
	CountIndeterminate() (int, error)
}

// Pebble is the journal on a processor's own Pebble store (single node).
type Pebble struct {
	KV *pebble.Store
}

var _ Store = Pebble{}

// NewPebble returns the journal on s.
func NewPebble(s *pebble.Store) Pebble { return Pebble{KV: s} }

// Lock serializes on "fp/<fingerprint>": the only fingerprint lock.
func (p Pebble) Lock(fingerprint string) func() { return p.KV.Lock("fp/" + fingerprint) }

// Load reads a fingerprint's record.
func (p Pebble) Load(fingerprint string) (Record, bool, error) {
	var r Record
	found, err := p.KV.Intent(fingerprint, &r)
	if err != nil {
		return Record{}, false, fmt.Errorf("journal: load: %w", err)
	}
	return r, found, nil
}

// Commit writes w in one synced batch.
func (p Pebble) Commit(fingerprint string, w Writes) error {
	if err := w.check(); err != nil {
		return err
	}
	if w.Empty() {
		return nil
	}
	b := p.KV.NewBatch()
	if w.CancelTimer {
		b.CancelTimer(TimerID(fingerprint))
	}
	if w.Timer != nil {
		b.AddTimer(*w.Timer)
	}
	switch {
	case w.Indeterminate > 0:
		b.SetIndeterminate(fingerprint, w.SinceMs)
	case w.Indeterminate < 0:
		b.SetIndeterminate(fingerprint, 0)
	}
	if w.Attempt != nil {
		b.PutAttempt(fingerprint, w.Attempt.AttemptID, w.Attempt)
	}
	if w.Receipt != nil && w.Record != nil {
		b.AppendReceipt(w.Record.ReceiptSeq, *w.Receipt)
	}
	if w.Record != nil {
		b.PutIntent(fingerprint, w.Record)
	}
	if w.Ended != nil {
		b.PutEnded(w.Ended.Ref, w.Ended.Ended)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("journal: commit: %w", err)
	}
	return nil
}

// Receipts returns a fingerprint's receipts, oldest first.
func (p Pebble) Receipts(fingerprint string) ([]schema.Receipt, error) {
	return p.KV.Receipts(fingerprint)
}

// Attempt returns a reconciliation attempt's checkpoint.
func (p Pebble) Attempt(fingerprint, attemptID string) (Attempt, bool, error) {
	var a Attempt
	found, err := p.KV.Attempt(fingerprint, attemptID, &a)
	return a, found, err
}

// Ended returns a proposal's dispatch-time end.
func (p Pebble) Ended(ref schema.ProposalRef) (kv.Ended, bool, error) { return p.KV.Ended(ref) }

// Indeterminates lists every fingerprint whose effect is unknown.
func (p Pebble) Indeterminates() ([]kv.Indeterminate, error) { return p.KV.Indeterminates() }

// CountIndeterminate counts every fingerprint whose effect is unknown.
func (p Pebble) CountIndeterminate() (int, error) { return p.KV.CountIndeterminate() }
