package stages

import (
	"context"
	"errors"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/natserr"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrPermanent marks a handler error that no retry can fix (an input that
// cannot be decoded, say): the runner asks GiveUp at once instead of
// redelivering.
var ErrPermanent = errors.New("stages: permanent failure")

// ErrRetriesExhausted is the cause GiveUp receives when a handler failed
// MaxAttempts times with errors that are not transient, or when an input
// was delivered so often without being finished that it must be killing
// the processors that take it.
var ErrRetriesExhausted = errors.New("stages: retries exhausted")

// ErrTransient marks a handler error that says nothing about the input:
// the cluster, a store or a peer did not answer, or another writer got
// there first. A handler wraps it where the cause is its own (see
// Transient for the causes recognised without it).
var ErrTransient = errors.New("stages: transient failure")

// Transient reports whether err is an outage or a race, not a fault of the
// input: a store, JetStream or the NATS connection did not answer (no
// leader, an election, a server restarting, no responders, a timeout
// whose result is unknown: kv.ErrUnavailable), a stream is full (it
// pushes back until it has room: kv.ErrFull is also kv.ErrUnavailable),
// or a shared record changed or its write's outcome is unknown
// (kv.ErrConflict, kv.ErrUncertain). Retrying fixes these, so the runner
// retries them for as long as they last and never counts them toward
// giving up (SPEC §6: an outage never ends a proposal). The errors of the
// runner's own publishes are classified by natserr, a backend's by the
// backend.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	err = natserr.Classify(err)
	if errors.Is(err, ErrTransient) || errors.Is(err, kv.ErrUnavailable) ||
		errors.Is(err, kv.ErrConflict) || errors.Is(err, kv.ErrUncertain) {
		return true
	}
	return errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionDraining) ||
		errors.Is(err, nats.ErrStaleConnection) || errors.Is(err, nats.ErrNoServers) ||
		errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, context.Canceled)
}

// streamFull reports a publish a stream refused because it is full (its
// bytes, messages, or one subject's messages): kv.ErrFull, which is also
// kv.ErrUnavailable (Transient, so retried).
func streamFull(err error) bool { return errors.Is(natserr.Classify(err), kv.ErrFull) }

// unpublishable reports a publish error that proves the message was not
// stored and never will be, however often it is tried: it is too large
// for the connection or the stream (kv.ErrTooLarge), or its subject is
// invalid. Every other publish error is retried with the same message id.
func unpublishable(err error) bool {
	return errors.Is(natserr.Classify(err), kv.ErrTooLarge) || errors.Is(err, nats.ErrBadSubject)
}
