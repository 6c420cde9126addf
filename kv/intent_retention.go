package kv

import "github.com/portcullis/portcullis/schema"

// StampMs is when the record last changed (Stamped: the store's expiry
// index files the record at that time).
func (r *Intent) StampMs() int64 { return r.UpdatedAtMs }

// Finished reports whether nothing more can happen to the intent by
// itself: its latest receipt settled it (next action none) and its effect
// is known, so no poll is pending and no operator is waited for — or
// nothing was ever sent for it (a record that only holds proposals ended
// before dispatch). Only a finished journal may be removed after its
// horizon (package retention, Replicated.Sweep); an exhausted
// indeterminate one waits for an operator however old, and an in-flight
// one is the fence of an action that may have reached its provider.
func (r *Intent) Finished() bool {
	if r.State == StateNew {
		return r.Receipt == nil && r.DispatchAttempts == 0
	}
	return r.State == StateDone && r.Receipt != nil && r.Receipt.NextAction == schema.NextNone && !IndeterminateReceipt(r.Receipt)
}
