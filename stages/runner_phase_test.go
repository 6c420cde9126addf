package stages_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/portcullis/portcullis/internal/testenv"
	kvjs "github.com/portcullis/portcullis/kv/jetstream"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
)

// A runner whose phase is not a closed one (a test's stage: engine.Spec
// Codes) reports an unsealed input with its own INTERNAL_MESSAGE_REJECTED
// row instead of panicking in schema.NewIncident. (No Recorder here: such
// an event is, rightly, not a valid wire message.)
func TestRunnerRejectsInAPhaseOfItsOwn(t *testing.T) {
	const phase schema.Phase = "audit"
	s := testenv.StartServer(t, "")
	js, err := jetstream.New(testenv.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	// newRig for its sealer, store and metrics only: its Recorder, which
	// validates every event against the closed sets, is on another server.
	r := newRig(t)
	ctx := context.Background()
	for _, sc := range []jetstream.StreamConfig{
		{Name: "IN", Subjects: []string{"in.>"}},
		{Name: r.subj.IncidentsStream(), Subjects: []string{r.subj.Incidents()}},
	} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	var handled atomic.Int64
	runner := stages.NewRunner(stages.RunnerConfig{Stage: "audit", Stream: "IN", FilterSubject: "in.>", Internal: true, Phase: phase,
		Codes: []schema.CodeInfo{{Phase: phase, Code: schema.CodeInternalMessageRejected, Boundary: schema.BoundaryUnknown}}},
		stages.Deps{JS: js, Seal: r.seal, Subjects: r.subj, Metrics: r.metrics, Outcomes: r.store, Clock: stages.SystemClock{},
			History: &kvjs.OutcomeHistory{JS: js, Subjects: r.subj}},
		funcHandler{handle: func(context.Context, *stages.Input) (stages.Result, error) {
			handled.Add(1)
			return stages.Result{}, nil
		}})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runner.Run(runCtx, context.Background()) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runner: %v", err)
		}
	})
	testenv.WaitFor(t, "the runner consuming", runner.Consuming)
	if _, err := js.Publish(ctx, "in.forged", []byte("forged")); err != nil {
		t.Fatal(err)
	}
	testenv.QuiesceConsumers(t, js, nil, testenv.StageConsumer{Name: "audit", Stream: "IN"})
	st, err := js.Stream(ctx, r.subj.IncidentsStream())
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, r.subj.Incident(string(phase)))
	if err != nil {
		t.Fatalf("no event of phase %s: %v", phase, err)
	}
	var e schema.IncidentEvent
	if err := json.Unmarshal(m.Data, &e); err != nil {
		t.Fatal(err)
	}
	// The boundary is the row's (unknown), not one a closed phase has.
	if e.Phase != phase || e.Code != schema.CodeInternalMessageRejected || e.DispatchBoundary != schema.BoundaryUnknown {
		t.Errorf("event %+v", e)
	}
	if n := handled.Load(); n != 0 {
		t.Errorf("handler ran %d times", n)
	}
	// Counted just after the ack.
	rejected := r.metrics.StageMessages.WithLabelValues("audit", metrics.ResultRejected)
	testenv.WaitFor(t, "the rejection counted", func() bool { return testutil.ToFloat64(rejected) >= 1 })
	if v := testutil.ToFloat64(rejected); v != 1 {
		t.Errorf("rejected = %v", v)
	}
}
