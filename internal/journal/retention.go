package journal

import "github.com/portcullis/portcullis/schema"

// StampMs is when the record last changed (kv.Stamped: the store's expiry
// index files the record at that time).
func (r *Record) StampMs() int64 { return r.UpdatedAtMs }

// Finished reports whether nothing more can happen to the intent by
// itself: its latest receipt settled it (next action none) and its effect
// is known, so no poll is pending and no operator is waited for. Only a
// finished journal may be removed after its horizon (package retention);
// an exhausted indeterminate one waits for an operator however old.
func (r *Record) Finished() bool {
	return r.State == StateDone && r.Receipt != nil && r.Receipt.NextAction == schema.NextNone && !Indeterminate(r.Receipt)
}
