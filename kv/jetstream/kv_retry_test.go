package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	kvjs "github.com/portcullis/portcullis/kv/jetstream"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestUnanswered(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("get: %w", nats.ErrTimeout), true},
		{nats.ErrNoResponders, true},
		{jetstream.ErrNoStreamResponse, true},
		{&jetstream.APIError{Code: 503, Description: "JetStream system temporarily unavailable"}, true},
		{jetstream.ErrKeyExists, false},
		{jetstream.ErrKeyNotFound, false},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, false},
		{errors.New("refused"), false},
	}
	for _, tc := range cases {
		if got := kvjs.Unanswered(tc.err); got != tc.want {
			t.Errorf("Unanswered(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestNoPeers(t *testing.T) {
	if !kvjs.NoPeers(fmt.Errorf("create: %w", &jetstream.APIError{Code: 400, ErrorCode: 10005})) {
		t.Error("no suitable peers not recognized")
	}
	if kvjs.NoPeers(nats.ErrTimeout) || kvjs.NoPeers(&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}) {
		t.Error("another error taken for no peers")
	}
}

// Do tries again while nothing answers, stops at the first refusal, and
// gives up when its budget is spent.
func TestDo(t *testing.T) {
	tries := 0
	err := kvjs.Budget{}.Do(func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("a try without a deadline")
		}
		if tries++; tries < 3 {
			return nats.ErrTimeout
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Errorf("retried to success: %v after %d tries", err, tries)
	}
	tries = 0
	err = kvjs.Budget{}.Do(func(context.Context) error { tries++; return jetstream.ErrKeyExists })
	if !errors.Is(err, jetstream.ErrKeyExists) || tries != 1 {
		t.Errorf("a refusal: %v after %d tries", err, tries)
	}
	start := time.Now()
	err = kvjs.Budget{Op: 200 * time.Millisecond, Attempt: 10 * time.Millisecond}.Do(func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("an exhausted budget: %v", err)
	}
}
