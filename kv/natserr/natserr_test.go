package natserr_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/natserr"
)

// TestClassify checks each JetStream and NATS error against the kv
// sentinels it must (and must not) mean, wrapped or not.
func TestClassify(t *testing.T) {
	full := &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum messages exceeded"}
	storeFailed := &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "something else"}
	tooLarge := &jetstream.APIError{Code: 400, ErrorCode: 10054, Description: "message size exceeds maximum allowed"}
	noLeader := &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	wrongLast := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}
	if !natserr.WrongLast(wrongLast) {
		t.Fatal("WrongLast misses 10071")
	}
	for _, tc := range []struct {
		name                        string
		err                         error
		unavailable, isFull, tooBig bool
	}{
		{"nil", nil, false, false, false},
		{"stream full", full, true, true, false},
		{"stream full, wrapped", fmt.Errorf("publish x: %w", full), true, true, false},
		{"store failed otherwise", storeFailed, true, false, false},
		{"no leader", noLeader, true, false, false},
		{"timeout", nats.ErrTimeout, true, false, false},
		{"deadline", context.DeadlineExceeded, true, false, false},
		{"no responders", nats.ErrNoResponders, true, false, false},
		{"too large for the stream", tooLarge, false, false, true},
		{"too large for the connection", nats.ErrMaxPayload, false, false, true},
		{"wrong last sequence", wrongLast, false, false, false},
		{"wrong last sequence, replicated", &jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant}, true, false, false},
		{"connection closed", nats.ErrConnectionClosed, false, false, false},
		{"other", errors.New("x"), false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := natserr.Classify(tc.err)
			if errors.Is(got, kv.ErrUnavailable) != tc.unavailable || errors.Is(got, kv.ErrFull) != tc.isFull || errors.Is(got, kv.ErrTooLarge) != tc.tooBig {
				t.Fatalf("Classify(%v): unavailable %v full %v too large %v, want %v %v %v", tc.err,
					errors.Is(got, kv.ErrUnavailable), errors.Is(got, kv.ErrFull), errors.Is(got, kv.ErrTooLarge), tc.unavailable, tc.isFull, tc.tooBig)
			}
			if movedOn := natserr.WrongLast(tc.err); errors.Is(got, kv.ErrMovedOn) != movedOn {
				t.Fatalf("Classify(%v): moved on %v, want %v", tc.err, errors.Is(got, kv.ErrMovedOn), movedOn)
			}
			if tc.err != nil && !errors.Is(got, tc.err) {
				t.Fatalf("Classify(%v) lost its cause", tc.err)
			}
			if again := natserr.Classify(got); again != got {
				t.Fatalf("Classify is not idempotent: %v", again)
			}
		})
	}
}
