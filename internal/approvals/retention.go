package approvals

// StampMs is when the record last changed (kv.Stamped: the store's expiry
// index files the record at that time).
func (r *Record) StampMs() int64 { return max(r.ArrivedAtMs, r.DecidedAtMs) }
