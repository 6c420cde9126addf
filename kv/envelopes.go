package kv

import (
	"context"
	"errors"
)

// Envelopes keep, per host, the envelopes a stage reads back later: a
// proposal parked for approval (the authorization stage's, until it is
// decided) or a dispatch whose effect is unknown for want of an answer
// (dispatch's, read by reconciliation should the request turn out lost).
// Each host has a budget of its own (SPEC §2.8 Budgets), so that no
// host's envelopes can crowd out another's: a host whose budget is spent
// is refused alone (ErrBudget), and what it cannot keep is its own loss.
// Its one backend is JetStream (kv/jetstream.Envelopes: a stream per
// host), which every processor of a cluster shares.
type Envelopes interface {
	// Keep stores data under (host, key), replacing what was kept there.
	// msgID makes a retry of the same write one write. ErrBudget: host's
	// budget has no room for it, and nothing was stored.
	Keep(ctx context.Context, host, key string, data []byte, msgID string) error
	// Get returns what is kept under (host, key) and when it was stored
	// (unix ms); ErrNotKept when nothing (valid) is.
	Get(ctx context.Context, host, key string) (data []byte, atMs int64, err error)
	// Drop removes what is kept under (host, key); nothing kept is no
	// error.
	Drop(ctx context.Context, host, key string) error
}

// Errors of Envelopes.
var (
	// ErrBudget: the host's budget for envelopes of this kind is spent.
	ErrBudget = errors.New("kv: the host's budget is spent")
	// ErrNotKept: nothing is kept under the key.
	ErrNotKept = errors.New("kv: nothing kept")
	// ErrForged (with ErrNotKept): what is kept under the key does not
	// carry the processor's seal: it is not believed.
	ErrForged = errors.New("kv: a kept envelope without a valid seal")
)

// StreamMessages reads a message of one stream by its sequence: where an
// earlier version of the authorization stage parked a proposal (in the
// stage's own stream, by the sequence its approval record names), read
// back until every such proposal is decided. Its backend is
// kv/jetstream.StreamMessages.
type StreamMessages interface {
	// Message returns the data of the message at seq; ErrNotKept when the
	// stream has none there (deleted, purged).
	Message(ctx context.Context, seq uint64) ([]byte, error)
}
