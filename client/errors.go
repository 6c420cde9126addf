package client

import (
	"context"
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by this package wrap them, so test with
// errors.Is.
var (
	// ErrNoOutcome: the outcome stream holds no outcome for the proposal
	// (none yet, or it aged out of the stream's retention).
	ErrNoOutcome = errors.New("client: no outcome stored")

	// ErrPublishRefused: the message was provably not stored. The stream
	// refused it (full, or the message too large: the error also wraps the
	// server's *jetstream.APIError), no stream captures the subject
	// (JetStream not running, wrong subject prefix), or NATS refused the
	// publish (a permissions violation: a subject of another host, or a
	// login without the host role; Propose finds that out already when it
	// subscribes to the outcome subject, before publishing anything). Fix
	// the cause before sending again.
	ErrPublishRefused = errors.New("client: publish refused")

	// ErrTimeout: no answer in time. For a publish this means the outcome
	// is unknown: the message may have been stored. Sending the same bytes
	// again is safe (the stream drops a duplicate Nats-Msg-Id, and
	// admission answers a repeated delivery_id with the recorded outcome).
	// When a context's deadline caused it, the error also wraps
	// context.DeadlineExceeded.
	ErrTimeout = errors.New("client: timed out")

	// ErrEnded: Tracker.Await saw a terminal outcome that its condition does
	// not accept, so the condition will not be met by the proposal's normal
	// course (the outcome is returned with the error). A terminal
	// RECONCILIATION_REQUIRED can still change when an operator settles the
	// action; await it again if you want to wait for that.
	ErrEnded = errors.New("client: proposal ended")

	// ErrInvalid: a message this package was asked to send breaks the wire
	// contract (a proposal admission would call malformed, a grant or
	// decline with a field out of its format). Nothing was sent.
	ErrInvalid = errors.New("client: invalid message")

	// ErrNotParked: Grant or Decline was given an outcome that is not this
	// host's NEEDS_APPROVAL outcome with an approval block.
	ErrNotParked = errors.New("client: not a parked proposal")

	// ErrFingerprintMismatch: the approval asks for another fingerprint than
	// the one the caller expects (GrantOptions.ExpectFingerprint). Never
	// approve an intent you did not compute yourself.
	ErrFingerprintMismatch = errors.New("client: approval is for another fingerprint")

	// ErrLoginRefused: the NATS server was reached and refused the login
	// (nats.ErrAuthorization, also wrapped): an anonymous login to a server
	// that requires one, or a key that is no configured role's public_key.
	ErrLoginRefused = errors.New("client: NATS refused the login")

	// ErrIdentityMismatch: the connection would log in as one identity and
	// sign as another (Connect's options log in as someone else than its
	// seed), or NewHost was given a connection that logged in without a
	// key to sign with. The processor drops a host's messages signed by a
	// key that is not its own, so this is refused before anything is sent.
	ErrIdentityMismatch = errors.New("client: the login and the signing key differ")

	// ErrNotNATS: the server URL is not a NATS URL (nats://, tls://, ws://,
	// wss://, or host:port), such as the processor's http:// metrics
	// address. Refused before connecting.
	ErrNotNATS = errors.New("client: not a NATS URL")
)

// ctxError is the error for a done context: it wraps ctx's error, and
// ErrTimeout too when the deadline passed.
func ctxError(ctx context.Context, what string) error {
	err := context.Cause(ctx)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("client: %s: %w: %w", what, ErrTimeout, err)
	}
	return fmt.Errorf("client: %s: %w", what, err)
}
