package stages

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/natserr"
	"github.com/portcullis/portcullis/schema"
)

// outcomes.go: how the runner publishes outcomes in order (SPEC §2.4
// Order). Several publishers write to one proposal's subject — the stages
// of one processor, the processors of a cluster, a repeat's replay — and
// any of them may be stale: it decided on a record that has moved on
// since (it paused, its publish went unanswered and is retried), or it
// replays what its own store recorded while another processor published
// later. So every outcome is published with JetStream's
// Nats-Expected-Last-Subject-Sequence: the sequence of the subject's last
// message, as far as the publisher knows, whose outcome the new one must
// restate or supersede (schema.Standing.Follows). A publish the stream
// refuses because the subject moved on is answered by reading the
// subject's last message from the stream's leader and deciding again:
// what is still true is published after it, what is stale is dropped.
//
// The stream makes that enough for live subscribers too: the processor
// publishes on an internal subject (subjects.OutcomeRecord), and the
// stream republishes what it stored on the public one (kv/jetstream's
// OutcomeStream). A refused or duplicate publish is never seen live. The
// stream is a kv.OutcomeHistory (Deps.History): the runner reads it and
// appends a refused outcome again through that interface, and publishes
// a handler's outcomes with its other hand-offs in one asynchronous batch.
//
// Reading costs a round trip, so the runner reads only when it must: it
// remembers, per subject, the sequence and standing of the last outcome
// it published or read (LastOutcomes), and expects an empty subject where
// it knows nothing — right for most proposals, which get one outcome. A
// repeat's replay reads first (it republishes the subject's latest truth
// when that is newer than what was recorded here).

// Known is what a publisher knows of a proposal's outcome subject: the
// sequence of its last message and where that outcome stands. Found false:
// the subject holds nothing (or nothing is known of it: the publisher
// expects it empty, and the stream says otherwise if it is not).
type Known struct {
	Found    bool
	Seq      uint64
	Standing schema.Standing
}

// PublishAfter decides the publish of outcome o on a subject whose last
// message is last: publish it expecting that message's sequence (0: an
// empty subject), or not at all — o neither restates nor supersedes what
// is there, so it is stale.
func PublishAfter(o schema.Standing, last Known) (publish bool, expect uint64) {
	if !last.Found {
		return true, 0
	}
	if !o.Follows(last.Standing) {
		return false, 0
	}
	return true, last.Seq
}

// ReplayLast reports whether a repeat's replay of the recorded outcome o
// republishes the subject's last outcome instead: unless o supersedes it,
// the subject's own is the latest truth (o restates it, or is stale).
func ReplayLast(o schema.Standing, last Known) bool {
	return last.Found && !o.Supersedes(last.Standing)
}

// LastOutcomes remembers, for the outcome subjects a processor published
// to or read lately, the last message it knows of. Its runners share one.
// It is bounded (the oldest half is forgotten at its size) and only ever
// advances: a read that comes back older than what is known is ignored.
type LastOutcomes struct {
	mu       sync.Mutex
	max      int
	cur, old map[schema.ProposalRef]Known
}

// DefaultLastOutcomes is NewLastOutcomes's size when given none.
const DefaultLastOutcomes = 1 << 14

// NewLastOutcomes remembers about n subjects (≤ 0: DefaultLastOutcomes).
func NewLastOutcomes(n int) *LastOutcomes {
	if n <= 0 {
		n = DefaultLastOutcomes
	}
	return &LastOutcomes{max: max(n/2, 1), cur: map[schema.ProposalRef]Known{}}
}

// Get returns what is known of ref's subject.
func (l *LastOutcomes) Get(ref schema.ProposalRef) Known {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k, ok := l.cur[ref]; ok {
		return k
	}
	return l.old[ref]
}

// Put records that ref's subject's last message is k, unless a later one
// is known.
func (l *LastOutcomes) Put(ref schema.ProposalRef, k Known) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, ok := l.cur[ref]
	if !ok {
		prev, ok = l.old[ref]
	}
	if ok && prev.Found && prev.Seq > k.Seq {
		return
	}
	if len(l.cur) >= l.max {
		l.old, l.cur = l.cur, make(map[schema.ProposalRef]Known, l.max)
	}
	l.cur[ref] = k
}

// Forget drops what is known of ref's subject.
func (l *LastOutcomes) Forget(ref schema.ProposalRef) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.cur, ref)
	delete(l.old, ref)
}

// movedOn reports an append refused because its subject's last sequence
// is not the one expected (kv.ErrMovedOn).
func movedOn(err error) bool { return errors.Is(natserr.Classify(err), kv.ErrMovedOn) }

// lastOutcome reads the last outcome on ref's subject: from the stream's
// leader (leader true: what a refused publish decides again on), or by a
// direct get, which any replica may serve (a hint: the publish that
// follows is checked by the leader). It returns what the subject holds;
// o is nil when it holds nothing.
func (r *Runner) lastOutcome(ctx context.Context, ref schema.ProposalRef, leader bool) (Known, *schema.Outcome, error) {
	if r.deps.History == nil {
		return Known{}, nil, errors.New("read the last outcome: the runner has no outcome history (Deps.History)")
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()
	last, found, err := r.deps.History.Last(ctx, ref, leader)
	if err != nil {
		return Known{}, nil, fmt.Errorf("read the last outcome: %w", err)
	}
	if !found {
		return Known{}, nil, nil
	}
	seq, data := last.Seq, last.Data
	var o schema.Outcome
	if err := schema.Decode(data, &o); err != nil {
		// Not an outcome of the proposal's (nothing but the processor
		// publishes there): anything of the proposal's follows it.
		return Known{Found: true, Seq: seq, Standing: schema.Standing{Unadmitted: true}}, nil, nil
	}
	o.Host = ref.Host
	return Known{Found: true, Seq: seq, Standing: o.Standing()}, &o, nil
}

// outcomeMsg is one outcome to publish on its record subject, expecting
// the subject's last message at expect.
type outcomeMsg struct {
	o      schema.Outcome
	replay bool
	id     string // before the sealer's MsgID
	expect uint64
}

// msg is m as a NATS message.
func (r *Runner) outcomeNATSMsg(m *outcomeMsg) (*nats.Msg, error) {
	data, err := schema.Marshal(m.o)
	if err != nil {
		return nil, fmt.Errorf("encode outcome: %w", err)
	}
	msg := nats.NewMsg(r.deps.Subjects.OutcomeRecord(m.o.Host, m.o.ProposalID))
	msg.Data = data
	msg.Header.Set(jetstream.MsgIDHeader, r.deps.Seal.MsgID(m.id))
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(m.expect, 10))
	return msg, nil
}

// OutcomeMsgID is the message id (before the sealer's MsgID) of the i-th
// outcome o an input published, its outputs' ids starting with base: the
// input and what the outcome says (schema.Standing, but for at_ms). A
// redelivered input that decides the same again republishes a duplicate
// the stream drops; one that decides something else — the record moved
// on meanwhile — publishes it under an id of its own, where an id of the
// input alone made the stream drop the new answer as a duplicate of the
// old for the duplicate window (found by internal/sim: a proposal ended
// at the re-check after its RECONCILIATION_REQUIRED never heard its end).
func OutcomeMsgID(base string, i int, o *schema.Outcome) string {
	s := o.Standing()
	id := base + "/o" + strconv.Itoa(i) + "/" + string(s.Kind) + "/" + strconv.FormatBool(s.Terminal)
	if s.ReceiptID != "" {
		return id + "/" + s.ReceiptID
	}
	if !s.Terminal {
		id += "/" + strconv.FormatInt(s.AtMs, 10)
	}
	return id + "/" + s.Codes
}

// replayID is the message id of a repeat's replay of o: one per proposal,
// outcome and ReplayEvery window, so that repeats inside a window are
// duplicates the stream drops (and never sends live).
func (r *Runner) replayID(o *schema.Outcome) string {
	bucket := NowMs(r.deps.Clock) / r.cfg.ReplayEvery.Milliseconds()
	return "replay/" + o.Host + "/" + o.ProposalID + "/" + string(o.Kind) + "/" + strconv.FormatInt(o.AtMs, 10) + "/" + strconv.FormatInt(bucket, 10)
}

// planOutcomes decides how each outcome of res goes out: an outcome is
// published expecting the last message known on its subject, or dropped
// when what is known there supersedes it; a replay reads the subject
// first and republishes its last outcome when that is newer.
func (r *Runner) planOutcomes(ctx context.Context, base string, res Result) ([]*outcomeMsg, error) {
	var out []*outcomeMsg
	for i, o := range res.Outcomes {
		m := &outcomeMsg{o: o, id: OutcomeMsgID(base, i, &o)}
		if !r.expect(m, r.last.Get(o.To())) {
			continue
		}
		out = append(out, m)
	}
	for _, o := range res.Replayed {
		last, lo, err := r.lastOutcome(ctx, o.To(), false)
		if err != nil {
			return nil, err
		}
		r.last.Put(o.To(), last)
		m := &outcomeMsg{o: o, replay: true}
		r.replayOn(m, last, lo)
		out = append(out, m)
	}
	return out, nil
}

// expect sets m's expected sequence after last, or reports that m is
// stale there.
func (r *Runner) expect(m *outcomeMsg, last Known) bool {
	publish, expect := PublishAfter(m.o.Standing(), last)
	if !publish {
		r.log.Debug("outcome superseded on its subject; not published", "host", m.o.Host, "proposal_id", m.o.ProposalID,
			"kind", m.o.Kind, "last_seq", last.Seq, "last_kind", last.Standing.Kind)
		return false
	}
	m.expect = expect
	return true
}

// replayOn makes m, a repeat's replay, republish what is latest on a
// subject whose last message is last (its outcome lo): the recorded
// outcome, or the subject's own when that is newer.
func (r *Runner) replayOn(m *outcomeMsg, last Known, lo *schema.Outcome) {
	if ReplayLast(m.o.Standing(), last) && lo != nil {
		m.o = *lo
	}
	m.id, m.expect = r.replayID(&m.o), last.Seq
}

// settle publishes an outcome the stream refused because its subject
// moved on: it reads the subject's last message from the leader and
// decides again, until the outcome is stored, found stale, or JetStream
// does not answer (an error: the runner retries the whole input's
// publish, under the same message ids). It reports whether the outcome
// was stored (not a duplicate).
func (r *Runner) settle(ctx context.Context, m *outcomeMsg) (stored bool, err error) {
	ref := m.o.To()
	for try := 1; ; try++ {
		last, lo, err := r.lastOutcome(ctx, ref, true)
		if err != nil {
			return false, err
		}
		r.last.Put(ref, last)
		if m.replay {
			r.replayOn(m, last, lo)
		} else if !r.expect(m, last) {
			return false, nil
		}
		if r.deps.History == nil {
			return false, errors.New("append a refused outcome: the runner has no outcome history (Deps.History)")
		}
		data, err := schema.Marshal(m.o)
		if err != nil {
			return false, fmt.Errorf("encode outcome: %w", err)
		}
		pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
		seq, duplicate, err := r.deps.History.Append(pctx, ref, data, r.deps.Seal.MsgID(m.id), m.expect)
		cancel()
		switch {
		case err == nil:
			if !duplicate {
				r.last.Put(ref, Known{Found: true, Seq: seq, Standing: m.o.Standing()})
			}
			return !duplicate, nil
		case !movedOn(err) || try >= maxSettleTries:
			return false, err
		}
		// Moved on again (or, replicated, another publish to the subject
		// is in flight): read again after a moment.
		t := time.NewTimer(Backoff(5*time.Millisecond, 250*time.Millisecond, try))
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-t.C:
		}
	}
}

// maxSettleTries bounds the reads and publishes of one refused outcome
// before the runner holds the input and tries again later.
const maxSettleTries = 16
