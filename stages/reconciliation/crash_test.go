package reconciliation_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/fault"
)

// TestCrashDuringAttempt SIGKILLs a real processor in the middle of a
// reconciliation attempt — after its checkpoint, and after the provider's
// reply — and checks after a restart that the provider never sees an
// attempt id twice, never sees a second dispatch, and the effect is settled
// by the next attempt.
func TestCrashDuringAttempt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a processor binary")
	}
	cases := []struct {
		point string
		// seen are the attempts the provider is asked: the interrupted one
		// only if the crash came after it was asked.
		seen []int
	}{
		{fault.ReconcileAfterCheckpoint, []int{2}},
		{fault.ReconcileAfterReply, []int{1, 2}},
	}
	for _, c := range cases {
		t.Run(c.point, func(t *testing.T) {
			env := testenv.New(t, testenv.NotStarted(), testenv.WithConfig(func(cfg *config.Config) {
				cfg.Reconciliation.Interval = 200 * time.Millisecond
				cfg.Reconciliation.MaxAttempts = 5
				for i := range cfg.Providers {
					if cfg.Providers[i].Name == "inventory" {
						cfg.Providers[i].Timeout = 300 * time.Millisecond
					}
				}
			}))
			// The provider connector, outside the processor: it outlives
			// the crash and counts what really reached it.
			conn := adapters.NewFake("inventory", adapters.FakeScript{})
			conn.OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
				return schema.AdapterReply{}, adapters.ErrTimeout // no answer: the processor times out
			})
			asked := script(conn, reply("confirmed"))
			stop, err := conn.Serve(env.NC, env.Subjects)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(stop)

			p := testenv.StartProcess(t, env.Config, fault.Env+"="+c.point)
			p.WaitLog(t, "processor started")
			m, fp := lumberWith(t, stages.SystemClock{}, "prop-crash", func(m map[string]any) {
				testenv.Set(m, "intent.provider", "inventory")
			})
			env.PublishSigned(t, m, env.Host)
			if !p.Wait(60 * time.Second) {
				t.Fatal("the processor did not reach the fault point")
			}
			if !p.Killed() {
				t.Fatalf("processor exited without SIGKILL (code %d):\n%s", p.ExitCode(), p.Logs.Bytes())
			}
			p2 := testenv.StartProcess(t, env.Config)
			p2.WaitLog(t, "processor started")

			// The unacked trigger comes back after the consumer's ack wait.
			outs := waitOutcomes(t, env, "prop-crash", func(o schema.Outcome) bool { return o.Kind == schema.KindConfirmed })
			got := outs[len(outs)-1]
			if got.Receipt.Reconciliation == nil || got.Receipt.Reconciliation.AttemptID != kv.AttemptID(fp, 2) {
				t.Errorf("confirmation receipt = %+v", got.Receipt)
			}
			var interrupted *schema.Outcome
			for i := range outs {
				if r := outs[i].Receipt; r != nil && r.Reconciliation != nil && r.Reconciliation.AttemptID == kv.AttemptID(fp, 1) {
					interrupted = &outs[i]
				}
			}
			if interrupted == nil || !sameStrings(incidents(*interrupted), "reconciliation/RECONCILE_ERROR") {
				t.Errorf("the interrupted attempt was not recorded as RECONCILE_ERROR: %+v", outs)
			}
			var want []string
			for _, n := range c.seen {
				want = append(want, kv.AttemptID(fp, n))
			}
			if got := ids(asked.requests()); !sameStrings(got, want...) {
				t.Errorf("the provider was asked %v, want %v", got, want)
			}
			if n := conn.Dispatches(); n != 1 {
				t.Errorf("dispatches = %d, want 1", n)
			}
			p2.Terminate()
			if !p2.Wait(30*time.Second) || p2.ExitCode() != 0 {
				t.Errorf("graceful stop: exit %d\n%s", p2.ExitCode(), p2.Logs.Bytes())
			}
		})
	}
}

// waitOutcomes waits (generously: a redelivery after a crash waits for the
// consumer's ack wait) until an outcome of the proposal satisfies ok.
func waitOutcomes(t *testing.T, env *testenv.Env, pid string, ok func(schema.Outcome) bool) []schema.Outcome {
	t.Helper()
	return env.Recorder.WaitAllWithin(t, pid, func(outs []schema.Outcome) bool { return slices.ContainsFunc(outs, ok) }, 90*time.Second)
}
