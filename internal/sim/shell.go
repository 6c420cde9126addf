package sim

import (
	"errors"
	"strconv"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/dispatch"
	"github.com/portcullis/portcullis/stages/reconciliation"
)

// task is one delivery of one message at one processor: the simulated
// shell. Its actions mirror Stage.run of stages/dispatch and
// stages/reconciliation (the real shells block in their calls, so they
// cannot be interleaved without goroutines); between any two actions the
// processor may crash or pause, and other processors run.
type task struct {
	w      *World
	p      *proc
	m      *message
	gen    int
	epoch  int
	unlock func()

	df        dispatch.Facts
	rf        reconciliation.Facts
	sf        reconciliation.SettleFacts // an operator's command (m nil)
	conflicts int
}

// next runs fn as the task's next action, after a little processing time,
// unless the processor crashed meanwhile (or crashes now); a paused
// processor runs it when it resumes.
func (t *task) next(where string, fn func()) {
	w := t.w
	var run func()
	run = func() {
		if !t.p.alive || t.p.epoch != t.epoch {
			return // the run that started this task is gone
		}
		if t.p.pausedUntil > w.now {
			w.at(t.p.pausedUntil, run)
			return
		}
		if !w.fault(t.p, where) {
			return
		}
		if t.p.pausedUntil > w.now {
			w.at(t.p.pausedUntil, run) // paused right here: the action runs on resume
			return
		}
		fn()
	}
	w.at(w.now+1+w.rng.Int64N(20), run)
}

func (t *task) now() int64 { return t.w.procNow(t.p) }

// lock takes the fingerprint's lock of the processor's journal and runs
// then; while another holder of this processor has it (an operator's
// command beside a stage's task), it tries again a little later.
func (t *task) lock(then func()) {
	unlock, ok := t.p.store.TryLock(fp)
	if !ok {
		t.w.at(t.w.now+1+t.w.rng.Int64N(20), func() {
			if t.p.alive && t.p.epoch == t.epoch {
				t.lock(then)
			}
		})
		return
	}
	t.unlock = unlock
	then()
}

// fail ends the delivery with a handler error: the runner redelivers it
// with a backoff and, after runnerRetries failures, asks GiveUp.
func (t *task) fail(err error) {
	t.w.tracef("p%d %s: handler error: %v", t.p.id, t.m.msgID, err)
	t.release()
	if t.m.gen == t.gen && t.m.owner == t.p {
		t.m.failures++
		t.m.owner = nil
		t.m.availableAt = t.w.now + stages.Backoff(250e6, 5e9, t.m.failures).Milliseconds()
		t.w.at(t.m.availableAt, t.w.deliver)
	}
}

func (t *task) release() {
	if t.unlock != nil {
		t.unlock()
		t.unlock = nil
	}
	t.p.busy = false
	t.w.at(t.w.now, t.w.deliver)
}

// finish publishes the hand-offs and the outcomes (publishOutcomes: in
// their subjects' order, held while unanswered), then acks or asks for a
// redelivery after retry — separate actions, so that a crash can come
// between the publication and the ack.
func (t *task) finish(outcomes []schema.Outcome, publish func(), retry int64) {
	if publish != nil {
		publish()
	}
	t.publishOutcomes(outcomes, nil, "m"+strconv.FormatUint(t.m.serial, 10), 1, func() { t.ack(retry) })
}

// ack is the runner's ack, or its request for a redelivery after retry.
func (t *task) ack(retry int64) {
	w := t.w
	t.next("before ack", func() {
		t.release()
		m := t.m
		if m.gen != t.gen || m.owner != t.p {
			w.tracef("p%d: stale ack of %s ignored", t.p.id, m.msgID)
			return
		}
		m.owner = nil
		if retry > 0 {
			m.requested++
			m.availableAt = w.now + retry
			w.tracef("p%d: %s again in %dms", t.p.id, m.msgID, retry)
			w.at(m.availableAt, w.deliver)
			return
		}
		m.done = true
		w.tracef("p%d: ack %s", t.p.id, m.msgID)
	})
}

func codes(o schema.Outcome) string {
	s := ""
	for _, i := range o.Incidents {
		s += string(i.Code) + " "
	}
	return s
}

// ---- dispatch: Stage.run ----

func (t *task) startDispatch(givingUp bool) {
	t.next("dispatch start", func() {
		t.lock(func() { t.dispatchLoad(givingUp) })
	})
}

// dispatchLoad is Stage.run's first load.
func (t *task) dispatchLoad(givingUp bool) {
	env := t.m.env
	f := dispatch.Facts{Env: env, Now: t.now(), GivingUp: givingUp, Self: t.p.self}
	if e, found, _ := t.p.store.Ended(env.Ref()); found {
		f.Ended = &e
	}
	rec, found, err := t.p.store.Load(fp)
	if err != nil {
		t.fail(err)
		return
	}
	f.Provider, f.Known, f.Adapter = provConfig, true, "sim"
	if !found {
		rec = kv.NewIntent(kv.IdentityOf(env), f.Adapter, f.Now)
	}
	if t.w.cfg.Bug == BugResendOwn && rec.State == kv.StateInFlight && rec.InFlightBy == t.p.self {
		rec.State = kv.StateNotInvoked // planted: "my own, so never sent"
	}
	f.Record, f.Found = rec, found
	f.Redispatch = t.redispatchOf(rec)
	t.df = f
	t.next("dispatch step", t.dispatchStep)
}

func (t *task) dispatchStep() {
	w, f := t.w, &t.df
	d := dispatch.Step(*f, dispatchRules())
	if d.Call == dispatch.CallProvider && f.Dispatched {
		w.violate("dispatch: a step asked to call the provider twice")
		t.fail(errTwice)
		return
	}
	if !t.commit(d.Writes, "dispatch "+f.Env.Proposal.ProposalID, t.dispatchReload) {
		return
	}
	if rec := d.Writes.Record; rec != nil {
		w.tracef("p%d dispatch %s: committed state=%s receipt=%v redispatches=%d", t.p.id, f.Env.Proposal.ProposalID, rec.State, d.Writes.Receipt != nil, rec.Redispatches)
	}
	switch d.Call {
	case dispatch.CallDisclosure:
		w.violate("dispatch asked for a disclosure the simulation's proposals do not plan")
		t.fail(errTwice)
	case dispatch.CallProvider:
		f.Record = *d.Writes.Record
		f.Lease = dispatch.LeaseOf(f.Record)
		t.next("dispatch after in-flight", t.dispatchSend)
	default:
		if w.cfg.Bug == BugHoldOnce && d.Writes.Receipt == nil {
			d.Hold = "" // planted: kept only with the receipt
		}
		if !d.Writes.Empty() && w.afterCommit.Float64() < w.prof.crash {
			// Between the handler's commit and the runner's publish of
			// what it returned (fault.DispatchAfterReceipt).
			w.crash(t.p, "dispatch after commit")
			return
		}
		var outs []schema.Outcome
		if d.Outcome != nil {
			outs = append([]schema.Outcome{*d.Outcome}, d.Others...)
		}
		env := f.Env
		var hold func()
		if d.Hold != "" {
			hold = func() {
				id := d.Hold
				if !w.msgIDs[id] {
					w.msgIDs[id] = true
					w.held[kv.Hex(fp)] = schema.EncodeEnvelope(env)
					w.tracef("p%d holds %s", t.p.id, id)
				}
			}
		}
		t.finish(outs, hold, d.Retry.Milliseconds())
	}
}

// dispatchSend is Stage.dispatch: the processor's own not_after_ms check,
// then (a separate action: a stall can come between) the send.
func (t *task) dispatchSend() {
	w, f := t.w, &t.df
	if schema.Late(f.Record.InFlightUntilMs, t.now()) {
		w.tracef("p%d: lease ended before the send; not sent", t.p.id)
		f.Reply, f.CallErr, f.Dispatched, f.Now = schema.LateReply(), nil, true, t.now()
		t.next("dispatch after reply", t.dispatchStep)
		return
	}
	req := schema.DispatchRequest{
		Schema:         schema.SchemaDispatch,
		Fingerprint:    f.Record.Fingerprint,
		IdempotencyKey: f.Record.IdempotencyKey,
		Target:         schema.Target{Provider: f.Env.Proposal.Intent.Provider, Referent: f.Record.Referent},
		NotAfterMs:     f.Record.InFlightUntilMs,
	}
	t.next("dispatch before send", func() {
		w.tracef("p%d sends %s (not_after %d)", t.p.id, f.Env.Proposal.ProposalID, req.NotAfterMs-start)
		w.sends = append(w.sends, send{at: w.now, notAfter: req.NotAfterMs})
		w.call(t, "dispatch", func() schema.AdapterReply { return w.prov.dispatch(req) }, func(r schema.AdapterReply, err error) {
			f.Reply, f.CallErr, f.Dispatched, f.Now = r, err, true, t.now()
			w.tracef("p%d dispatch reply %q err=%v", t.p.id, r.Outcome, err)
			t.dispatchStep()
		})
	})
}

// dispatchReload is Stage.reload.
func (t *task) dispatchReload() {
	f := &t.df
	rec, found, err := t.p.store.Load(fp)
	if err != nil {
		t.fail(err)
		return
	}
	f.Now = t.now()
	if !found {
		rec = kv.NewIntent(kv.IdentityOf(f.Env), f.Adapter, f.Now)
	}
	f.Record, f.Found = rec, found
	f.Redispatch = t.redispatchOf(rec)
	if f.Ended == nil {
		if e, found, _ := t.p.store.Ended(f.Env.Ref()); found {
			f.Ended = &e
		}
	}
	t.next("dispatch step after reload", t.dispatchStep)
}

// redispatchOf is Stage.redispatchOf: the message's id names rec's latest
// redispatch.
func (t *task) redispatchOf(rec kv.Intent) int {
	if t.w.cfg.Bug == BugRedispatchEndsOne || rec.Redispatches == 0 || t.m.msgID != kv.RedispatchID(fp, rec.Redispatches) {
		return 0
	}
	return rec.Redispatches
}

// ---- reconciliation: Stage.run ----

func (t *task) startReconcile(mayQuery bool) {
	t.next("reconcile start", func() {
		t.lock(func() {
			t.rf = reconciliation.Facts{Trigger: t.m.trigger, MayQuery: mayQuery}
			t.reconcileLoad()
		})
	})
}

// reconcileLoad is Stage.load.
func (t *task) reconcileLoad() {
	f := &t.rf
	n := f.Trigger.Attempt
	rec, found, err := t.p.store.Load(fp)
	if err != nil {
		t.fail(err)
		return
	}
	f.Record, f.Found, f.Now = rec, found, t.now()
	f.Checkpoint, f.CheckpointFound, f.Previous, f.PreviousFound = kv.Attempt{}, false, kv.Attempt{}, false
	if found && !f.Trigger.Announce {
		switch {
		case n == rec.ReconcileAttempt:
			f.Checkpoint, f.CheckpointFound, _ = t.p.store.Attempt(fp, kv.AttemptID(fp, n))
		case n == rec.ReconcileAttempt+1 && rec.ReconcileAttempt > 0:
			f.Previous, f.PreviousFound, _ = t.p.store.Attempt(fp, kv.AttemptID(fp, rec.ReconcileAttempt))
		}
	}
	t.next("reconcile step", t.reconcileStep)
}

func (t *task) reconcileStep() {
	w, f := t.w, &t.rf
	d := reconciliation.Step(*f, reconcileRules())
	if d.Call && f.Queried {
		w.violate("reconciliation: a step asked to query twice")
		t.fail(errTwice)
		return
	}
	if !t.commit(d.Writes, "reconcile "+strconv.Itoa(f.Trigger.Attempt), t.reconcileLoad) {
		return
	}
	if rec := d.Writes.Record; rec != nil {
		w.tracef("p%d reconcile %d: committed state=%s receipt=%v attempt=%d", t.p.id, f.Trigger.Attempt, rec.State, d.Writes.Receipt != nil, rec.ReconcileAttempt)
	}
	switch {
	case d.ReadHeld:
		f.Held, f.HeldRead = nil, true
		if h, ok := w.held[kv.Hex(fp)]; ok {
			f.Held = append([]byte(nil), h...)
		}
		t.next("reconcile after held", t.reconcileStep)
	case d.Call:
		f.Record, f.Checkpoint, f.CheckpointFound = *d.Writes.Record, *d.Writes.Attempt, true
		id := d.Writes.Attempt.AttemptID
		prev := f.Record.Receipt
		req := schema.ReconcileRequest{Schema: schema.SchemaReconcile, Fingerprint: fp, IdempotencyKey: f.Record.IdempotencyKey,
			AttemptID: id, ProviderActionID: prev.ProviderActionID, PreviousReceiptID: prev.ReceiptID}
		t.next("reconcile after checkpoint", func() {
			w.call(t, "reconcile "+id, func() schema.AdapterReply { return w.prov.reconcile(req) }, func(r schema.AdapterReply, err error) {
				f.Reply, f.CallErr, f.Queried, f.Now = r, err, true, t.now()
				w.tracef("p%d reconcile reply %q err=%v", t.p.id, r.Outcome, err)
				t.reconcileStep()
			})
		})
	default:
		if d.Note != "" {
			w.tracef("p%d reconcile %d: %s", t.p.id, f.Trigger.Attempt, d.Note)
		}
		var hand func()
		if d.Redispatch != nil {
			n := d.Redispatches
			data := d.Redispatch
			hand = func() {
				env, err := stages.DecodeEnvelope(data, stages.Grounded)
				if err != nil || env.Grounded.Fingerprint != fp {
					w.violate("a held envelope that is not the intent's")
					return
				}
				w.redispatches = append(w.redispatches, w.now)
				w.publish(&message{stage: stageDispatch, env: env, msgID: kv.RedispatchID(fp, n), dedup: true})
			}
		}
		t.finish(d.Outcomes, hand, d.Retry.Milliseconds())
	}
}

// armed schedules the firing of the journal's timers (the scheduler).
func (w *World) armed() {
	for _, tm := range w.j.armed() {
		w.at(tm.DueMs, w.fireTimers)
	}
}

// fireTimers publishes every due timer, in due order, and removes it
// (without a message id: see message.dedup).
func (w *World) fireTimers() {
	for _, tm := range w.j.due(w.now) {
		var tr kv.Trigger
		mustUnmarshal(tm.Data, &tr)
		w.publish(&message{stage: stageReconcile, trigger: tr, msgID: tm.MsgID})
	}
}

// commit commits a step's writes; on a conflict (at most maxConflicts
// times) it reloads and steps again, on another error the delivery fails.
// It reports whether the step goes on.
func (t *task) commit(ws kv.IntentWrites, what string, reload func()) bool {
	err := t.p.store.Commit(fp, ws)
	t.w.armed() // a losing commit armed its timer too
	switch {
	case err == nil:
		return true
	case errors.Is(err, kv.ErrConflict) && t.conflicts < maxConflicts:
		t.conflicts++
		t.w.tracef("p%d %s: conflict, reload", t.p.id, what)
		reload()
	default:
		t.fail(err)
	}
	return false
}
