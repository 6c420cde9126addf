package reconciliation_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/pebble"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/reconciliation"
	"github.com/portcullis/portcullis/subjects"
)

// TestTimeoutThenReconcileConfirms: the provider times out, the effect is
// unknown; reconciliation asks once and confirms; every proposal of the
// intent hears it; the provider saw one dispatch.
func TestTimeoutThenReconcileConfirms(t *testing.T) {
	env, clock := start(t)
	fake := env.Fakes["demo"]
	timeoutDispatch(fake)
	asked := script(fake, reply("confirmed"))

	fp := propose(t, env, clock, "prop-1")
	rr := env.Recorder.Wait(t, "prop-1", last(schema.KindReconciliationRequired))
	if rr.Terminal || rr.EffectTruth != schema.TruthIndeterminate || !sameStrings(incidents(rr), "dispatch/ADAPTER_TIMEOUT") {
		t.Fatalf("dispatch outcome = %+v", rr)
	}
	first := rr.Receipt
	if first.Status != schema.StatusReconciliationRequired || first.NextAction != schema.NextReconcile || first.Reconciliation != nil {
		t.Fatalf("dispatch receipt = %+v", first)
	}
	// A second proposal of the same intent joins it without a dispatch.
	m, _ := lumber(t, clock, "prop-2")
	env.PublishSigned(t, m, env.Host)
	env.Recorder.Wait(t, "prop-2", last(schema.KindReconciliationRequired))
	if g := gauge(t, env); g != 1 {
		t.Errorf("indeterminate gauge = %v, want 1", g)
	}
	tm, found, err := env.Processor().Store().Timer(kv.IntentTimerID(fp))
	if err != nil || !found || tm.DueMs != t0.Add(interval).UnixMilli() {
		t.Fatalf("first poll timer = %+v %v %v", tm, found, err)
	}
	env.Quiesce(t)
	if n := len(asked.requests()); n != 0 {
		t.Fatalf("reconciled before the interval: %d", n)
	}

	clock.Advance(interval)
	for _, pid := range []string{"prop-1", "prop-2"} {
		o := env.Recorder.Wait(t, pid, last(schema.KindConfirmed))
		r := o.Receipt
		if !o.Terminal || o.EffectTruth != schema.TruthPresent || len(o.Incidents) != 0 || *o.Fingerprint != fp || *o.Referent != "sku-1001" {
			t.Errorf("%s: outcome = %+v", pid, o)
		}
		if r.Status != schema.StatusConfirmed || r.NextAction != schema.NextNone || r.Reconciliation == nil ||
			r.Reconciliation.AttemptID != kv.AttemptID(fp, 1) || r.Reconciliation.PreviousReceiptID != first.ReceiptID ||
			r.ProviderActionID != "prov:order-77" || !sameStrings(r.EvidenceRefs, "prov:orders/77") || r.ReceiptID == first.ReceiptID {
			t.Errorf("%s: receipt = %+v", pid, r)
		}
	}
	reqs := asked.requests()
	if len(reqs) != 1 || reqs[0].AttemptID != kv.AttemptID(fp, 1) || reqs[0].PreviousReceiptID != first.ReceiptID ||
		reqs[0].IdempotencyKey != fingerprint.Key(fp) || reqs[0].Schema != schema.SchemaReconcile {
		t.Fatalf("reconcile requests = %+v", reqs)
	}
	key := fingerprint.Key(fp)
	if d := fake.DispatchesFor(key); d != 1 {
		t.Errorf("dispatches = %d, want 1", d)
	}
	if g := gauge(t, env); g != 0 {
		t.Errorf("indeterminate gauge = %v, want 0", g)
	}
	if n := attempts(env, metrics.AttemptConfirmed); n != 1 {
		t.Errorf("confirmed attempts = %v", n)
	}

	st := env.Processor().Store()
	rs, err := st.Receipts(fp)
	if err != nil || len(rs) != 2 || rs[1].Reconciliation.PreviousReceiptID != rs[0].ReceiptID {
		t.Fatalf("receipt history = %+v %v", rs, err)
	}
	if ind, _ := st.Indeterminates(); len(ind) != 0 {
		t.Errorf("index = %+v", ind)
	}
	if _, found, _ := st.Timer(kv.IntentTimerID(fp)); found {
		t.Error("a poll is still scheduled")
	}
	a := activityOf(t, env, fp, func(a *schema.Activity) bool { return a.Status == string(schema.StatusConfirmed) })
	if a.Reconciliation == nil || a.Reconciliation.Attempts != 1 || a.Reconciliation.Resolution != kv.ResolvedByProvider ||
		a.Reconciliation.LastAttemptID != kv.AttemptID(fp, 1) || a.Reconciliation.Exhausted || a.Reconciliation.NextAtMs != 0 {
		t.Errorf("activity reconciliation = %+v", a.Reconciliation)
	}
	if a.Dispatch == nil || !a.Dispatch.Attempted || a.Dispatch.Status != schema.StatusReconciliationRequired || a.Dispatch.ErrorCode != string(schema.CodeAdapterTimeout) {
		t.Errorf("activity dispatch = %+v", a.Dispatch)
	}
	if a.Receipt == nil || a.Receipt.ReceiptID != rs[1].ReceiptID || len(a.Proposals) != 2 {
		t.Errorf("activity receipt/proposals = %+v %v", a.Receipt, testenv.IDs(a.Proposals))
	}

	// A later proposal of the settled intent gets the confirmation; nothing
	// is asked or sent again, however long the clock runs.
	m, _ = lumber(t, clock, "prop-3")
	env.PublishSigned(t, m, env.Host)
	if o := env.Recorder.Wait(t, "prop-3", testenv.Terminal); o.Kind != schema.KindConfirmed || o.Receipt.ReceiptID != rs[1].ReceiptID {
		t.Errorf("late proposal: %+v", o)
	}
	clock.Advance(time.Hour)
	env.Quiesce(t)
	if n := len(asked.requests()); n != 0 || fake.DispatchesFor(key) != 1 {
		t.Errorf("after settling: %d more reconciles, %d dispatches", n, fake.DispatchesFor(key))
	}
}

// TestVerifyAcknowledged: an acknowledged effect is verified. An attempt
// that cannot tell leaves it ACKNOWLEDGED (the incident is an event only);
// the next one confirms it.
func TestVerifyAcknowledged(t *testing.T) {
	env, clock := start(t)
	fake := env.Fakes["demo"]
	fake.OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: schema.ReplyAcknowledged, ProviderActionID: "prov:ack-1"}, nil
	})
	asked := script(fake, reply("indeterminate"), reply("confirmed"))
	fp := propose(t, env, clock, "prop-ack")
	ack := env.Recorder.Wait(t, "prop-ack", last(schema.KindAcknowledged))
	if ack.Receipt.NextAction != schema.NextVerify || ack.EffectTruth != schema.TruthUnverified || gauge(t, env) != 0 {
		t.Fatalf("acknowledged = %+v, gauge %v", ack, gauge(t, env))
	}

	clock.Advance(interval)
	o := env.Recorder.Wait(t, "prop-ack", nth(2))
	if o.Kind != schema.KindAcknowledged || len(o.Incidents) != 0 || o.Receipt.Status != schema.StatusAcknowledged ||
		o.Receipt.NextAction != schema.NextVerify || o.Receipt.ErrorCode != string(schema.CodeProviderIndeterminate) ||
		o.Receipt.Reconciliation.PreviousReceiptID != ack.Receipt.ReceiptID {
		t.Fatalf("inconclusive verification = %+v", o)
	}
	env.Recorder.WaitEvent(t, schema.PhaseReconciliation, schema.CodeProviderIndeterminate)
	if g := gauge(t, env); g != 0 {
		t.Errorf("an acknowledged effect counted as indeterminate: %v", g)
	}
	clock.Advance(Backoff(2) - time.Millisecond)
	env.Quiesce(t)
	if n := len(env.Recorder.Outcomes("prop-ack")); n != 2 {
		t.Fatalf("polled before its backoff: %d outcomes", n)
	}
	clock.Advance(time.Millisecond)
	c := env.Recorder.Wait(t, "prop-ack", last(schema.KindConfirmed))
	if c.Receipt.Reconciliation.AttemptID != kv.AttemptID(fp, 2) || c.Receipt.Reconciliation.PreviousReceiptID != o.Receipt.ReceiptID {
		t.Errorf("confirmation receipt = %+v", c.Receipt)
	}
	reqs := asked.requests()
	if !sameStrings(ids(reqs), kv.AttemptID(fp, 1), kv.AttemptID(fp, 2)) || reqs[0].ProviderActionID != "prov:ack-1" {
		t.Errorf("verification requests = %+v", reqs)
	}
	if attempts(env, metrics.AttemptIndeterminate) != 1 || attempts(env, metrics.AttemptConfirmed) != 1 || fake.Dispatches() != 1 {
		t.Errorf("attempt counters or dispatches wrong")
	}
}

// Backoff is the wait before poll n with the test interval.
func Backoff(n int) time.Duration { return reconciliation.Backoff(interval, n) }

// TestReconcileSettlesAbsent: a reconcile that finds the effect absent ends
// REJECTED (or FAILED_BEFORE_DISPATCH when the provider never received it)
// — but only once the dispatch's not_after_ms plus the clock skew has
// passed (SPEC §4): the same answer before then leaves the effect unknown
// (PROVIDER_INDETERMINATE, the provider's code) and the next poll, with a
// new attempt id, comes no earlier than that moment.
func TestReconcileSettlesAbsent(t *testing.T) {
	cases := []struct {
		answer    string
		kind      schema.Kind
		truth     schema.EffectTruth
		incident  string
		code      string
		attempted bool
	}{
		{schema.ReplyRejected, schema.KindRejected, schema.TruthAbsent, "dispatch/PROVIDER_REJECTED", "ORDER_NOT_FOUND", true},
		{schema.ReplyFailedBeforeDispatch, schema.KindFailedBeforeDispatch, schema.TruthNotDispatched, "dispatch/PROVIDER_FAILED_BEFORE_DISPATCH", "NEVER_RECEIVED", false},
	}
	for _, c := range cases {
		t.Run(c.answer, func(t *testing.T) {
			env, clock := start(t)
			fake := env.Fakes["demo"]
			fake.OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
				return schema.AdapterReply{Outcome: schema.ReplyIndeterminate}, nil
			})
			script(fake, func() (schema.AdapterReply, error) {
				return schema.AdapterReply{Outcome: c.answer, ErrorCode: c.code}, nil
			})
			fp := propose(t, env, clock, "prop-x")
			rr := env.Recorder.Wait(t, "prop-x", last(schema.KindReconciliationRequired))
			if !sameStrings(incidents(rr), "dispatch/PROVIDER_INDETERMINATE") {
				t.Fatalf("dispatch outcome = %+v", rr)
			}
			clock.Advance(interval)
			early := env.Recorder.Wait(t, "prop-x", nth(2))
			if early.Kind != schema.KindReconciliationRequired || !sameStrings(incidents(early), "reconciliation/PROVIDER_INDETERMINATE") ||
				early.Receipt.ErrorCode != c.code || early.Receipt.NextAction != schema.NextReconcile {
				t.Fatalf("an absence answered before the fence passed = %+v receipt %+v", early, early.Receipt)
			}
			// The dispatch's request carried not_after_ms = t0 + timeout (2s)
			// + margin (5s); the clock skew is 30s.
			fence := t0.Add(2*time.Second + 5*time.Second + env.Config.Approval.ClockSkew)
			clock.Set(fence)
			env.Quiesce(t)
			if n := len(env.Recorder.Outcomes("prop-x")); n != 2 {
				t.Fatalf("polled again before the fence passed: %d outcomes", n)
			}
			clock.Set(fence.Add(time.Millisecond))
			o := env.Recorder.Wait(t, "prop-x", testenv.Terminal)
			if o.Kind != c.kind || o.EffectTruth != c.truth || !sameStrings(incidents(o), c.incident) ||
				o.Receipt.ErrorCode != c.code || o.Receipt.DispatchAttempted != c.attempted || o.Receipt.NextAction != schema.NextNone {
				t.Fatalf("outcome = %+v receipt %+v", o, o.Receipt)
			}
			if gauge(t, env) != 0 || attempts(env, c.answer) != 2 || fake.Dispatches() != 1 || o.Receipt.Reconciliation.AttemptID == early.Receipt.Reconciliation.AttemptID {
				t.Errorf("gauge %v, attempts %v, dispatches %d", gauge(t, env), attempts(env, c.answer), fake.Dispatches())
			}
			activityOf(t, env, fp, func(a *schema.Activity) bool {
				return a.Status == string(o.Receipt.Status) && a.Reconciliation != nil && a.Reconciliation.Resolution == kv.ResolvedByProvider
			})
		})
	}
}

// TestExhaustionThenOperator: polls that cannot tell back off and end in a
// terminal RECONCILE_EXHAUSTED; the operator lists it and settles it.
func TestExhaustionThenOperator(t *testing.T) {
	env, clock := start(t)
	fake := env.Fakes["demo"]
	timeoutDispatch(fake)
	asked := script(fake,
		fail(adapters.ErrTimeout),
		fail(errors.New("connection reset")),
		func() (schema.AdapterReply, error) { return schema.AdapterReply{Outcome: "maybe"}, nil }, // malformed
	)
	fp := propose(t, env, clock, "prop-ex")
	env.Recorder.Wait(t, "prop-ex", last(schema.KindReconciliationRequired))
	if g, x := gauge(t, env), exhaustedGauge(env); g != 1 || x != 0 {
		t.Errorf("while polling: actions_indeterminate_actions = %v, actions_indeterminate_exhausted = %v; want 1, 0", g, x)
	}
	wantIncidents := [][]string{
		{"reconciliation/RECONCILE_ERROR"},
		{"reconciliation/RECONCILE_ERROR"},
		{"reconciliation/MALFORMED_ADAPTER_RESULT", "reconciliation/RECONCILE_EXHAUSTED"},
	}
	for n := 1; n <= maxAttempts; n++ {
		clock.Advance(Backoff(n))
		o := env.Recorder.Wait(t, "prop-ex", nth(n+1))
		if o.Kind != schema.KindReconciliationRequired || o.Terminal != (n == maxAttempts) || !sameStrings(incidents(o), wantIncidents[n-1]...) ||
			o.Receipt.Reconciliation.AttemptID != kv.AttemptID(fp, n) {
			t.Fatalf("attempt %d: %+v", n, o)
		}
	}
	last := env.Recorder.Outcomes("prop-ex")[maxAttempts]
	if last.Receipt.ErrorCode != string(schema.CodeReconcileExhausted) || last.Receipt.NextAction != schema.NextNone {
		t.Errorf("exhausted receipt = %+v", last.Receipt)
	}
	if !sameStrings(ids(asked.requests()), kv.AttemptID(fp, 1), kv.AttemptID(fp, 2), kv.AttemptID(fp, 3)) {
		t.Error("attempt ids repeated or missing")
	}
	for s, want := range map[string]float64{metrics.AttemptError: 2, metrics.AttemptMalformed: 1} {
		if attempts(env, s) != want {
			t.Errorf("attempts{%s} = %v, want %v", s, attempts(env, s), want)
		}
	}
	clock.Advance(24 * time.Hour)
	env.Quiesce(t)
	if n := len(asked.requests()); n != 0 {
		t.Errorf("polled %d times after exhaustion", n)
	}
	if g, x := gauge(t, env), exhaustedGauge(env); g != 1 || x != 1 {
		t.Errorf("exhausted: actions_indeterminate_actions = %v, actions_indeterminate_exhausted = %v; want 1, 1", g, x)
	}
	activityOf(t, env, fp, func(a *schema.Activity) bool {
		return a.Reconciliation != nil && a.Reconciliation.Exhausted && a.Reconciliation.Attempts == maxAttempts
	})

	ops := env.Admin()
	ctx := context.Background()
	list, err := ops.List(ctx)
	if err != nil || len(list.Actions) != 1 {
		t.Fatalf("list = %+v %v", list, err)
	}
	p := list.Actions[0]
	if p.Fingerprint != fp || !p.Exhausted || p.Attempts != maxAttempts || p.MaxAttempts != maxAttempts || p.SinceMs != t0.UnixMilli() ||
		list.NowMs != clock.Now().UnixMilli() || p.ErrorCode != string(schema.CodeReconcileExhausted) || p.Provider != "demo" || !sameStrings(testenv.IDs(p.Proposals), "prop-ex") {
		t.Errorf("pending = %+v (now %d)", p, list.NowMs)
	}
	if _, err := ops.Resolve(ctx, fp, true, "no colon here"); !errors.Is(err, admin.ErrBadRequest) {
		t.Errorf("bad evidence: %v", err)
	}
	res, err := ops.Resolve(ctx, fp, true, "ticket:OPS-1234")
	if err != nil {
		t.Fatal(err)
	}
	if res.OutcomeKind != schema.KindConfirmed || res.Receipt.ErrorCode != string(schema.CodeOperatorResolved) ||
		!sameStrings(res.Receipt.EvidenceRefs, "ticket:OPS-1234") || res.Receipt.Reconciliation.AttemptID != kv.OperatorAttemptID(fp) ||
		res.Receipt.Reconciliation.PreviousReceiptID != last.Receipt.ReceiptID || res.Receipt.Reconciliation.Operator != testenv.OperatorName {
		t.Errorf("resolution = %+v", res)
	}
	o := env.Recorder.Wait(t, "prop-ex", func(outs []schema.Outcome) bool { return outs[len(outs)-1].Kind == schema.KindConfirmed })
	if !o.Terminal || len(o.Incidents) != 0 || o.Receipt.ReceiptID != res.Receipt.ReceiptID {
		t.Errorf("operator outcome = %+v", o)
	}
	env.Recorder.WaitEvent(t, schema.PhaseReconciliation, schema.CodeOperatorResolved)
	if g := gauge(t, env); g != 0 {
		t.Errorf("gauge after resolution = %v", g)
	}
	if list, err := ops.List(ctx); err != nil || len(list.Actions) != 0 {
		t.Errorf("queue after resolution = %+v %v", list, err)
	}
	if _, err := ops.Resolve(ctx, fp, false, "ticket:OPS-1235"); !errors.Is(err, admin.ErrNotIndeterminate) {
		t.Errorf("second resolution: %v", err)
	}
	rs, err := ops.Receipts(ctx, fp)
	if err != nil || len(rs.Receipts) != 5 || rs.Resolution != kv.ResolvedByOperator || rs.OutcomeKind != schema.KindConfirmed || !rs.Terminal {
		t.Fatalf("receipts = %+v %v", rs, err)
	}
	for i := 1; i < len(rs.Receipts); i++ {
		if rs.Receipts[i].Reconciliation.PreviousReceiptID != rs.Receipts[i-1].ReceiptID || rs.Receipts[i].RecordedAtMs < rs.Receipts[i-1].RecordedAtMs {
			t.Errorf("receipt %d is not linked to %d", i, i-1)
		}
	}
	a := activityOf(t, env, fp, func(a *schema.Activity) bool { return a.Status == string(schema.StatusConfirmed) })
	if a.Reconciliation.Resolution != kv.ResolvedByOperator || a.Receipt.ReceiptID != res.Receipt.ReceiptID ||
		a.Reconciliation.ResolvedBy != testenv.OperatorName || a.Receipt.Reconciliation.Operator != testenv.OperatorName {
		t.Errorf("activity = %+v", a.Reconciliation)
	}
	// A later proposal of the intent hears the operator's answer.
	m, _ := lumber(t, clock, "prop-ex-2")
	env.PublishSigned(t, m, env.Host)
	if o := env.Recorder.Wait(t, "prop-ex-2", testenv.Terminal); o.Kind != schema.KindConfirmed || fake.Dispatches() != 1 {
		t.Errorf("late proposal: %+v, %d dispatches", o, fake.Dispatches())
	}
	if _, err := ops.Receipts(ctx, "sha256:"+fingerprint.Key(fp)[:63]+"0"); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("unknown fingerprint: %v", err)
	}
}

// TestResolveWhilePolling: an operator may settle an effect that is still
// being polled; the pending poll is cancelled.
func TestResolveWhilePolling(t *testing.T) {
	env, clock := start(t)
	fake := env.Fakes["demo"]
	timeoutDispatch(fake)
	asked := script(fake, fail(adapters.ErrTimeout))
	fp := propose(t, env, clock, "prop-live")
	env.Recorder.Wait(t, "prop-live", last(schema.KindReconciliationRequired))
	clock.Advance(interval)
	env.Recorder.Wait(t, "prop-live", nth(2))
	ops := env.Admin()
	list, err := ops.List(context.Background())
	if err != nil || len(list.Actions) != 1 || list.Actions[0].Exhausted || list.Actions[0].NextAtMs != clock.Now().Add(Backoff(2)).UnixMilli() {
		t.Fatalf("list = %+v %v", list, err)
	}
	if _, err := ops.Resolve(context.Background(), fp, false, "provider-console:order-search/none"); err != nil {
		t.Fatal(err)
	}
	o := env.Recorder.Wait(t, "prop-live", testenv.Terminal)
	if o.Kind != schema.KindRejected || o.EffectTruth != schema.TruthAbsent || len(o.Incidents) != 0 {
		t.Errorf("outcome = %+v", o)
	}
	clock.Advance(time.Hour)
	env.Quiesce(t)
	if n := len(asked.requests()); n != 1 {
		t.Errorf("reconciles = %d: the pending poll survived the resolution", n)
	}
	if n := len(env.Recorder.Outcomes("prop-live")); n != 3 {
		t.Errorf("outcomes = %d", n)
	}
}

// TestResolveHeldToWhatWasExamined: an operator's finding names the
// receipt examined and when the provider was looked at (admin
// ResolveChecks); a finding about another receipt than the latest, or an
// absence seen while the dispatch's request could still arrive, is
// refused (internal/sim findings 4 and 5), and one that holds settles.
func TestResolveHeldToWhatWasExamined(t *testing.T) {
	env, clock := start(t)
	fake := env.Fakes["demo"]
	timeoutDispatch(fake)
	script(fake, fail(adapters.ErrTimeout))
	sent := clock.Now()
	fp := propose(t, env, clock, "prop-examined")
	env.Recorder.Wait(t, "prop-examined", last(schema.KindReconciliationRequired))
	clock.Advance(time.Hour) // past the fence; the first poll cannot tell
	env.Recorder.Wait(t, "prop-examined", nth(2))
	env.Quiesce(t)
	ops, ctx := env.Admin(), context.Background()
	list, err := ops.List(ctx)
	if err != nil || len(list.Actions) != 1 {
		t.Fatalf("list = %+v %v", list, err)
	}
	latest := list.Actions[0].ReceiptID
	target := admin.Target{Fingerprint: fp}
	for _, c := range []struct {
		name   string
		checks admin.ResolveChecks
		want   error
	}{
		{"not a receipt id", admin.ResolveChecks{ReceiptID: "receipt-1"}, admin.ErrBadRequest},
		{"another receipt than the latest", admin.ResolveChecks{ReceiptID: "rcpt_" + strings.Repeat("0", 32)}, admin.ErrNotIndeterminate},
		{"absent, seen when the request was sent", admin.ResolveChecks{ReceiptID: latest, ObservedAtMs: sent.UnixMilli()}, admin.ErrNotIndeterminate},
	} {
		if _, err := ops.ResolveChecked(ctx, target, false, "ticket:OPS-9", c.checks); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	res, err := ops.ResolveChecked(ctx, target, false, "ticket:OPS-9", admin.ResolveChecks{ReceiptID: latest, ObservedAtMs: clock.Now().UnixMilli()})
	if err != nil || res.OutcomeKind != schema.KindRejected || res.Receipt.Reconciliation.PreviousReceiptID != latest {
		t.Fatalf("resolve = %+v %v", res, err)
	}
}

// TestResolveRefusals: only an indeterminate effect can be settled.
func TestResolveRefusals(t *testing.T) {
	env, clock := start(t)
	fp := propose(t, env, clock, "prop-ok") // the fake confirms at once
	env.Recorder.Wait(t, "prop-ok", testenv.Terminal)
	ops := env.Admin()
	ctx := context.Background()
	if _, err := ops.Resolve(ctx, fp, false, "ticket:1"); !errors.Is(err, admin.ErrNotIndeterminate) {
		t.Errorf("confirmed: %v", err)
	}
	if _, err := ops.Resolve(ctx, "sha256:nothex", false, "ticket:1"); !errors.Is(err, admin.ErrBadRequest) {
		t.Errorf("bad fingerprint: %v", err)
	}
	other := "sha256:" + fingerprint.Key(fp)[:60] + "beef"
	if _, err := ops.Resolve(ctx, other, false, "ticket:1"); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("unknown: %v", err)
	}
	// Raw requests that do not decode.
	for _, body := range []string{`{"fingerprint":1}`, `{"fingerprint":"x","effect":"present","evidence_ref":"a:b","extra":1}`, `[]`, `{"effect":"maybe"}`} {
		hdr, err := admin.Sign(env.Operator, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		m, err := env.NC.RequestMsg(&nats.Msg{Subject: env.Subjects.Admin(subjects.AdminReconcileSolve), Header: hdr, Data: []byte(body)}, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Error *admin.Error `json:"error"`
		}
		if err := schema.Decode(m.Data, &r); err != nil || r.Error == nil || r.Error.Code != admin.CodeBadRequest {
			t.Errorf("%s: %s", body, m.Data)
		}
	}
	if g := gauge(t, env); g != 0 {
		t.Errorf("gauge = %v", g)
	}
	// Nobody answers another prefix.
	otherSubj, _ := subjects.New("elsewhere")
	if _, err := (&admin.Client{NC: env.NC, Subjects: otherSubj}).List(ctx); !errors.Is(err, admin.ErrNoProcessor) {
		t.Errorf("no processor: %v", err)
	}
}

// TestRestartMidPolling: polling survives a restart, and no attempt id is
// used twice.
func TestRestartMidPolling(t *testing.T) {
	env, clock := start(t)
	fake := env.Fakes["demo"]
	timeoutDispatch(fake)
	asked := script(fake, reply("indeterminate"), reply("confirmed"))
	fp := propose(t, env, clock, "prop-r")
	env.Recorder.Wait(t, "prop-r", last(schema.KindReconciliationRequired))
	clock.Advance(interval)
	env.Recorder.Wait(t, "prop-r", nth(2))

	env.Restart(t)
	if g := gauge(t, env); g != 1 {
		t.Errorf("gauge after restart = %v", g)
	}
	clock.Advance(Backoff(2))
	o := env.Recorder.Wait(t, "prop-r", last(schema.KindConfirmed))
	if o.Receipt.Reconciliation.AttemptID != kv.AttemptID(fp, 2) {
		t.Errorf("receipt = %+v", o.Receipt)
	}
	if got := ids(asked.requests()); !sameStrings(got, kv.AttemptID(fp, 1), kv.AttemptID(fp, 2)) {
		t.Errorf("attempt ids = %v", got)
	}
	if g := gauge(t, env); g != 0 {
		t.Errorf("gauge = %v", g)
	}
}

// TestInterruptedAttemptIsNeverRepeated: an attempt found started but
// unfinished (the processor died while asking) is recorded as
// RECONCILE_ERROR without asking again; the next poll uses a new id.
func TestInterruptedAttemptIsNeverRepeated(t *testing.T) {
	env, clock := start(t)
	fake := env.Fakes["demo"]
	timeoutDispatch(fake)
	asked := script(fake, reply("confirmed"))
	fp := propose(t, env, clock, "prop-i")
	env.Recorder.Wait(t, "prop-i", last(schema.KindReconciliationRequired))
	env.Stop(t)

	// What a crash between the checkpoint and the reply leaves behind.
	st, err := pebble.Open(env.Config.Store.Dir, pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	j := pebble.NewJournal(st)
	rec, _, err := j.Load(fp)
	if err != nil {
		t.Fatal(err)
	}
	rec.ReconcileAttempt = 1
	cp := kv.Attempt{AttemptID: kv.AttemptID(fp, 1), Number: 1, StartedAtMs: t0.Add(interval).UnixMilli()}
	if err := j.Commit(fp, kv.IntentWrites{Record: &rec, Attempt: &cp}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	env.Start(t)
	clock.Advance(interval)
	o := env.Recorder.Wait(t, "prop-i", nth(2))
	if o.Kind != schema.KindReconciliationRequired || !sameStrings(incidents(o), "reconciliation/RECONCILE_ERROR") ||
		o.Receipt.Reconciliation.AttemptID != kv.AttemptID(fp, 1) {
		t.Fatalf("interrupted attempt = %+v", o)
	}
	if n := len(asked.requests()); n != 0 {
		t.Fatalf("the interrupted attempt was asked again (%d)", n)
	}
	if attempts(env, metrics.AttemptReplayed) != 1 {
		t.Errorf("replayed attempts = %v", attempts(env, metrics.AttemptReplayed))
	}
	cp, found, err := pebble.NewJournal(env.Processor().Store()).Attempt(fp, kv.AttemptID(fp, 1))
	if err != nil || !found || cp.Status != metrics.AttemptReplayed || cp.FinishedAtMs == 0 {
		t.Errorf("checkpoint = %+v %v %v", cp, found, err)
	}
	clock.Advance(Backoff(2))
	env.Recorder.Wait(t, "prop-i", last(schema.KindConfirmed))
	if got := ids(asked.requests()); !sameStrings(got, kv.AttemptID(fp, 2)) {
		t.Errorf("attempt ids = %v", got)
	}
}

// TestStaleAndMalformedTriggers: a trigger seen again never asks twice; a
// trigger that is not one is dropped with PROCESSING_FAILED.
func TestStaleAndMalformedTriggers(t *testing.T) {
	env, clock := start(t)
	fake := env.Fakes["demo"]
	timeoutDispatch(fake)
	asked := script(fake, reply("confirmed"))
	fp := propose(t, env, clock, "prop-s")
	env.Recorder.Wait(t, "prop-s", last(schema.KindReconciliationRequired))
	clock.Advance(interval)
	done := env.Recorder.Wait(t, "prop-s", last(schema.KindConfirmed))
	hex := fingerprint.Key(fp)
	subject := env.Subjects.Stage(subjects.StageReconciliation, subjects.KindTimer, hex)
	for _, n := range []int{1, 2, 7} { // the finished attempt, one never due, one far off
		env.PublishInternal(t, subject, schema.MustMarshal(kv.Trigger{Fingerprint: fp, Attempt: n}))
	}
	for _, body := range []string{`{"fingerprint":"` + fp + `","attempt":0}`, `{"fingerprint":"sha256:` + hex[:63] + `0","attempt":1}`, `garbage`} {
		env.PublishInternal(t, subject, []byte(body))
	}
	env.PublishInternal(t, env.Subjects.Stage(subjects.StageReconciliation, subjects.KindTimer, "not-hex"), []byte(`{}`))
	env.Quiesce(t)
	if n := env.Recorder.CountEvents(schema.PhaseReconciliation, schema.CodeProcessingFailed); n != 4 {
		t.Errorf("PROCESSING_FAILED events: %d, want 4 (three malformed triggers and one on a subject that is not a fingerprint)", n)
	}
	if n := len(asked.requests()); n != 1 {
		t.Errorf("reconciles = %d, want 1", n)
	}
	for _, o := range env.Recorder.Outcomes("prop-s")[1:] {
		if o.Kind != schema.KindConfirmed || o.Receipt.ReceiptID != done.Receipt.ReceiptID {
			t.Errorf("a replayed trigger changed the answer: %+v", o)
		}
	}
}

// TestVerifyExhausted: verification that never tells keeps the effect
// ACKNOWLEDGED until the last attempt, which hands it to the operator as
// terminal RECONCILIATION_REQUIRED (and only then counts it indeterminate).
func TestVerifyExhausted(t *testing.T) {
	env, clock := start(t)
	fake := env.Fakes["demo"]
	fake.OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: schema.ReplyAcknowledged}, nil
	})
	script(fake, fail(errors.New("connection reset")))
	fp := propose(t, env, clock, "prop-v")
	env.Recorder.Wait(t, "prop-v", last(schema.KindAcknowledged))
	for n := 1; n <= maxAttempts; n++ {
		clock.Advance(Backoff(n))
		o := env.Recorder.Wait(t, "prop-v", nth(n+1))
		if n < maxAttempts && (o.Kind != schema.KindAcknowledged || len(o.Incidents) != 0 || gauge(t, env) != 0) {
			t.Fatalf("attempt %d: %+v, gauge %v", n, o, gauge(t, env))
		}
		if n == maxAttempts && (o.Kind != schema.KindReconciliationRequired || !o.Terminal ||
			!sameStrings(incidents(o), "reconciliation/RECONCILE_ERROR", "reconciliation/RECONCILE_EXHAUSTED")) {
			t.Fatalf("last attempt: %+v", o)
		}
	}
	if g := gauge(t, env); g != 1 {
		t.Errorf("gauge = %v", g)
	}
	list, err := env.Admin().List(context.Background())
	if err != nil || len(list.Actions) != 1 || list.Actions[0].Fingerprint != fp || list.Actions[0].SinceMs != clock.Now().UnixMilli() {
		t.Errorf("list = %+v %v", list, err)
	}
}

// TestGiveUpRecordsWithoutAsking: when the stage gives up on a poll (its
// store or stream kept failing), the attempt is recorded as RECONCILE_ERROR
// without asking the provider, and the next poll is scheduled.
func TestGiveUpRecordsWithoutAsking(t *testing.T) {
	env, clock := start(t)
	fake := env.Fakes["demo"]
	timeoutDispatch(fake)
	asked := script(fake, reply("confirmed"))
	fp := propose(t, env, clock, "prop-g")
	env.Recorder.Wait(t, "prop-g", last(schema.KindReconciliationRequired))
	p := env.Processor()
	st := &reconciliation.Stage{
		Journal: pebble.NewJournal(p.Store()), Adapters: map[string]reconciliation.Adapter{"demo": fake}, Clock: clock,
		Route:   stages.Route{Subjects: env.Subjects, Self: subjects.StageReconciliation},
		Metrics: p.Metrics(), MaxAttempts: maxAttempts, Interval: interval,
	}
	in := &stages.Input{
		Subject: env.Subjects.Stage(subjects.StageReconciliation, subjects.KindTimer, fingerprint.Key(fp)),
		Data:    schema.MustMarshal(kv.Trigger{Fingerprint: fp, Attempt: 1}),
	}
	res, err := st.GiveUp(context.Background(), in, stages.ErrRetriesExhausted)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outcomes) != 1 || !sameStrings(incidents(res.Outcomes[0]), "reconciliation/RECONCILE_ERROR") || len(asked.requests()) != 0 {
		t.Fatalf("give-up result = %+v", res.Outcomes)
	}
	rec, _, _ := pebble.NewJournal(p.Store()).Load(fp)
	if rec.ReconcileAttempt != 1 || rec.ReconcileNextAtMs != clock.Now().Add(Backoff(2)).UnixMilli() {
		t.Errorf("intent = %+v", rec)
	}
	if attempts(env, metrics.AttemptError) != 1 {
		t.Errorf("error attempts = %v", attempts(env, metrics.AttemptError))
	}
	// Handling the same trigger now finds it finished and asks nobody.
	if _, err := st.Handle(context.Background(), in); err != nil || len(asked.requests()) != 0 {
		t.Fatalf("replayed trigger: %v, asked %d", err, len(asked.requests()))
	}
	bad := &stages.Input{Subject: in.Subject, Data: []byte(`{"fingerprint":"x"}`)}
	if _, err := st.Handle(context.Background(), bad); !errors.Is(err, stages.ErrPermanent) {
		t.Errorf("malformed trigger: %v", err)
	}
	if res, err := st.GiveUp(context.Background(), bad, err); err != nil || len(res.Events) != 1 || res.Events[0].Code != schema.CodeProcessingFailed {
		t.Errorf("malformed give-up = %+v %v", res, err)
	}
	// The poll the give-up scheduled asks the provider with the next id.
	clock.Advance(Backoff(2))
	env.Recorder.Wait(t, "prop-g", last(schema.KindConfirmed))
	if got := ids(asked.requests()); !sameStrings(got, kv.AttemptID(fp, 2)) {
		t.Errorf("attempt ids = %v", got)
	}
}
