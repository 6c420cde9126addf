// Package adapter is the provider seam of SPEC §4 as the stages call it:
// the Adapter interface and the errors that say how far a request got.
// The adapters themselves (nats, http, fake) live in internal/adapters and
// return these errors; the dispatch and reconciliation stages classify by
// them, each through a small interface of its own.
//
// # Errors
//
// An adapter returns either a reply that passed schema.AdapterReply.Valid
// (with "acknowledged" refused for Reconcile), or an error that says how far
// the request got:
//
//   - ErrNotInvoked: provably nobody received the request (NATS "no
//     responders"; no HTTP connection was ever obtained; the context was done
//     before sending; an invalid request that was never sent, which also
//     matches ErrInvalidRequest). Retrying cannot duplicate an effect.
//   - ErrTimeout: the deadline passed after the request may have been
//     received. The effect is unknown.
//   - ErrMalformedReply: a reply arrived (the provider was invoked) but is not
//     strictly a valid reply.
//   - anything else: unknown (HTTP 5xx, 3xx, 4xx without a valid reply, a
//     connection lost after sending, a cancelled context after sending).
//
// The dispatch stage maps them to ADAPTER_UNAVAILABLE, ADAPTER_TIMEOUT,
// MALFORMED_ADAPTER_RESULT and ADAPTER_ERROR. Misclassifying "maybe
// received" as "not invoked" could duplicate an effect, so every
// classification errs towards unknown.
//
// It sits with the stages that use it (a stage may not import another, so
// dispatch and reconciliation share it here) and imports only schema, so
// that the adapters below the stages can return its errors. It is not a
// stage (internal/rules: rules.Shared).
package adapter

import (
	"context"
	"errors"

	"github.com/portcullis/portcullis/schema"
)

// Adapter is the provider seam. Implementations are safe for concurrent use.
type Adapter interface {
	// Kind is "nats", "http" or "fake"; receipts record it as `adapter`.
	Kind() string
	// Dispatch sends the action once. It never retries on its own.
	Dispatch(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error)
	// Reconcile asks, read-only, what became of an earlier dispatch.
	Reconcile(ctx context.Context, req schema.ReconcileRequest) (schema.AdapterReply, error)
}

// Sentinel errors; see the package documentation. Their texts keep the
// adapters' prefix: the adapters return them.
var (
	ErrNotInvoked     = errors.New("adapters: provider not invoked")
	ErrTimeout        = errors.New("adapters: timed out after sending")
	ErrMalformedReply = errors.New("adapters: malformed reply")
	// ErrInvalidRequest marks a request the adapter refused to send (a
	// programming error upstream). Such an error also matches ErrNotInvoked.
	ErrInvalidRequest = errors.New("adapters: invalid request")
)
