// Package jetstream is kv's replicated backend: the stores a cluster's
// processors share, each on a JetStream KV bucket (Journal, Approvals,
// Admissions, Schedules for timers), and what those buckets have in common (Handle,
// CAS).
//
// What the KV buckets processors share on a cluster
// (SPEC §6: the journal, approvals, admission records, nonces) have in
// common: a bucket whose every read is served by its stream's leader (a
// follower's direct get can be stale right after a write), requests
// retried while JetStream does not answer, and a compare-and-set whose
// unclear failures are settled by reading back.
//
// A JetStream request that got no answer — no leader yet, an election, a
// server going away — is told from one that was refused, and only the
// first kind is retried, within a budget. A request to a replicated stream
// that is electing a leader gets no reply at all until its context ends,
// so each try gets its own short context.
package jetstream

import (
	"context"
	"time"

	"github.com/portcullis/portcullis/kv/natserr"
)

// Defaults of Budget and Timeouts.
const (
	DefaultOp      = 5 * time.Second
	DefaultAttempt = time.Second
	DefaultSettle  = 15 * time.Second
)

// Timeouts bound a replicated store's work on its bucket (the journal's,
// the approvals'); zero fields take the defaults.
type Timeouts struct {
	// OpTimeout bounds one operation, retries included. Default 5s.
	OpTimeout time.Duration
	// AttemptTimeout bounds one try of it: a request to a stream without
	// a leader (during an election) gets no answer at all, so tries are
	// short and repeated. Default 1s.
	AttemptTimeout time.Duration
	// SettleTimeout bounds how long a compare-and-set tries to learn
	// whether a write that failed without an answer was stored (Swap).
	// Default 15s.
	SettleTimeout time.Duration
}

// Budget is the retry budget of one operation.
func (t Timeouts) Budget() Budget {
	return Budget{Op: t.OpTimeout, Attempt: t.AttemptTimeout}.WithDefaults()
}

// Settle is SettleTimeout, or its default.
func (t Timeouts) Settle() time.Duration {
	if t.SettleTimeout <= 0 {
		return DefaultSettle
	}
	return t.SettleTimeout
}

// pause is the wait between tries.
const pause = 50 * time.Millisecond

// Budget bounds an operation retried by Do.
type Budget struct {
	// Op bounds the operation, retries included. Default DefaultOp.
	Op time.Duration
	// Attempt bounds one try. Default DefaultAttempt.
	Attempt time.Duration
}

// WithDefaults returns b with its zero fields set to the defaults.
func (b Budget) WithDefaults() Budget {
	if b.Op <= 0 {
		b.Op = DefaultOp
	}
	if b.Attempt <= 0 {
		b.Attempt = DefaultAttempt
	}
	return b
}

// Do runs an idempotent operation f, each try with an Attempt context,
// until it succeeds, fails for another reason than JetStream not
// answering, or Op has passed; it returns f's last error.
func (b Budget) Do(f func(ctx context.Context) error) error {
	b = b.WithDefaults()
	deadline := time.Now().Add(b.Op)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), b.Attempt)
		err := f(ctx)
		cancel()
		if err == nil || !Unanswered(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(pause)
	}
}

// NoPeers reports JetStream refusing to place a stream's replicas because
// too few servers are up (natserr.NoPeers).
func NoPeers(err error) bool { return natserr.NoPeers(err) }

// Unanswered reports an error that says JetStream did not answer (no
// leader, an election, a server going away), not that it refused
// (natserr.Unanswered: kv.ErrUnavailable).
func Unanswered(err error) bool { return natserr.Unanswered(err) }
