package kv

import (
	"context"
	"errors"

	"github.com/portcullis/portcullis/schema"
)

// Activity holds the value-free activity snapshot of each intent (SPEC
// §1), keyed by fingerprint: the stages edit it once per state change of
// the intent, the operator reads it. Its one backend is the replicated
// bucket (kv/jetstream.Activity), which every processor of a cluster
// shares.
type Activity interface {
	// Get returns the snapshot of fingerprint; ErrNoActivity when it has
	// none.
	Get(ctx context.Context, fingerprint string) (*schema.Activity, error)
	// Update applies edit to the snapshot of fingerprint (a new one when
	// it has none) and stores it; concurrent updates of one fingerprint
	// are serialised, none lost. A dispatch section without its result
	// (FinishedAtMs 0) is not stored: the schema has no status for one.
	Update(ctx context.Context, fingerprint string, edit func(a *schema.Activity)) error
	// UpdateFollowed is Update for an edit that another edit of the same
	// intent is expected to follow within moments (authorization's, as it
	// hands the proposal to dispatch, whose edit comes with the
	// dispatch's result): the store may hold it briefly, so that both
	// are written at once. It returns, as Update does, once the snapshot
	// holding the edit is stored.
	UpdateFollowed(ctx context.Context, fingerprint string, edit func(a *schema.Activity)) error
}

// ErrNoActivity: the fingerprint has no activity snapshot.
var ErrNoActivity = errors.New("kv: no activity")
