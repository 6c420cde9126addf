package kv

import "errors"

// The errors every backend's errors wrap, so that a caller (the stages,
// the runner) tells an outage from a race from a refusal without knowing
// which backend answered. A backend's error wraps one or more of them and
// keeps its own cause besides (errors.Is finds either).
var (
	// ErrConflict: another writer changed the record since this caller's
	// Load (another processor on a shared store). Nothing of the commit
	// took effect (writes that are harmless on their own, a timer or an
	// index entry, may have); Load again and step again. A caller that has
	// called a provider since its Load never calls it again.
	ErrConflict = errors.New("kv: the record changed since it was loaded")
	// ErrUncertain: a write may or may not have been stored (a replicated
	// write that timed out and could not be read back). Treat it as both:
	// act on nothing it would have allowed, and expect to find it later.
	ErrUncertain = errors.New("kv: the write's outcome is unknown")
	// ErrUnavailable: the store did not answer (no leader, an election, a
	// server going away, a timeout whose result is unknown), which says
	// nothing of the request: asking again later may succeed.
	ErrUnavailable = errors.New("kv: the store did not answer")
	// ErrFull: the store refused a write because it is full (a stream's
	// bytes, messages, or one subject's messages). It is also
	// ErrUnavailable: room comes back as its readers empty it.
	ErrFull = errors.New("kv: the store is full")
	// ErrTooLarge: the store refused a write because it is larger than
	// any it accepts; no retry can store it.
	ErrTooLarge = errors.New("kv: the write is too large for the store")
	// ErrFailed: the store failed (a local store's failed WAL write or
	// sync) and refuses every write until it is reopened.
	ErrFailed = errors.New("kv: store failed")
)
