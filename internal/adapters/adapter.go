// Package adapters implements the provider seam of SPEC §4: one two-method
// interface (Dispatch, Reconcile) and three adapters behind it: nats (core
// request-reply), http (POST with an Idempotency-Key) and fake (scripted,
// for tests and the demo).
//
// # Errors
//
// Every adapter returns a reply that passed schema.AdapterReply.Valid or
// one of the errors of stages/adapter (ErrNotInvoked, ErrTimeout,
// ErrMalformedReply, ErrInvalidRequest; re-declared here), whose package
// documentation says what each means. Misclassifying "maybe received" as
// "not invoked" could duplicate an effect, so every classification here
// errs towards unknown.
//
// Error texts name only the provider, the method and a category: never the
// request (payload, protected values) nor any part of a reply body.
//
// It owns each adapter and its own configuration; the seam itself (the
// interface and its errors) is stages/adapter's. It imports only the wire
// packages (schema, subjects) and that seam: a stage calls an adapter
// through its interface, and an adapter knows no stage, store or journal.
package adapters

import (
	"fmt"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/adapter"
)

// Adapter is the provider seam (stages/adapter.Adapter).
type Adapter = adapter.Adapter

// The seam's sentinel errors (stages/adapter), under the names the
// adapters and their tests use.
var (
	ErrNotInvoked     = adapter.ErrNotInvoked
	ErrTimeout        = adapter.ErrTimeout
	ErrMalformedReply = adapter.ErrMalformedReply
	ErrInvalidRequest = adapter.ErrInvalidRequest
)

// MaxReplyBytes bounds a reply body. A valid reply is far smaller: 20
// evidence refs of 512 characters plus an action id, even fully escaped,
// stay under it.
const MaxReplyBytes = 64 << 10

// Methods, as they appear in error texts and HTTP paths.
const (
	MethodDispatch  = "dispatch"
	MethodReconcile = "reconcile"
)

// DecodeReply strictly decodes a reply body: one JSON object with only the
// members of SPEC §4, no duplicate names, no trailing data, at most
// MaxReplyBytes, and within schema.AdapterReply.Valid's bounds (reconcile
// may not answer "acknowledged"). Optional members may be absent or null.
// Any failure is ErrMalformedReply, whose text never quotes the body.
func DecodeReply(data []byte, forReconcile bool) (schema.AdapterReply, error) {
	if len(data) > MaxReplyBytes {
		return schema.AdapterReply{}, fmt.Errorf("%w: over %d bytes", ErrMalformedReply, MaxReplyBytes)
	}
	var r schema.AdapterReply
	if err := schema.Decode(data, &r); err != nil {
		// schema.Decode keeps only the error's category, never input.
		return schema.AdapterReply{}, fmt.Errorf("%w: %w", ErrMalformedReply, err)
	}
	return checkReply(r, forReconcile)
}

// checkReply applies the bounds to a reply from any source (a decoded body,
// or the fake's script and hooks), so that every adapter returns only valid
// replies.
func checkReply(r schema.AdapterReply, forReconcile bool) (schema.AdapterReply, error) {
	if !r.Valid(forReconcile) {
		if forReconcile && r.Outcome == schema.ReplyAcknowledged {
			return schema.AdapterReply{}, fmt.Errorf("%w: reconcile answered acknowledged", ErrMalformedReply)
		}
		return schema.AdapterReply{}, fmt.Errorf("%w: outside the reply contract", ErrMalformedReply)
	}
	return r, nil
}

// encodeDispatch checks a request and returns its body. It refuses a request
// that cannot be right: the wrong schema or provider, an idempotency key
// that is not the fingerprint's 64 hex digits (SPEC §2.3), no not_after_ms
// (SPEC §4), or a body that
// does not encode (an invalid raw payload or value). Such a request is a bug
// upstream, and sending it could reach the wrong provider or defeat its
// deduplication.
func encodeDispatch(provider string, req *schema.DispatchRequest) ([]byte, error) {
	switch {
	case req.Schema != schema.SchemaDispatch:
		return nil, invalid(provider, MethodDispatch, "schema")
	case req.Provider != provider:
		return nil, invalid(provider, MethodDispatch, "provider")
	case !schema.ValidFingerprintKey(req.IdempotencyKey) || req.Fingerprint != schema.FingerprintOfKey(req.IdempotencyKey):
		return nil, invalid(provider, MethodDispatch, "fingerprint or idempotency key")
	case req.NotAfterMs <= 0:
		// Without the lease's end a connector could act after another
		// processor concluded the dispatch interrupted (SPEC §4).
		return nil, invalid(provider, MethodDispatch, "not_after_ms")
	}
	body, err := schema.Marshal(req)
	if err != nil {
		// The encoder's message may quote the payload: drop it.
		return nil, invalid(provider, MethodDispatch, "does not encode")
	}
	return body, nil
}

func encodeReconcile(provider string, req *schema.ReconcileRequest) ([]byte, error) {
	switch {
	case req.Schema != schema.SchemaReconcile:
		return nil, invalid(provider, MethodReconcile, "schema")
	case !schema.ValidFingerprintKey(req.IdempotencyKey) || req.Fingerprint != schema.FingerprintOfKey(req.IdempotencyKey):
		return nil, invalid(provider, MethodReconcile, "fingerprint or idempotency key")
	case req.AttemptID == "":
		return nil, invalid(provider, MethodReconcile, "attempt_id")
	}
	body, err := schema.Marshal(req)
	if err != nil {
		return nil, invalid(provider, MethodReconcile, "does not encode")
	}
	return body, nil
}

func invalid(provider, method, what string) error {
	return fmt.Errorf("adapters: %s %s: %w (%s), so %w", provider, method, ErrInvalidRequest, what, ErrNotInvoked)
}

// notSent reports a context that was done before anything was sent.
func notSent(provider, method string, err error) error {
	return fmt.Errorf("adapters: %s %s: %w: %w", provider, method, ErrNotInvoked, err)
}
