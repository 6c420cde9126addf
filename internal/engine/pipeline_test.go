package engine_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// audit is a throwaway sixth stage: it notes every proposal it sees and
// hands it on unchanged. Nothing else in the repository knows it.
type audit struct {
	route stages.Route
	mu    sync.Mutex
	seen  []string
}

func (a *audit) Handle(_ context.Context, in *stages.Input) (stages.Result, error) {
	_, _, token, ok := a.route.Subjects.ParseStage(in.Subject)
	if !ok {
		return stages.Result{}, stages.ErrPermanent
	}
	a.mu.Lock()
	a.seen = append(a.seen, token)
	a.mu.Unlock()
	return stages.Result{Next: []stages.Message{{Subject: a.route.HandOff(token), Data: in.Data}}}, nil
}

func (a *audit) GiveUp(context.Context, *stages.Input, error) (stages.Result, error) {
	return stages.Result{}, nil
}

// TestSixthStage inserts a stage between authorization and dispatch with
// one table line: it gets its stream, its consumer, its metric series and
// every authorized proposal, and proposals still end where they did.
func TestSixthStage(t *testing.T) {
	a := &audit{}
	line := engine.Spec{Name: "audit", Phase: schema.PhaseAuthorization, New: func(_ *engine.Parts, r stages.Route) (stages.Handler, error) {
		a.route = r
		return a, nil
	}}
	env := testenv.New(t, testenv.WithEngine(func(o *engine.Options) {
		o.Pipeline = engine.InsertBefore(engine.Pipeline(), subjects.StageDispatch, line)
	}))
	env.PublishSigned(t, testenv.Granted(t, testenv.Lumber("six-1"), "sku-1001", time.Now()), env.Host)
	if o := env.Recorder.Wait(t, "six-1", testenv.Terminal); o.Kind != schema.KindConfirmed {
		t.Fatalf("outcome %+v", o)
	}
	a.mu.Lock()
	seen := slices.Clone(a.seen)
	a.mu.Unlock()
	if want := []string{testenv.HostName + ".six-1"}; !slices.Equal(seen, want) {
		t.Errorf("the sixth stage saw %v, want %v", seen, want)
	}
	if _, err := env.Processor().StreamInfo(context.Background(), env.Subjects.StageStream("audit")); err != nil {
		t.Errorf("no stream for the sixth stage: %v", err)
	}
	m := env.Processor().Metrics()
	if v := testutil.ToFloat64(m.StageMessages.WithLabelValues("audit", "forwarded")); v != 1 {
		t.Errorf("audit forwarded = %v", v)
	}
	// A stage that is not in the table has no series: pre-creation read
	// the table.
	want := len(engine.Consumers(env.Subjects, env.Config, engine.Pipeline(), nil)) + 1
	if n := testutil.CollectAndCount(m.ConsumerPending); n != want {
		t.Errorf("%d consumer pending series, want %d", n, want)
	}
}

func TestInsertBefore(t *testing.T) {
	p := engine.InsertBefore(engine.Pipeline(), subjects.StageDispatch, engine.Spec{Name: "audit"})
	var order []string
	for _, s := range p {
		order = append(order, s.Name+">"+s.Next)
	}
	want := "admission>grounding grounding>authorization authorization>audit grants>audit audit>dispatch dispatch>reconciliation reconciliation>"
	if got := strings.Join(order, " "); got != want {
		t.Errorf("pipeline %s, want %s", got, want)
	}
	if engine.Pipeline()[2].Next != subjects.StageDispatch {
		t.Error("InsertBefore changed the table it was given")
	}
}

// TestBadPipelines: a table the processor cannot run is refused at start.
func TestBadPipelines(t *testing.T) {
	noop := func(*engine.Parts, stages.Route) (stages.Handler, error) { return &audit{}, nil }
	for name, edit := range map[string]func([]engine.Spec) []engine.Spec{
		"duplicate name": func(p []engine.Spec) []engine.Spec { return append(p, engine.Spec{Name: "dispatch", New: noop}) },
		"unknown next":   func(p []engine.Spec) []engine.Spec { p[0].Next = "nowhere"; return p },
		"bad name":       func(p []engine.Spec) []engine.Spec { return append(p, engine.Spec{Name: "Audit.x", New: noop}) },
		"no constructor": func(p []engine.Spec) []engine.Spec { return append(p, engine.Spec{Name: "audit"}) },
		"grants elsewhere": func(p []engine.Spec) []engine.Spec {
			p[3].Next = subjects.StageReconciliation
			return p
		},
	} {
		t.Run(name, func(t *testing.T) {
			// Refused before anything starts: no server, no port, no store.
			_, err := engine.Start(context.Background(), engine.Options{Config: config.Dev(t.TempDir()), Pipeline: edit(engine.Pipeline())})
			if err == nil || !strings.Contains(err.Error(), "pipeline") {
				t.Errorf("start = %v", err)
			}
		})
	}
}
