package stages_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
)

// receiptOutcome is an outcome of kind for proposal pid reporting receipt
// id, recorded at ms.
func receiptOutcome(pid string, kind schema.Kind, id string, ms int64) schema.Outcome {
	fp := "sha256:" + strings.Repeat("ab", 32)
	o := schema.NewOutcome(schema.ProposalRef{Host: testenv.HostName, ProposalID: pid}, kind, ms)
	o.Fingerprint, o.Referent = &fp, schema.StringPtr("sku-1")
	status, next := schema.StatusConfirmed, schema.NextNone
	if kind == schema.KindReconciliationRequired {
		status, next = schema.StatusReconciliationRequired, schema.NextReconcile
		o.Incidents = []schema.Incident{schema.NewIncident(schema.PhaseDispatch, schema.CodeAdapterTimeout)}
	}
	o.Receipt = &schema.Receipt{ReceiptID: id, Fingerprint: fp, IdempotencyKey: fp[7:], Provider: "demo", Capability: "inventory.adjust",
		Operation: "adjust_stock", Environment: "test", Adapter: "fake", Status: status, DispatchAttempted: true, NextAction: next,
		EvidenceRefs: []string{}, RecordedAtMs: ms}
	if status == schema.StatusReconciliationRequired {
		o.Receipt.ErrorCode = string(schema.CodeAdapterTimeout)
	}
	return o
}

// stored is every outcome the rig's outcome stream holds for pid, in order.
func (r *rig) stored(t *testing.T, pid string) []schema.Outcome {
	t.Helper()
	ctx := context.Background()
	c, err := r.js.OrderedConsumer(ctx, r.subj.OutcomesStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{r.subj.Outcome(testenv.HostName, pid)}})
	if err != nil {
		t.Fatal(err)
	}
	var out []schema.Outcome
	for {
		m, err := c.Next(jetstream.FetchMaxWait(200 * time.Millisecond))
		if err != nil {
			return out
		}
		var o schema.Outcome
		if err := schema.Decode(m.Data(), &o); err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
}

func kinds(outs []schema.Outcome) []schema.Kind {
	var k []schema.Kind
	for _, o := range outs {
		k = append(k, o.Kind)
	}
	return k
}

// A redelivered input that decides something else than it did (the record
// moved on since) publishes its new answer: the outcome's message id says
// what it says, so the stream does not drop it as a duplicate of the
// first answer (found by internal/sim, seed 6714: a proposal ended at
// dispatch's re-check after its RECONCILIATION_REQUIRED never heard its
// end). The same decision again is a duplicate.
func TestRunnerPublishesARedeliveredInputsNewAnswer(t *testing.T) {
	r := newRig(t)
	r.run(t, funcHandler{handle: func(_ context.Context, in *stages.Input) (stages.Result, error) {
		switch in.Delivered {
		case 1, 2:
			return stages.Result{Outcomes: []schema.Outcome{receiptOutcome("p-1", schema.KindReconciliationRequired, "r1", 10+int64(in.Delivered))},
				RetryAfter: 10 * time.Millisecond}, nil
		}
		return stages.Result{Outcomes: []schema.Outcome{receiptOutcome("p-1", schema.KindConfirmed, "r2", 20)}}, nil
	}}, stages.RunnerConfig{})
	r.publish(t, "in.1", "p-1")
	r.rec.Wait(t, "p-1", testenv.Terminal)
	r.quiesce(t)
	if got := kinds(r.stored(t, "p-1")); len(got) != 2 || got[0] != schema.KindReconciliationRequired || got[1] != schema.KindConfirmed {
		t.Errorf("stored %v, want the first answer once, then the new one", got)
	}
}

// A stage's stale outcome (decided on a record that has moved on) is not
// published after a newer one on its subject, stored or live, whether the
// runner knew the subject's last message (it published it) or learnt it
// from the stream's refusal (another processor did).
func TestRunnerPublishesOutcomesInOrder(t *testing.T) {
	r := newRig(t)
	confirmed := receiptOutcome("p-1", schema.KindConfirmed, "r2", 20)
	stale := receiptOutcome("p-1", schema.KindReconciliationRequired, "r1", 10)
	r.run(t, funcHandler{handle: func(_ context.Context, in *stages.Input) (stages.Result, error) {
		switch string(in.Data) {
		case "confirmed":
			return stages.Result{Outcomes: []schema.Outcome{confirmed}}, nil
		case "stale":
			return stages.Result{Outcomes: []schema.Outcome{stale}}, nil
		case "replay":
			return stages.Result{Replayed: []schema.Outcome{stale}}, nil
		}
		return stages.Result{}, nil
	}}, stages.RunnerConfig{})
	r.publish(t, "in.1", "confirmed")
	r.rec.Wait(t, "p-1", testenv.Terminal)
	r.publish(t, "in.2", "stale") // known stale: the runner published CONFIRMED
	r.quiesce(t)
	// Another processor's CONFIRMED: this runner learns of it when the
	// stream refuses its stale outcome.
	other := receiptOutcome("p-2", schema.KindConfirmed, "r2", 20)
	m := nats.NewMsg(r.subj.OutcomeRecord(testenv.HostName, "p-2"))
	m.Data = schema.MustMarshal(other)
	if _, err := r.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	r.rec.Wait(t, "p-2", testenv.Terminal)
	stale2 := stale
	stale2.ProposalID = "p-2"
	r.run(t, funcHandler{handle: func(context.Context, *stages.Input) (stages.Result, error) {
		return stages.Result{Outcomes: []schema.Outcome{stale2}}, nil
	}}, stages.RunnerConfig{})
	r.publish(t, "in.3", "p-2")
	r.quiesce(t)
	for _, pid := range []string{"p-1", "p-2"} {
		if got := kinds(r.stored(t, pid)); len(got) != 1 || got[0] != schema.KindConfirmed {
			t.Errorf("%s stored %v, want CONFIRMED alone", pid, got)
		}
		if got := kinds(r.rec.Outcomes(pid)); len(got) != 1 || got[0] != schema.KindConfirmed {
			t.Errorf("%s live %v, want CONFIRMED alone", pid, got)
		}
	}
	if o, found, err := r.store.LastOutcome(schema.ProposalRef{Host: testenv.HostName, ProposalID: "p-1"}); err != nil || !found || o.Kind != schema.KindConfirmed {
		t.Errorf("recorded %s %v %v, want CONFIRMED", o.Kind, found, err)
	}
}

// A repeat's replay of a stale recorded outcome republishes the subject's
// latest truth instead, once per window: a second repeat in the window is
// a duplicate the stream drops, stored and live.
func TestRunnerReplaysTheLatest(t *testing.T) {
	r := newRig(t)
	confirmed := receiptOutcome("p-1", schema.KindConfirmed, "r2", 20)
	m := nats.NewMsg(r.subj.OutcomeRecord(testenv.HostName, "p-1"))
	m.Data = schema.MustMarshal(confirmed)
	if _, err := r.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	r.run(t, funcHandler{handle: func(context.Context, *stages.Input) (stages.Result, error) {
		return stages.Result{Replayed: []schema.Outcome{receiptOutcome("p-1", schema.KindReconciliationRequired, "r1", 10)}}, nil
	}}, stages.RunnerConfig{})
	for i := range 3 {
		r.publish(t, "in."+strconv.Itoa(i), "repeat")
	}
	r.quiesce(t)
	got := r.stored(t, "p-1")
	if k := kinds(got); len(k) != 2 || k[0] != schema.KindConfirmed || k[1] != schema.KindConfirmed || got[1].Receipt.ReceiptID != "r2" {
		t.Errorf("stored %v, want CONFIRMED and one replay of it", k)
	}
	if k := kinds(r.rec.Outcomes("p-1")); len(k) != 2 {
		t.Errorf("live %v, want CONFIRMED and one replay of it", k)
	}
}

// LastOutcomes only advances (a read older than what is known is
// ignored), forgets on request, and stays bounded.
func TestLastOutcomes(t *testing.T) {
	l := stages.NewLastOutcomes(4)
	ref := func(i int) schema.ProposalRef {
		return schema.ProposalRef{Host: "h", ProposalID: "p-" + strconv.Itoa(i)}
	}
	l.Put(ref(1), stages.Known{Found: true, Seq: 9})
	l.Put(ref(1), stages.Known{Found: true, Seq: 5}) // a replica behind
	if k := l.Get(ref(1)); k.Seq != 9 {
		t.Errorf("after an older read: %+v, want 9", k)
	}
	l.Forget(ref(1))
	if k := l.Get(ref(1)); k.Found {
		t.Errorf("forgotten: %+v", k)
	}
	for i := range 100 {
		l.Put(ref(i), stages.Known{Found: true, Seq: uint64(i + 1)})
	}
	known := 0
	for i := range 100 {
		if l.Get(ref(i)).Found {
			known++
		}
	}
	if known > 4 || !l.Get(ref(99)).Found {
		t.Errorf("%d subjects remembered of 100 with room for 4; the latest remembered: %v", known, l.Get(ref(99)).Found)
	}
}

// PublishAfter and ReplayLast decide from what is known of a subject.
func TestPublishAfter(t *testing.T) {
	stale, confirmed := receiptOutcome("p", schema.KindReconciliationRequired, "r1", 10), receiptOutcome("p", schema.KindConfirmed, "r2", 20)
	if ok, e := stages.PublishAfter(stale.Standing(), stages.Known{}); !ok || e != 0 {
		t.Errorf("on an unknown subject: %v %d, want published expecting it empty", ok, e)
	}
	last := stages.Known{Found: true, Seq: 7, Standing: confirmed.Standing()}
	if ok, _ := stages.PublishAfter(stale.Standing(), last); ok {
		t.Error("a stale outcome published after CONFIRMED")
	}
	if ok, e := stages.PublishAfter(confirmed.Standing(), stages.Known{Found: true, Seq: 3, Standing: stale.Standing()}); !ok || e != 3 {
		t.Errorf("CONFIRMED after the stale one: %v %d", ok, e)
	}
	if !stages.ReplayLast(stale.Standing(), last) || stages.ReplayLast(confirmed.Standing(), stages.Known{Found: true, Standing: stale.Standing()}) {
		t.Error("a replay does not republish the latest of the two")
	}
}
