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
	// hold, when set, keeps each message until it is closed.
	hold chan struct{}
	mu   sync.Mutex
	seen []string
}

func (a *audit) Handle(ctx context.Context, in *stages.Input) (stages.Result, error) {
	_, _, token, ok := a.route.Subjects.ParseStage(in.Subject)
	if !ok {
		return stages.Result{}, stages.ErrPermanent
	}
	a.mu.Lock()
	a.seen = append(a.seen, token)
	a.mu.Unlock()
	if a.hold != nil {
		select {
		case <-a.hold:
		case <-ctx.Done():
			return stages.Result{}, ctx.Err()
		}
	}
	return stages.Result{Next: []stages.Message{{Subject: a.route.HandOff(token), Data: in.Data}}}, nil
}

func (a *audit) GiveUp(context.Context, *stages.Input, error) (stages.Result, error) {
	return stages.Result{}, nil
}

// auditPhase is the sixth stage's phase of its own: not one of the closed
// phases (the code table's), so the stage gives the rows its runner needs
// (engine.Spec.Codes).
const auditPhase schema.Phase = "audit"

func auditLine(a *audit) engine.Spec {
	return engine.Spec{Name: "audit", Phase: auditPhase,
		Codes: []schema.CodeInfo{
			{Phase: auditPhase, Code: schema.CodeProcessingFailed, Kind: schema.KindIntegrationFailure, Boundary: schema.BoundaryNotInvoked},
			{Phase: auditPhase, Code: schema.CodeInternalMessageRejected, Boundary: schema.BoundaryNotInvoked},
		},
		New: func(_ *engine.Parts, r stages.Route) (stages.Handler, error) {
			a.route = r
			return a, nil
		}}
}

// TestSixthStage inserts a stage with a phase of its own between
// authorization and dispatch with one table line: it gets its stream, its
// consumer, its metric series and every authorized proposal, Quiesce waits
// for it, and proposals still end where they did.
func TestSixthStage(t *testing.T) {
	a := &audit{hold: make(chan struct{})}
	env := testenv.New(t, testenv.WithEngine(func(o *engine.Options) {
		o.Pipeline = engine.InsertBefore(engine.Pipeline(), subjects.StageDispatch, auditLine(a))
	}))
	if cs := env.StageConsumers(); !slices.ContainsFunc(cs, func(c testenv.StageConsumer) bool { return c.Stream == env.Subjects.StageStream("audit") }) {
		t.Fatalf("Quiesce does not wait on the sixth stage: it reads %v", cs)
	}
	env.PublishSigned(t, testenv.Granted(t, testenv.Lumber("six-1"), "sku-1001", time.Now()), env.Host)
	// While the sixth stage holds the proposal, Quiesce does not return,
	// and names it.
	testenv.WaitFor(t, "the sixth stage holding the proposal", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.seen) > 0
	})
	if msg := env.QuiesceFailure(2 * time.Second); !strings.Contains(msg, "consumer audit") {
		t.Fatalf("Quiesce with the sixth stage holding a message reported %q", msg)
	}
	close(a.hold)
	// No Recorder.Wait: Quiesce alone sees the proposal through the
	// sixth stage to its outcome.
	env.Quiesce(t)
	if outs := env.Recorder.Outcomes("six-1"); len(outs) != 1 || outs[0].Kind != schema.KindConfirmed {
		t.Fatalf("after Quiesce: outcomes %+v, want one CONFIRMED", outs)
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
	// the table — its consumer's, and its own phase's incident codes.
	want := len(engine.Consumers(env.Subjects, env.Config, engine.Pipeline(), nil)) + 1
	if n := testutil.CollectAndCount(m.ConsumerPending); n != want {
		t.Errorf("%d consumer pending series, want %d", n, want)
	}
	if n := testutil.CollectAndCount(m.Incidents); n != len(schema.Codes())+2 {
		t.Errorf("%d incident series, want the code table's %d and the sixth stage's 2", n, len(schema.Codes()))
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
		"no phase": func(p []engine.Spec) []engine.Spec {
			return engine.InsertBefore(p, subjects.StageDispatch, engine.Spec{Name: "audit", New: noop})
		},
		// Without its rows, the runner's first unsealed input would panic
		// in schema.NewIncident.
		"phase without codes": func(p []engine.Spec) []engine.Spec {
			return engine.InsertBefore(p, subjects.StageDispatch, engine.Spec{Name: "audit", Phase: auditPhase, New: noop})
		},
		"phase without INTERNAL_MESSAGE_REJECTED": func(p []engine.Spec) []engine.Spec {
			s := auditLine(&audit{})
			s.Codes = s.Codes[:1]
			return engine.InsertBefore(p, subjects.StageDispatch, s)
		},
		"closed phase without its codes": func(p []engine.Spec) []engine.Spec {
			// Disclosure has neither code: it is no stage's phase today.
			return engine.InsertBefore(p, subjects.StageDispatch, engine.Spec{Name: "audit", Phase: schema.PhaseDisclosure, New: noop})
		},
		"codes for a closed phase": func(p []engine.Spec) []engine.Spec {
			s := auditLine(&audit{})
			s.Phase = schema.PhaseDispatch
			return engine.InsertBefore(p, subjects.StageDispatch, s)
		},
		"codes of another phase": func(p []engine.Spec) []engine.Spec {
			s := auditLine(&audit{})
			s.Codes[1].Phase = "elsewhere"
			return engine.InsertBefore(p, subjects.StageDispatch, s)
		},
		"parks without timers": func(p []engine.Spec) []engine.Spec { p[2].Scheduled = false; return p },
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
