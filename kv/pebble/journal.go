package pebble

import (
	"fmt"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// Journal is the intent journal on a processor's own Pebble store (single node).
type Journal struct {
	KV *Store
}

var _ kv.Journal = Journal{}

// NewJournal returns the journal on s.
func NewJournal(s *Store) Journal { return Journal{KV: s} }

// Lock serializes on "fp/<fingerprint>": the only fingerprint lock.
func (p Journal) Lock(fingerprint string) func() { return p.KV.Lock("fp/" + fingerprint) }

// Load reads a fingerprint's record.
func (p Journal) Load(fingerprint string) (kv.Intent, bool, error) {
	var r kv.Intent
	found, err := p.KV.Intent(fingerprint, &r)
	if err != nil {
		return kv.Intent{}, false, fmt.Errorf("journal: load: %w", err)
	}
	return r, found, nil
}

// Commit writes w in one synced batch.
func (p Journal) Commit(fingerprint string, w kv.IntentWrites) error {
	if err := w.Check(); err != nil {
		return err
	}
	if w.Empty() {
		return nil
	}
	b := p.KV.NewBatch()
	if w.CancelTimer {
		b.CancelTimer(kv.IntentTimerID(fingerprint))
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
	if err := b.Commit(Sync); err != nil {
		return fmt.Errorf("journal: commit: %w", err)
	}
	return nil
}

// Receipts returns a fingerprint's receipts, oldest first.
func (p Journal) Receipts(fingerprint string) ([]schema.Receipt, error) {
	return p.KV.Receipts(fingerprint)
}

// Attempt returns a reconciliation attempt's checkpoint.
func (p Journal) Attempt(fingerprint, attemptID string) (kv.Attempt, bool, error) {
	var a kv.Attempt
	found, err := p.KV.Attempt(fingerprint, attemptID, &a)
	return a, found, err
}

// Ended returns a proposal's dispatch-time end.
func (p Journal) Ended(ref schema.ProposalRef) (kv.Ended, bool, error) { return p.KV.Ended(ref) }

// Indeterminates lists every fingerprint whose effect is unknown.
func (p Journal) Indeterminates() ([]kv.Indeterminate, error) { return p.KV.Indeterminates() }

// CountIndeterminate counts every fingerprint whose effect is unknown.
func (p Journal) CountIndeterminate() (int, error) { return p.KV.CountIndeterminate() }
