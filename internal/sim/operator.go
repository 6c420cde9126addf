package sim

import (
	"errors"
	"math/rand/v2"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/reconciliation"
)

// operator is the simulated operator: at times drawn from the seed it
// reads the shared journal as `processor reconcile list` does (no lock)
// and, finding the intent's latest receipt reconciliation_required, looks
// at the provider and, after a delay of its own, sends `processor
// reconcile resolve` to a processor, which runs Stage.Resolve's shell
// (resolve.go) around the real reconciliation.Settle, naming the receipt
// it examined and when it looked (SettleFacts.Examined, ObservedAtMs;
// Config.UnboundOperator: neither, as the command today — findings 4 and
// 5, doc.go).
//
// It is truthful but possibly stale: it reports present or absent as the
// provider stood when it looked, and commits seconds or minutes later,
// while polls, redispatches, crashes and pauses go on. A command that
// gets no answer (its processor crashed) is sent again, as an operator
// would; a refusal ends it (ErrNotIndeterminate: settled meanwhile) or
// sends it back to looking (ErrNotFound: the intent went back to
// dispatch; ErrSuperseded: another receipt to examine; ErrTooEarly: the
// request may still arrive).
//
// It draws from a random stream of its own, so that a run without it
// (Config.NoOperator) is the run its seed made before the operator was
// modelled (TestFindings replays findings 1 and 3 so).
type operator struct {
	rng   *rand.Rand
	looks int // left
	// the finding being sent: how often, and which sending awaits its
	// answer (0: none)
	present  bool
	lookedAt int64
	looked   kv.Intent // the record as the operator read it
	sent     int
	awaiting int
	done     bool
}

// settlement is an operator's settlement as committed to the journal.
type settlement struct {
	at        int64 // true time of the commit
	lookedAt  int64
	receiptID string
	kind      schema.Kind
	absentAt  int64 // AbsentAfter of the record the operator examined
	examined  bool  // the receipt settled is the one the operator examined
}

const (
	operatorLooks   = 12
	operatorResends = 5
)

func (w *World) newOperator() {
	o := &operator{rng: rand.New(rand.NewPCG(w.cfg.Seed, 0x0be4a70e)), looks: operatorLooks}
	if w.cfg.NoOperator || o.rng.IntN(3) == 0 {
		return
	}
	w.op = o
	w.at(start+o.rng.Int64N(90_000), w.operatorLook)
}

// operatorLook reads the journal; an indeterminate intent is looked up at
// the provider and its settlement sent after a delay.
func (w *World) operatorLook() {
	o := w.op
	if o.done || o.looks == 0 {
		return
	}
	o.looks--
	rec, found := w.j.record(fp)
	if !found || !kv.IndeterminateReceipt(rec.Receipt) {
		w.at(w.now+2000+o.rng.Int64N(28_000), w.operatorLook)
		return
	}
	o.present, o.lookedAt, o.looked, o.sent = w.prov.acts[fp[7:]] > 0, w.now, rec, 0
	delay := []int64{2000, 20_000, 120_000}[o.rng.IntN(3)]
	w.tracef("operator looks: %s indeterminate, the provider shows it %s; resolves in ≤%dms",
		rec.Receipt.ReceiptID[:12], map[bool]string{true: "present", false: "absent"}[o.present], delay)
	w.at(w.now+o.rng.Int64N(delay), w.operatorSend)
}

// operatorSend sends the resolve command to a processor, chosen by the
// operator's seed among those alive (none: later).
func (w *World) operatorSend() {
	o := w.op
	var alive []*proc
	for _, p := range w.procs {
		if p.alive {
			alive = append(alive, p)
		}
	}
	switch {
	case o.sent > operatorResends:
		w.tracef("operator: no answer; gives up")
		return
	case len(alive) == 0:
		w.at(w.now+1000+o.rng.Int64N(10_000), w.operatorSend)
		return
	}
	p := alive[o.rng.IntN(len(alive))]
	w.tracef("operator sends resolve %v to p%d", o.present, p.id)
	o.sent++
	n := o.sent
	o.awaiting = n
	// No answer within the request's timeout (its processor crashed or
	// stalled): send it again, the same finding.
	w.at(w.now+30_000+o.rng.Int64N(30_000), func() {
		if !o.done && o.awaiting == n {
			o.awaiting = 0
			w.tracef("operator: no answer; sends again")
			w.operatorSend()
		}
	})
	t := &task{w: w, p: p, epoch: p.epoch}
	t.next("resolve start", func() { t.lock(t.resolveLoad) })
}

// operatorAnswer is the command's answer, as the operator reads it.
func (w *World) operatorAnswer(err error) {
	o := w.op
	o.awaiting = 0
	switch {
	case err == nil:
		o.done = true
		w.tracef("operator: resolved")
	case errors.Is(err, reconciliation.ErrNotFound), errors.Is(err, reconciliation.ErrSuperseded), errors.Is(err, reconciliation.ErrTooEarly):
		w.tracef("operator: refused (%v); looks again later", err)
		w.at(w.now+2000+o.rng.Int64N(28_000), w.operatorLook)
	default:
		o.done = true
		w.tracef("operator: refused (%v)", err)
	}
}
