package reconciliation_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is the manual clock's start.
var t0 = time.UnixMilli(1_764_424_800_000)

const (
	interval    = 5 * time.Second
	maxAttempts = 3
)

// start runs a processor on a manual clock with reconciliation every
// interval (doubling) for at most maxAttempts polls.
func start(t *testing.T, opts ...testenv.Option) (*testenv.Env, *stages.ManualClock) {
	t.Helper()
	clock := stages.NewManualClock(t0)
	opts = append([]testenv.Option{testenv.WithClock(clock), testenv.WithConfig(func(c *config.Config) {
		c.Reconciliation.Interval = interval
		c.Reconciliation.MaxAttempts = maxAttempts
	})}, opts...)
	return testenv.New(t, opts...), clock
}

// lumber is the lumber fixture for provider "demo" with an inline manual
// grant bound to its real fingerprint, and that fingerprint.
func lumber(t *testing.T, clock stages.Clock, pid string) (map[string]any, string) {
	t.Helper()
	return lumberWith(t, clock, pid, nil)
}

// lumberWith is lumber with the fixture edited first.
func lumberWith(t *testing.T, clock stages.Clock, pid string, edit func(m map[string]any)) (map[string]any, string) {
	t.Helper()
	m := testenv.Lumber(pid)
	if edit != nil {
		edit(m)
	}
	m = testenv.Granted(t, m, "sku-1001", clock.Now())
	return m, testenv.FingerprintOf(t, m, "sku-1001")
}

// propose publishes the signed lumber proposal pid and returns its fingerprint.
func propose(t *testing.T, env *testenv.Env, clock stages.Clock, pid string) string {
	t.Helper()
	m, fp := lumber(t, clock, pid)
	env.PublishSigned(t, m, env.Host)
	return fp
}

// kindIs is met once the proposal's latest outcome has this kind.
func last(kind schema.Kind) testenv.Cond {
	return func(outs []schema.Outcome) bool { return outs[len(outs)-1].Kind == kind }
}

// nth is met once the proposal has n outcomes.
func nth(n int) testenv.Cond { return testenv.Count(n) }

func gauge(t *testing.T, env *testenv.Env) float64 {
	t.Helper()
	return testutil.ToFloat64(env.Processor().Metrics().Indeterminate)
}

// exhaustedGauge is actions_indeterminate_exhausted as a scrape reads it.
func exhaustedGauge(env *testenv.Env) float64 {
	return testutil.ToFloat64(env.Processor().Metrics().IndeterminateExhausted)
}

func attempts(env *testenv.Env, status string) float64 {
	return testutil.ToFloat64(env.Processor().Metrics().ReconcileAttempts.WithLabelValues("demo", status))
}

// activityOf returns the fingerprint's snapshot once the pipeline is idle
// (a stage writes it after publishing its outcome, before it acks), and
// fails unless ok holds for it.
func activityOf(t *testing.T, env *testenv.Env, fp string, ok func(a *schema.Activity) bool) *schema.Activity {
	t.Helper()
	env.Quiesce(t)
	a, err := env.Processor().Activity().Get(context.Background(), fp)
	if err != nil {
		t.Fatalf("activity of %s: %v", fp, err)
	}
	if !ok(a) {
		t.Fatalf("activity of %s does not match: %+v", fp, a)
	}
	return a
}

// seen records the reconcile requests a fake received.
type seen struct {
	ch chan schema.ReconcileRequest
}

// script makes the fake's reconcile answer from answers in turn (the last
// repeats), recording every request.
func script(f *adapters.Fake, answers ...func() (schema.AdapterReply, error)) *seen {
	s := &seen{ch: make(chan schema.ReconcileRequest, 64)}
	n := 0
	f.OnReconcile(func(_ context.Context, req schema.ReconcileRequest) (schema.AdapterReply, error) {
		s.ch <- req
		a := answers[min(n, len(answers)-1)]
		n++
		return a()
	})
	return s
}

// requests drains what was seen so far.
func (s *seen) requests() []schema.ReconcileRequest {
	var out []schema.ReconcileRequest
	for {
		select {
		case r := <-s.ch:
			out = append(out, r)
		default:
			return out
		}
	}
}

func ids(rs []schema.ReconcileRequest) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.AttemptID)
	}
	return out
}

func reply(outcome string) func() (schema.AdapterReply, error) {
	return func() (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: outcome, ProviderActionID: "prov:order-77", EvidenceRefs: []string{"prov:orders/77"}}, nil
	}
}

func fail(err error) func() (schema.AdapterReply, error) {
	return func() (schema.AdapterReply, error) { return schema.AdapterReply{}, err }
}

// timeoutDispatch makes every dispatch of the fake time out after reaching it.
func timeoutDispatch(f *adapters.Fake) {
	f.OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{}, adapters.ErrTimeout
	})
}

func incidents(o schema.Outcome) []string {
	var out []string
	for _, i := range o.Incidents {
		out = append(out, string(i.Phase)+"/"+string(i.Code))
	}
	return out
}

func sameStrings(a []string, b ...string) bool { return slices.Equal(a, b) }
