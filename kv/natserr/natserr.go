// Package natserr says what the errors of NATS and JetStream mean in kv's
// terms (kv.ErrUnavailable, kv.ErrFull, kv.ErrTooLarge): the one place
// that knows JetStream's error codes. The JetStream backend (kv/jetstream)
// wraps its errors with it, and the runner classifies the errors of its
// own publishes through it, so that neither the stages nor anything they
// import names a backend or a JetStream error code.
//
// It holds no state and opens no connection: it is not a backend.
package natserr

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/kv"
)

// JetStream's error codes this package reads.
const (
	// errCodeStoreFailed is JSStreamStoreFailedF: with a "maximum …"
	// description, a stream that is full.
	errCodeStoreFailed jetstream.ErrorCode = 10077
	// errCodeMessageTooLarge is JSStreamMessageExceedsMaximumErr.
	errCodeMessageTooLarge jetstream.ErrorCode = 10054
	// errCodeNoPeers is "no suitable peers for placement".
	errCodeNoPeers jetstream.ErrorCode = 10005
)

// Unanswered reports an error that says JetStream did not answer (no
// leader, an election, a server going away), not that it refused.
func Unanswered(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.Code == 503 {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionReconnecting)
}

// StreamFull reports a publish a stream refused because it is full (its
// bytes, its messages, or one subject's messages): JetStream's
// store-failed error (10077, a 503) with its "maximum … exceeded"
// description. Waiting does not make room in a stream only its own
// readers empty.
func StreamFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStoreFailed && strings.HasPrefix(apiErr.Description, "maximum")
}

// TooLarge reports a publish refused for its size, by the stream
// (JetStream's "message size exceeds maximum allowed", 10054) or by the
// connection before it was sent (nats.ErrMaxPayload).
func TooLarge(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeMessageTooLarge {
		return true
	}
	return errors.Is(err, nats.ErrMaxPayload)
}

// NoPeers reports JetStream refusing to place a stream's replicas because
// too few servers are up (or seen up yet, right after a cluster starts):
// creating a stream then is worth retrying, other requests are not.
func NoPeers(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeNoPeers
}

// WrongLast reports a publish refused because its subject's last
// sequence is not the one it expected: 10071, or on a replicated stream
// 10164 (also the answer while another publish to the subject is being
// replicated).
func WrongLast(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Classify returns err wrapping, besides itself, each of kv's sentinels
// its NATS or JetStream cause means: kv.ErrUnavailable (Unanswered),
// kv.ErrFull (StreamFull), kv.ErrTooLarge (TooLarge), kv.ErrMovedOn
// (WrongLast). An error that means
// none of them (or nil) is returned as it is.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	var kinds []error
	if Unanswered(err) && !errors.Is(err, kv.ErrUnavailable) {
		kinds = append(kinds, kv.ErrUnavailable)
	}
	if StreamFull(err) && !errors.Is(err, kv.ErrFull) {
		kinds = append(kinds, kv.ErrFull)
	}
	if TooLarge(err) && !errors.Is(err, kv.ErrTooLarge) {
		kinds = append(kinds, kv.ErrTooLarge)
	}
	if WrongLast(err) && !errors.Is(err, kv.ErrMovedOn) {
		kinds = append(kinds, kv.ErrMovedOn)
	}
	if len(kinds) == 0 {
		return err
	}
	return &classified{err: err, kinds: kinds}
}

// classified is an error with the kv sentinels it means.
type classified struct {
	err   error
	kinds []error
}

func (c *classified) Error() string { return c.err.Error() }

// Unwrap yields the cause first, then the sentinels.
func (c *classified) Unwrap() []error { return append([]error{c.err}, c.kinds...) }
