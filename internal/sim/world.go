package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/dispatch"
	"github.com/portcullis/portcullis/stages/policy"
	"github.com/portcullis/portcullis/stages/reconciliation"
)

// Bug is a planted bug (Config.Bug).
type Bug int

// Planted bugs.
const (
	NoBug Bug = iota
	// BugNoCAS: the journal writes what a processor loaded without
	// comparing (read-then-write instead of compare-and-set).
	BugNoCAS
	// BugResendOwn: a processor that restarts and finds its own in-flight
	// record without a receipt takes it for a request never sent and sends
	// it again (instead of DISPATCH_INTERRUPTED).
	BugResendOwn
	// BugLateAccepted: the provider's connector acts on requests past
	// their not_after_ms (the fence's far side missing).
	BugLateAccepted
	// BugSettleStale: the operator's settlement is decided from the record
	// as the operator read it when it looked, not from the one loaded
	// under the lock (a read-then-write across the operator's delay).
	BugSettleStale
	// BugSettleNoAnnounce: the settlement is committed without its
	// announce timer.
	BugSettleNoAnnounce
	// BugHoldOnce: dispatch keeps the envelope only with the receipt
	// that makes the effect unknown, not again on a redelivery (the code
	// before the fix of the CI soak's soak-0002: a crash between the
	// receipt's commit and keeping the envelope left reconciliation
	// nothing to send again).
	BugHoldOnce
	// BugRedispatchEndsOne: dispatch does not recognize reconciliation's
	// redispatch, so a held envelope denied at the re-check (its grant
	// expired since) ends only its own proposal, as before the fix, and
	// leaves the intent lost with its other proposals waiting.
	BugRedispatchEndsOne
	// BugUnorderedPublish: outcomes are published as before issue 33 —
	// without the expected last subject sequence, a repeat replaying what
	// the processor recorded, the record overwritten by whatever came
	// last — so a stale outcome can land after a newer one.
	BugUnorderedPublish
	// BugInputOutcomeID: an outcome's message id names the input alone
	// (as before finding 10), so a redelivered input's new answer is
	// dropped as a duplicate of its first.
	BugInputOutcomeID
)

func (b Bug) String() string {
	return [...]string{"none", "read-then-write journal", "resend after its own interruption", "connector ignores not_after_ms",
		"settles the record the operator saw", "settlement without its announcement", "keeps the envelope only with its receipt",
		"a denied redispatch ends only its proposal", "outcomes published out of order", "an outcome's message id names its input alone"}[b]
}

// Config is one run.
type Config struct {
	Seed  uint64
	Bug   Bug
	Trace bool
	// NoOperator: no operator in the run (seeds found before the operator
	// was modelled replay as they ran then).
	NoOperator bool
	// UnboundOperator: the operator's command names the fingerprint only,
	// not the receipt it examined (finding 4, doc.go).
	UnboundOperator bool
}

// Settings of every run (the configuration the processors share).
const (
	start         = int64(1_764_424_800_000) // the simulated epoch, ms
	horizon       = 2 * time.Hour            // a run ends when nothing is left to do, or here
	provTimeout   = 2 * time.Second          // provider.timeout
	unavailRetry  = 30 * time.Second         // provider.unavailable_retry
	interval      = time.Second              // reconciliation.interval
	maxAttempts   = 6                        // reconciliation.max_attempts
	clockSkew     = 2 * time.Second          // approval.clock_skew
	ackWait       = 10 * time.Second         // the runner's AckWait
	runnerRetries = 5                        // the runner's MaxAttempts (failures before GiveUp)
	maxConflicts  = 8                        // the shells' bound on reloads per input
)

var fp = "sha256:" + strings.Repeat("5e", 32)

// profile is a run's fault rates, drawn from its seed.
type profile struct {
	crash, pause, loseReply, delay float64
	procs                          int
	proposals                      int
	outageFrom, outageTo           int64 // true ms; equal: none
}

type event struct {
	at  int64
	seq uint64
	fn  func()
}

type events []*event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	return e[i].at < e[j].at || e[i].at == e[j].at && e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(*event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// World is one simulated run.
type World struct {
	cfg Config
	rng *rand.Rand
	// afterCommit decides whether a processor crashes between a dispatch
	// commit and publishing what it decided: a stream of its own, so that
	// the main one (and every seed recorded before it existed) runs the
	// same until such a crash happens.
	afterCommit *rand.Rand
	// grants decides the grants' lifetimes, a stream of its own for the
	// same reason: in a quarter of the runs they expire within two
	// minutes, so that a redispatch can meet an expired grant.
	grants *rand.Rand
	now    int64 // true time, ms
	seq    uint64
	queue  events
	prof   profile

	j     *sharedJournal
	procs []*proc
	prov  *provider
	msgs  []*message
	// msgIDs are the message ids the streams have seen (JetStream's
	// duplicate window, modelled as unbounded).
	msgIDs map[string]bool
	held   map[string][]byte // the held stream: last envelope per intent
	envs   map[schema.ProposalRef]*schema.Envelope

	op          *operator // nil: no operator in this run
	settlements []settlement
	// sends and redispatches are the true times processors sent dispatch
	// requests and handed held envelopes back to dispatch.
	sends        []send
	redispatches []int64

	// outcomes are what each proposal's subject stored, in order (what
	// a host sees, live or by reading the stream).
	outcomes   map[schema.ProposalRef][]schema.Outcome
	stream     *outcomeStream
	of         *outcomeFaults
	serial     uint64 // messages published on the work queues
	proposals  []schema.ProposalRef
	violations []string
	trace      []string
	steps      int
}

// send is a dispatch request a processor sent: when (true time) and its
// not_after_ms.
type send struct{ at, notAfter int64 }

type proc struct {
	id          int
	self        string
	skew        int64
	store       *journalHandle
	alive       bool
	epoch       int // bumped by a crash: the events of the lost run are dropped
	pausedUntil int64
	busy        bool
	// last is what the processor's runners know of the outcome subjects
	// (memory: lost with a crash); log its outcome log (its store: kept).
	last          *stages.LastOutcomes
	log           map[schema.ProposalRef]schema.Outcome
	linkDownUntil int64
}

func (w *World) procNow(p *proc) int64 { return w.now + p.skew }

// New makes the world of cfg.Seed.
func New(cfg Config) *World {
	w := &World{
		cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed_f3ce)), afterCommit: rand.New(rand.NewPCG(cfg.Seed, 0xaf7e_c0de)),
		grants: rand.New(rand.NewPCG(cfg.Seed, 0x6a47_5e11)), now: start,
		j: newSharedJournal(), msgIDs: map[string]bool{}, held: map[string][]byte{},
		envs: map[schema.ProposalRef]*schema.Envelope{}, outcomes: map[schema.ProposalRef][]schema.Outcome{},
	}
	w.j.noCAS = cfg.Bug == BugNoCAS
	rates := []float64{0, 0.01, 0.04}
	w.prof = profile{
		crash: rates[w.rng.IntN(3)], pause: rates[w.rng.IntN(3)],
		loseReply: []float64{0, 0.15, 0.4}[w.rng.IntN(3)], delay: []float64{0, 0.05, 0.2}[w.rng.IntN(3)],
		procs: 2 + w.rng.IntN(2), proposals: 1 + w.rng.IntN(3),
	}
	if w.rng.IntN(4) == 0 {
		w.prof.outageFrom = start + w.rng.Int64N(10_000)
		w.prof.outageTo = w.prof.outageFrom + w.rng.Int64N(45_000)
	}
	skew := func() int64 { return w.rng.Int64N(clockSkew.Milliseconds()+1) - clockSkew.Milliseconds()/2 }
	w.prov = &provider{w: w, skew: skew(), acts: map[string]int{}, attempts: map[string]int{}}
	for i := range w.prof.procs {
		w.procs = append(w.procs, &proc{id: i, self: fmt.Sprintf("p_sim%d", i), skew: skew(), store: w.j.handle(), alive: true,
			last: stages.NewLastOutcomes(0), log: map[schema.ProposalRef]schema.Outcome{}})
	}
	w.tracef("profile %+v provider skew %dms", w.prof, w.prov.skew)
	w.newOperator()
	shortGrants := w.grants.IntN(4) == 0
	for i := range w.prof.proposals {
		env := envelope(fmt.Sprintf("p-%d", i+1))
		if shortGrants {
			env.Authorization.Grant.ExpiresAtMs = start + 5_000 + w.grants.Int64N(115_000)
		}
		ref := env.Ref()
		w.envs[ref] = env
		w.proposals = append(w.proposals, ref)
		w.at(start+w.rng.Int64N(3000), func() {
			w.publish(&message{stage: stageDispatch, env: env, msgID: "proposal/" + ref.ProposalID, dedup: true})
		})
	}
	w.newOutcomeFaults()
	return w
}

// envelope is an authorized proposal of the simulated intent.
func envelope(id string) *schema.Envelope {
	return &schema.Envelope{
		Schema: schema.SchemaEnvelope, Host: "sim",
		Proposal: schema.Proposal{ProposalID: id, Intent: schema.Intent{
			Provider: "demo", Capability: "inventory.adjust", Operation: "adjust_stock", Environment: schema.EnvTest,
		}},
		Grounded: &schema.Grounded{Referent: "sku-1", Fingerprint: fp, IdempotencyKey: fp[7:]},
		Authorization: &schema.AuthorizationRecord{Grant: schema.Grant{
			Schema: schema.SchemaGrant, IntentFingerprint: fp, AuthorizedBy: "actor:sim",
			AuthorizationMethod: schema.MethodManual, AuthenticationAssurance: schema.AssuranceBiometric,
			IssuedAtMs: start - 1000, ExpiresAtMs: start + horizon.Milliseconds(),
		}},
	}
}

var provConfig = dispatch.Provider{Name: "demo", Timeout: provTimeout, UnavailableRetry: unavailRetry}

func dispatchRules() dispatch.Rules {
	return dispatch.Rules{
		Policy:            policy.Rules{ClockSkew: clockSkew, MaxGrantLifetime: 24 * time.Hour},
		ReconcileInterval: interval,
		PollSubject:       pollSubject,
	}
}

func reconcileRules() reconciliation.Rules {
	return reconciliation.Rules{Interval: interval, MaxAttempts: maxAttempts, ClockSkew: clockSkew, PollSubject: pollSubject}
}

func pollSubject(hex string) string { return "sim.stage.reconciliation.timer." + hex }

func (w *World) tracef(format string, args ...any) {
	if w.cfg.Trace {
		w.trace = append(w.trace, fmt.Sprintf("%8dms ", w.now-start)+fmt.Sprintf(format, args...))
	}
}

func (w *World) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.tracef("VIOLATION %s", msg)
	w.violations = append(w.violations, msg)
}

// at runs fn at true time t (never in the past).
func (w *World) at(t int64, fn func()) {
	w.seq++
	heap.Push(&w.queue, &event{at: max(t, w.now), seq: w.seq, fn: fn})
}

// Run runs the world until nothing is left to do or the horizon, and
// checks the invariants. It returns the violations.
func (w *World) Run() []string {
	end := start + horizon.Milliseconds()
	for w.queue.Len() > 0 {
		e := heap.Pop(&w.queue).(*event)
		if e.at > end {
			w.tracef("horizon reached")
			break
		}
		w.now = e.at
		e.fn()
		w.steps++
	}
	w.check()
	return w.violations
}

// Trace is the run's step trace (Config.Trace).
func (w *World) Trace() []string { return w.trace }

// ---- the work queues (JetStream consumers with ack waits) ----

type stageKind int

const (
	stageDispatch stageKind = iota
	stageReconcile
)

type message struct {
	stage   stageKind
	env     *schema.Envelope // dispatch
	trigger kv.Trigger       // reconciliation
	msgID   string
	serial  uint64 // its stream sequence: the runner's outputs' ids derive from it
	// dedup: the stream drops a message whose id it saw. Timer messages
	// have none: jetstream.Schedules publishes schedules without
	// Nats-Msg-Id, so a poll armed twice may fire twice.
	dedup bool

	availableAt int64
	owner       *proc // the processor holding the current delivery
	gen         int   // delivery number
	done        bool
	failures    int // handler errors (runner MaxAttempts)
	requested   int // RetryAfter redeliveries (stages.MaxRequestedRetries)
}

// publish stores a message unless its id was seen (a duplicate).
func (w *World) publish(m *message) {
	if m.dedup && w.msgIDs[m.msgID] {
		w.tracef("publish %s: duplicate", m.msgID)
		return
	}
	w.msgIDs[m.msgID] = true
	w.serial++
	m.serial = w.serial
	m.availableAt = w.now
	w.msgs = append(w.msgs, m)
	w.tracef("publish %s", m.msgID)
	w.at(w.now, w.deliver)
}

// deliver hands available messages to idle processors, chosen by the seed.
func (w *World) deliver() {
	for {
		var ready []*message
		for _, m := range w.msgs {
			if !m.done && m.owner == nil && m.availableAt <= w.now {
				ready = append(ready, m)
			}
		}
		var idle []*proc
		for _, p := range w.procs {
			if p.alive && !p.busy && p.pausedUntil <= w.now {
				idle = append(idle, p)
			}
		}
		if len(ready) == 0 || len(idle) == 0 {
			return
		}
		m, p := ready[w.rng.IntN(len(ready))], idle[w.rng.IntN(len(idle))]
		m.owner, m.gen = p, m.gen+1
		p.busy = true
		w.tracef("deliver %s to p%d (delivery %d)", m.msgID, p.id, m.gen)
		t := &task{w: w, p: p, m: m, gen: m.gen, epoch: p.epoch}
		giveUp := m.failures >= runnerRetries || m.requested >= 48
		if m.stage == stageDispatch {
			t.startDispatch(giveUp)
		} else {
			t.startReconcile(!giveUp)
		}
	}
}

// redeliverAt makes m available again at t, if delivery gen still holds it.
func (w *World) redeliverAt(m *message, gen int, t int64) {
	w.at(t, func() {
		if m.done || m.gen != gen || m.owner == nil {
			return
		}
		w.tracef("ack wait of %s (delivery %d) ran out at p%d", m.msgID, gen, m.owner.id)
		m.owner = nil
		m.availableAt = w.now
		w.deliver()
	})
}

// ---- processors: crashes and pauses ----

// fault may crash or pause p before its next action; it reports whether
// the action may run now.
func (w *World) fault(p *proc, where string) bool {
	switch r := w.rng.Float64(); {
	case r < w.prof.crash:
		w.crash(p, where)
		return false
	case r < w.prof.crash+w.prof.pause:
		lease := (provTimeout + dispatch.DefaultLeaseMargin).Milliseconds()
		d := lease/2 + w.rng.Int64N(3*lease)
		p.pausedUntil = w.now + d
		w.tracef("p%d pauses %dms at %s", p.id, d, where)
		// Paused, it sends no heartbeat: its input goes to another after the ack wait.
		for _, m := range w.msgs {
			if m.owner == p && !m.done {
				w.redeliverAt(m, m.gen, w.now+ackWait.Milliseconds()-w.rng.Int64N(ackWait.Milliseconds()/3))
			}
		}
		w.at(p.pausedUntil, func() { w.tracef("p%d resumes", p.id); w.deliver() })
	}
	return true
}

func (w *World) crash(p *proc, where string) {
	w.tracef("p%d crashes at %s", p.id, where)
	p.alive, p.busy = false, false
	p.epoch++
	p.pausedUntil = 0
	for _, m := range w.msgs {
		if m.owner == p && !m.done {
			w.redeliverAt(m, m.gen, w.now+ackWait.Milliseconds()-w.rng.Int64N(ackWait.Milliseconds()/3))
		}
	}
	w.at(w.now+100+w.rng.Int64N(20_000), func() {
		// A new run of the same instance (its id is kept on disk): nothing
		// of the old run's memory, locks or journal sessions.
		p.alive, p.store, p.last = true, w.j.handle(), stages.NewLastOutcomes(0)
		w.tracef("p%d restarts", p.id)
		w.deliver()
	})
}

// ---- the provider ----

// provider is the far side of the wire: it acts on every dispatch request
// that arrives in time (it does NOT deduplicate by idempotency key, so
// that a second send is seen), refuses late ones as a connector does
// (schema.LateReply), and answers reconcile truthfully.
type provider struct {
	w        *World
	skew     int64
	acts     map[string]int // idempotency key → actions
	actedAt  []int64        // true times, relative to the start
	attempts map[string]int // reconcile attempt id → times asked
}

func (pv *provider) down() bool {
	w := pv.w
	return w.now >= w.prof.outageFrom && w.now < w.prof.outageTo
}

// call sends a request from task t: handle runs at the provider on arrival
// and returns the reply; done gets the reply, or the adapter's error.
func (w *World) call(t *task, what string, handle func() schema.AdapterReply, done func(schema.AdapterReply, error)) {
	answered := false
	reply := func(r schema.AdapterReply, err error) {
		if answered {
			return
		}
		answered = true
		t.next("after "+what, func() { done(r, err) })
	}
	if w.prov.down() {
		// No responders: nobody received it.
		w.tracef("p%d %s: no responders", t.p.id, what)
		w.at(w.now+1+w.rng.Int64N(5), func() { reply(schema.AdapterReply{}, fmt.Errorf("sim: %w", adapters.ErrNotInvoked)) })
		return
	}
	lat := 1 + w.rng.Int64N(30)
	if w.rng.Float64() < w.prof.delay {
		lat += w.rng.Int64N(3 * (provTimeout + dispatch.DefaultLeaseMargin).Milliseconds())
	}
	w.at(w.now+lat, func() {
		r := handle()
		if w.rng.Float64() < w.prof.loseReply {
			w.tracef("%s: reply lost", what)
			return
		}
		w.at(w.now+1+w.rng.Int64N(30), func() { reply(r, nil) })
	})
	w.at(w.now+provTimeout.Milliseconds(), func() {
		reply(schema.AdapterReply{}, fmt.Errorf("sim: %w", adapters.ErrTimeout))
	})
}

func (pv *provider) dispatch(req schema.DispatchRequest) schema.AdapterReply {
	now := pv.w.now + pv.skew
	if schema.Late(req.NotAfterMs, now) && pv.w.cfg.Bug != BugLateAccepted {
		pv.w.tracef("provider refuses a late request (not_after %d, its clock %d)", req.NotAfterMs-start, now-start)
		return schema.LateReply()
	}
	pv.acts[req.IdempotencyKey]++
	pv.actedAt = append(pv.actedAt, pv.w.now-start)
	pv.w.tracef("provider ACTS on %s (time %d)", req.IdempotencyKey[:8], pv.acts[req.IdempotencyKey])
	return schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "act_" + req.IdempotencyKey[:8]}
}

func (pv *provider) reconcile(req schema.ReconcileRequest) schema.AdapterReply {
	pv.attempts[req.AttemptID]++
	if pv.acts[req.IdempotencyKey] > 0 {
		pv.w.tracef("provider reconcile %s: confirmed", req.AttemptID)
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "act_" + req.IdempotencyKey[:8]}
	}
	pv.w.tracef("provider reconcile %s: never received", req.AttemptID)
	return schema.AdapterReply{Outcome: schema.ReplyFailedBeforeDispatch}
}

var errTwice = errors.New("sim: a step asked to call twice")
