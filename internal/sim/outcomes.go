package sim

import (
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
)

// outcomes.go: the outcome subjects and how the runner publishes to them
// (stages/outcomes.go, SPEC §2.4 Order). The stream is modelled as
// ACTIONS_OUTCOMES behaves: a message id it has seen is a duplicate (the
// original's sequence answers), a publish whose
// Nats-Expected-Last-Subject-Sequence is not the subject's last is
// refused, anything else is stored — and only what is stored is seen,
// stored or live (the stream republishes it). A run checks the duplicate
// first or the expected sequence first (a replicated stream's leader and
// a single server differ).
//
// The runner's side mirrors Runner.publish: the outcomes are recorded in
// the processor's own log (Pebble's, kept across a crash), each is
// published expecting the last message the processor knows on its
// subject (stages.LastOutcomes, lost with a crash) or dropped as stale
// there (stages.PublishAfter), a refused one is decided again on the
// subject's last message read from the leader, and a publish that got no
// answer is held (stages.DefaultHold) and made again, under the same
// message ids, with everything decided afresh. A repeat's replay reads the
// subject (a direct get: any replica, possibly behind) and republishes
// its latest truth when that is newer than what the processor recorded
// (stages.ReplayLast).
//
// Faults, from random streams of their own (so that a run without them
// is the run its seed made before they were modelled): a processor's link
// to the stream failing for up to 20s (its publishes unanswered — the
// first perhaps stored all the same — and its input redelivered elsewhere
// once the ack wait passes without its progress acks), and repeats of a
// proposal answered by a processor, from its own log or the stream, a
// while after they were read.

// storedOutcome is one message on an outcome subject.
type storedOutcome struct {
	seq uint64
	o   schema.Outcome
}

// outcomeStream is ACTIONS_OUTCOMES.
type outcomeStream struct {
	seq         uint64
	subjects    map[schema.ProposalRef][]storedOutcome
	ids         map[string]uint64 // message ids seen (the duplicate window: unbounded)
	dedupeFirst bool
}

// outMsg is one outcome publish.
type outMsg struct {
	o      schema.Outcome
	id     string
	expect *uint64 // nil: no Nats-Expected-Last-Subject-Sequence (BugUnorderedPublish)
	replay bool
}

type pubResult int

const (
	pubStored pubResult = iota
	pubDuplicate
	pubRefused
)

// last is the subject's last message (Known, and its outcome).
func (s *outcomeStream) last(ref schema.ProposalRef, behind int) (stages.Known, *schema.Outcome) {
	msgs := s.subjects[ref]
	if n := len(msgs) - 1 - behind; n >= 0 {
		m := msgs[n]
		return stages.Known{Found: true, Seq: m.seq, Standing: m.o.Standing()}, &m.o
	}
	return stages.Known{}, nil
}

// process is the stream taking one publish.
func (s *outcomeStream) process(m *outMsg) (pubResult, uint64) {
	ref := m.o.To()
	dup := func() (uint64, bool) { seq, ok := s.ids[m.id]; return seq, ok }
	if s.dedupeFirst {
		if seq, ok := dup(); ok {
			return pubDuplicate, seq
		}
	}
	if m.expect != nil {
		last, _ := s.last(ref, 0)
		if last.Seq != *m.expect {
			return pubRefused, last.Seq
		}
	}
	if seq, ok := dup(); ok {
		return pubDuplicate, seq
	}
	s.seq++
	s.ids[m.id] = s.seq
	s.subjects[ref] = append(s.subjects[ref], storedOutcome{seq: s.seq, o: m.o})
	return pubStored, s.seq
}

// outcomeFaults are a run's outcome-publish faults and repeats.
type outcomeFaults struct {
	rng     *rand.Rand
	linkOff float64 // chance that a publish finds the processor's link to the stream failing
	behind  float64 // chance that a direct get is served by a replica one message behind
	repeats int
}

func (w *World) newOutcomeFaults() {
	f := &outcomeFaults{rng: rand.New(rand.NewPCG(w.cfg.Seed, 0x0c7c_0e5e))}
	f.linkOff = []float64{0, 0, 0.05, 0.2}[f.rng.IntN(4)]
	f.behind = []float64{0, 0.3}[f.rng.IntN(2)]
	w.stream = &outcomeStream{subjects: map[schema.ProposalRef][]storedOutcome{}, ids: map[string]uint64{}, dedupeFirst: f.rng.IntN(2) == 0}
	w.of = f
	if f.rng.IntN(2) == 0 {
		f.repeats = 1 + f.rng.IntN(6)
		for range f.repeats {
			ref := w.proposals[f.rng.IntN(len(w.proposals))]
			w.at(start+f.rng.Int64N(120_000), func() { w.repeat(ref) })
		}
	}
}

// linkDown reports whether p's publish now goes unanswered: within one of
// p's link failures, or starting one. A failure longer than the ack wait
// loses p's inputs too: its progress acks do not arrive, and the server
// gives each to another processor.
func (w *World) linkDown(p *proc) bool {
	f := w.of
	if w.now < p.linkDownUntil {
		return true
	}
	if f.linkOff == 0 || f.rng.Float64() >= f.linkOff {
		return false
	}
	d := 100 + f.rng.Int64N(20_000)
	p.linkDownUntil = w.now + d
	w.tracef("p%d: link to the outcome stream down for %dms", p.id, d)
	if d > ackWait.Milliseconds() {
		for _, m := range w.msgs {
			if m.owner == p && !m.done {
				w.redeliverAt(m, m.gen, w.now+ackWait.Milliseconds())
			}
		}
	}
	return true
}

// directGet is a direct get of ref's subject: possibly a replica behind.
func (w *World) directGet(ref schema.ProposalRef) (stages.Known, *schema.Outcome) {
	behind := 0
	if w.of.behind > 0 && w.of.rng.Float64() < w.of.behind {
		behind = 1
	}
	return w.stream.last(ref, behind)
}

// record is the runner's RecordOutcomes into p's own log: it keeps the
// latest (kv/pebble), or — BugUnorderedPublish — whatever came last.
func (w *World) record(p *proc, o schema.Outcome) {
	ref := o.To()
	if last, ok := p.log[ref]; ok && w.cfg.Bug != BugUnorderedPublish && !o.Standing().Follows(last.Standing()) {
		return
	}
	p.log[ref] = o
}

// publishOutcomes is Runner.publish for outcomes (and a repeat's
// replays): record, decide each publish, publish; then settle the ones
// refused; a publish without an answer holds the input and does it all
// again (try+1) after stages.DefaultHold; then runs then.
func (t *task) publishOutcomes(outcomes, replays []schema.Outcome, base string, try int, then func()) {
	w, p := t.w, t.p
	for _, o := range outcomes {
		w.record(p, o)
	}
	var msgs []*outMsg
	for i, o := range outcomes {
		m := &outMsg{o: o, id: stages.OutcomeMsgID(base, i, &o)}
		if w.cfg.Bug == BugInputOutcomeID {
			m.id = base + "/o" + strconv.Itoa(i)
		}
		if w.cfg.Bug != BugUnorderedPublish {
			last := p.last.Get(o.To())
			publish, expect := stages.PublishAfter(o.Standing(), last)
			if !publish {
				w.tracef("p%d outcome %s: %s terminal=%v stale (last known %s at %d): not published", p.id, o.ProposalID, o.Kind, o.Terminal, last.Standing.Kind, last.Seq)
				continue
			}
			m.expect = &expect
		}
		msgs = append(msgs, m)
	}
	for _, o := range replays {
		m := &outMsg{o: o, replay: true}
		if w.cfg.Bug == BugUnorderedPublish {
			m.id = w.replayID(&m.o)
		} else {
			last, lo := w.directGet(o.To())
			p.last.Put(o.To(), last)
			w.replayOn(m, last, lo)
		}
		msgs = append(msgs, m)
	}
	unanswered := false
	for _, m := range msgs {
		if !t.attempt(m) {
			unanswered = true
		}
	}
	if unanswered {
		d := stages.DefaultHold(try).Milliseconds()
		w.tracef("p%d: outcome publish unanswered; held, again in %dms", p.id, d)
		w.at(w.now+d, func() {
			t.next("publish again", func() { t.publishOutcomes(outcomes, replays, base, try+1, then) })
		})
		return
	}
	then()
}

// attempt publishes m (settling a refusal on the leader's answer); false
// when it got no answer.
func (t *task) attempt(m *outMsg) bool {
	w, p := t.w, t.p
	for {
		if w.linkDown(p) {
			if w.of.rng.IntN(2) == 0 {
				w.store(p, m) // it reached the stream; the answer did not come back
			}
			return false
		}
		res, seq := w.store(p, m)
		if res != pubRefused {
			if res == pubStored {
				p.last.Put(m.o.To(), stages.Known{Found: true, Seq: seq, Standing: m.o.Standing()})
			}
			return true
		}
		// Runner.settle: the leader's last message, and decide again.
		last, lo := w.stream.last(m.o.To(), 0)
		p.last.Put(m.o.To(), last)
		if m.replay {
			w.replayOn(m, last, lo)
			continue
		}
		publish, expect := stages.PublishAfter(m.o.Standing(), last)
		if !publish {
			w.tracef("p%d outcome %s: %s terminal=%v stale after %s at %d: dropped", p.id, m.o.ProposalID, m.o.Kind, m.o.Terminal, last.Standing.Kind, last.Seq)
			return true
		}
		m.expect = &expect
	}
}

// store is the stream taking m from p, traced.
func (w *World) store(p *proc, m *outMsg) (pubResult, uint64) {
	res, seq := w.stream.process(m)
	switch res {
	case pubStored:
		ref := m.o.To()
		w.outcomes[ref] = append(w.outcomes[ref], m.o)
		w.tracef("p%d outcome %s: %s terminal=%v %s(seq %d%s)", p.id, ref.ProposalID, m.o.Kind, m.o.Terminal, codes(m.o), seq, map[bool]string{true: ", replay"}[m.replay])
	case pubRefused:
		w.tracef("p%d outcome %s: %s refused, the subject's last is %d", p.id, m.o.ProposalID, m.o.Kind, seq)
	}
	return res, seq
}

// replayOn is Runner.replayOn: the recorded outcome, or the subject's own
// latest when that is newer.
func (w *World) replayOn(m *outMsg, last stages.Known, lo *schema.Outcome) {
	if stages.ReplayLast(m.o.Standing(), last) && lo != nil {
		m.o = *lo
	}
	m.id = w.replayID(&m.o)
	expect := last.Seq
	m.expect = &expect
}

// replayEvery is the runner's ReplayEvery.
const replayEvery = 10 * time.Minute

func (w *World) replayID(o *schema.Outcome) string {
	return "replay/" + o.ProposalID + "/" + string(o.Kind) + "/" + strconv.FormatInt(o.AtMs, 10) + "/" + strconv.FormatInt(w.now/replayEvery.Milliseconds(), 10)
}

// repeat is a repeat of proposal ref handled by a processor: admission
// reads the proposal's last outcome (kv/jetstream's Admissions: the
// stream's, by a direct get, else the processor's own log; a single node:
// its log), and the runner replays it a while later.
func (w *World) repeat(ref schema.ProposalRef) {
	f := w.of
	var alive []*proc
	for _, p := range w.procs {
		if p.alive {
			alive = append(alive, p)
		}
	}
	if len(alive) == 0 {
		w.at(w.now+1000+f.rng.Int64N(5000), func() { w.repeat(ref) })
		return
	}
	p := alive[f.rng.IntN(len(alive))]
	o, found := p.log[ref]
	if f.rng.IntN(2) == 0 {
		if _, lo := w.directGet(ref); lo != nil {
			o, found = *lo, true
		}
	}
	if !found {
		w.tracef("p%d: a repeat of %s: no outcome yet", p.id, ref.ProposalID)
		return
	}
	delay := f.rng.Int64N(50)
	if f.rng.IntN(4) == 0 {
		delay = f.rng.Int64N(30_000) // paused between the read and the publish
	}
	w.tracef("p%d: a repeat of %s: replays %s in %dms", p.id, ref.ProposalID, o.Kind, delay)
	t := &task{w: w, p: p, epoch: p.epoch}
	var run func()
	run = func() {
		switch {
		case !p.alive || p.epoch != t.epoch:
		case p.pausedUntil > w.now:
			w.at(p.pausedUntil, run)
		default:
			t.publishOutcomes(nil, []schema.Outcome{o}, "", 1, func() {})
		}
	}
	w.at(w.now+delay, run)
}
