// Package stages holds the shared stage runner and what every stage uses:
// the Handler contract, results, the clock and the durable timer scheduler,
// and the settings the stages take from the configuration (Trust, Grants).
// Each stage lives in its own package below: a pure decision function with
// table tests, and a thin Handler that gathers state, decides and returns a
// Result for the runner to publish. A stage imports no other stage and no
// storage backend (only the kv interfaces), and its exported declarations
// name only public types (internal/rules).
package stages

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/schema"
)

// Input is one message a stage received.
type Input struct {
	Subject string
	Data    []byte
	Header  nats.Header
	// Stream and StreamSeq identify the message; output message ids derive
	// from them.
	Stream    string
	StreamSeq uint64
	// Delivered counts deliveries of this message, 1 on the first.
	Delivered uint64
}

// Message is a message a stage publishes to a JetStream subject.
type Message struct {
	Subject string
	Data    []byte
	// MsgID is the Nats-Msg-Id; empty: derived from the input's identity.
	MsgID  string
	Header nats.Header
}

// Result is what a stage decided for one input. The runner records the
// outcomes, publishes everything, waits for every PubAck, runs Done, then
// acks the input.
type Result struct {
	// Next are hand-offs to later stages.
	Next []Message
	// Outcomes go to `<prefix>.outcomes.<proposal_id>`; each is recorded as
	// its proposal's last outcome, and its incidents are also published as
	// events.
	Outcomes []schema.Outcome
	// Replayed are recorded outcomes published again as new messages (a
	// repeated delivery): not re-recorded, and their incidents are not
	// announced again. The same outcome is republished at most once per
	// RunnerConfig.ReplayEvery.
	Replayed []schema.Outcome
	// Unrecorded outcomes are not recorded as their proposals' last
	// outcome: refusals of input that took no ids (a malformed proposal),
	// so that junk leaves nothing in the store.
	Unrecorded bool
	// Events are incidents published only as events (GRANT_UNMATCHED).
	Events []schema.Incident
	// Done runs after every publish was acknowledged and before the input
	// is acked; an error redelivers the input.
	Done func(ctx context.Context) error
	// RetryAfter > 0 asks to see the input again after this wait instead of
	// acking it (a provider nobody answered, inside its retry window): the
	// runner publishes what the result holds, runs Done, then redelivers
	// with this delay. Such redeliveries do not count toward MaxAttempts,
	// at most MaxRequestedRetries of them per input (counted in memory: after
	// a restart they count again, so GiveUp may come earlier).
	RetryAfter time.Duration
}

// MaxRequestedRetries bounds the RetryAfter redeliveries of one input.
const MaxRequestedRetries = 48

// Handler is one stage's logic.
type Handler interface {
	// Handle decides one input. An error for which Transient holds (an
	// outage, a race) is retried for as long as it lasts, the input kept;
	// any other error redelivers the input with backoff until the runner's
	// MaxAttempts, then GiveUp is asked instead. Wrap ErrPermanent to give
	// up at once. Handle must be idempotent: JetStream may deliver an input
	// again after it was handled, and the runner calls it again after a
	// transient error.
	Handle(ctx context.Context, in *Input) (Result, error)
	// GiveUp ends an input that could not be processed, with a closed-code
	// outcome where the proposal is known — but never one that a hand-off
	// this input may have made could contradict: a stage's give-up claims
	// the proposal's end where the stages after it look (see each stage's
	// GiveUp), or answers with what was decided. Errors are retried like
	// Handle's.
	GiveUp(ctx context.Context, in *Input, cause error) (Result, error)
}

// Sealer seals the messages the processor publishes on internal subjects
// and their message ids, and checks a seal (internal/seal.Sealer is one):
// without its key nobody can publish what a stage acts on, nor take a
// message id first.
type Sealer interface {
	// Seal sets the seal header of a message for its subject and body.
	Seal(subject string, body []byte, hdr nats.Header)
	// MsgID turns a predictable message id into the unguessable one the
	// processor publishes under.
	MsgID(id string) string
	// Check reports whether a message carries a valid seal.
	Check(subject string, body []byte, hdr nats.Header) bool
}
