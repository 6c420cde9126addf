package kv

// StampMs is when the record last changed (Stamped: the store's expiry
// index files the record at that time).
func (r *Approval) StampMs() int64 { return max(r.ArrivedAtMs, r.DecidedAtMs) }
