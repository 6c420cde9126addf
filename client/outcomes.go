package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/schema"
)

// A Condition selects the outcome Tracker.Await waits for.
type Condition func(schema.Outcome) bool

// Terminal accepts a terminal outcome (DENIED, NEEDS_CLARIFICATION,
// INTEGRATION_FAILURE, FAILED_BEFORE_DISPATCH, CONFIRMED, REJECTED, and
// RECONCILIATION_REQUIRED once reconciliation gave up).
func Terminal(o schema.Outcome) bool { return o.Terminal }

// Kinds accepts an outcome of one of the kinds (schema.KindNeedsApproval,
// …).
func Kinds(kinds ...schema.Kind) Condition {
	kinds = slices.Clone(kinds)
	return func(o schema.Outcome) bool { return slices.Contains(kinds, o.Kind) }
}

// PubAck says where JetStream stored a published message.
type PubAck struct {
	Stream   string
	Sequence uint64
	// Duplicate: the stream already held a message with this Nats-Msg-Id
	// (the same bytes published before, within 10 minutes); this one was
	// dropped and Sequence is the first one's.
	Duplicate bool
}

// trackerBuffer bounds the outcomes a Tracker holds unread. A proposal has
// few (approval, dispatch, a reconciliation result per attempt); if it
// overflows, NATS drops the newest and Await finds the last one in the
// outcome stream.
const trackerBuffer = 64

// Tracker follows the outcomes of one proposal: the live subscription to
// `<prefix>.outcomes.<h>.<proposal_id>`, and the outcome stream when that
// stays silent (outcomes published while the connection was down, before
// Track, or dropped). Await and Next may be called from several goroutines;
// each outcome is handed out once. Stop it when done.
type Tracker struct {
	host *Host
	id   string
	sub  *nats.Subscription
	ch   chan *nats.Msg
	ack  PubAck

	mu       sync.Mutex
	seen     map[string]bool
	nextPoll time.Time // zero: read the stream at once
	polls    int       // direct gets made, for tests
}

// ProposalID is the tracked proposal's id.
func (t *Tracker) ProposalID() string { return t.id }

// PubAck is where the proposal was stored (zero for a Tracker from Track).
func (t *Tracker) PubAck() PubAck { return t.ack }

// Next returns the next outcome this Tracker has not handed out yet.
func (t *Tracker) Next(ctx context.Context) (schema.Outcome, error) {
	return t.await(ctx, func(schema.Outcome) bool { return true }, false)
}

// Await returns the first outcome not handed out yet that cond accepts,
// skipping others. If a terminal outcome arrives that cond does not accept,
// Await returns it with ErrEnded. When ctx ends first, the error wraps
// ctx's error (and ErrTimeout for a deadline); when no outcome of the
// proposal ever arrived, also ErrNoOutcome, saying why that can be (a
// proposal refused for authentication gets none).
//
// Live outcomes arrive in order. When the subscription stays silent for the
// host's PollInterval, Await reads the last stored outcome by direct get and
// takes it if it has not been handed out; so after a gap it sees the latest
// outcome, not each one it missed: wait for Terminal (or a kind that cannot
// be skipped, such as NEEDS_APPROVAL of a proposal without a grant) rather
// than for an intermediate kind. After Stop, Await still works, from the
// outcome stream alone.
func (t *Tracker) Await(ctx context.Context, cond Condition) (schema.Outcome, error) {
	if cond == nil {
		cond = func(schema.Outcome) bool { return true }
	}
	return t.await(ctx, cond, true)
}

func (t *Tracker) await(ctx context.Context, cond Condition, endOnTerminal bool) (schema.Outcome, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	take := func(o schema.Outcome) (schema.Outcome, bool, error) {
		k := outcomeKey(&o)
		if t.seen[k] {
			return o, false, nil
		}
		t.seen[k] = true
		switch {
		case cond(o):
			return o, true, nil
		case endOnTerminal && o.Terminal:
			return o, true, fmt.Errorf("client: proposal %s ended %s: %w", t.id, o.Kind, ErrEnded)
		}
		return o, false, nil
	}
	live := func(m *nats.Msg) (schema.Outcome, bool, error) {
		t.nextPoll = time.Now().Add(t.host.pollInterval)
		o, err := decodeOutcome(m.Data, t.host.name, t.id)
		if err != nil {
			return o, false, nil // not an outcome of ours: ignore it
		}
		return take(o)
	}
	for {
		if err := ctx.Err(); err != nil {
			return schema.Outcome{}, t.gaveUp(ctx)
		}
		// What already arrived live comes first, in order.
		select {
		case m := <-t.ch:
			if o, done, err := live(m); done {
				return o, err
			}
			continue
		default:
		}
		timer := time.NewTimer(time.Until(t.nextPoll))
		select {
		case <-ctx.Done():
			timer.Stop()
			return schema.Outcome{}, t.gaveUp(ctx)
		case m := <-t.ch:
			timer.Stop()
			if o, done, err := live(m); done {
				return o, err
			}
		case <-timer.C:
			t.polls++
			o, err := t.host.Last(ctx, t.id)
			t.nextPoll = time.Now().Add(t.host.pollInterval)
			switch {
			case err == nil:
				if o, done, err := take(o); done {
					return o, err
				}
			case ctx.Err() != nil:
				return schema.Outcome{}, t.gaveUp(ctx)
			case errors.Is(err, ErrNoOutcome), errors.Is(err, ErrTimeout):
				// Nothing stored yet, or a slow server: keep waiting.
			default:
				return schema.Outcome{}, err
			}
		}
	}
}

// gaveUp is Await's error when ctx ended: ctx's error, and ErrTimeout for
// a deadline. When no outcome of the proposal was ever seen, live or
// stored, it wraps ErrNoOutcome as well and says why that can be: the
// processor publishes nothing for a message it refused for
// authentication (SPEC §2.7), so an unsigned host, or one whose key is
// not its block's, learns it only here.
func (t *Tracker) gaveUp(ctx context.Context) error {
	err := ctxError(ctx, "await outcome of "+t.id)
	if len(t.seen) > 0 || !errors.Is(err, ErrTimeout) {
		return err
	}
	why := fmt.Sprintf("signed by %s: is that the public_key of host %q's block?", t.host.pub, t.host.name)
	if t.host.key == nil {
		why = "unsigned: only a processor with admission.allow_unsigned (run --dev) admits unsigned proposals"
	}
	return fmt.Errorf("%w: %w: none of %s/%s arrived, live or stored. The processor publishes none for a proposal it refused for authentication (only the incident event ADMISSION_UNAUTHENTICATED; this one was sent %s), nor yet for one waiting in a backlog or for a stopped processor", err, ErrNoOutcome, t.host.name, t.id, why)
}

// outcomeKey tells outcomes apart: a republished outcome (a repeated
// delivery, or the same one read live and from the stream) has the same.
func outcomeKey(o *schema.Outcome) string {
	k := string(o.Kind) + "|" + strconv.FormatInt(o.AtMs, 10)
	if o.Receipt != nil {
		k += "|" + o.Receipt.ReceiptID
	}
	return k
}

// Stop ends the live subscription. It is safe to call more than once.
func (t *Tracker) Stop() error {
	err := t.sub.Unsubscribe()
	if errors.Is(err, nats.ErrBadSubscription) || errors.Is(err, nats.ErrConnectionClosed) {
		return nil
	}
	return err
}
