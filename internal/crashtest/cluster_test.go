package crashtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/history"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/fault"
)

// EnvLong runs the long versions of the cluster crash tests: every kill
// point, with and without losing the store directory, and a longer burst.
const EnvLong = "PORTCULLIS_LONG"

func long(t *testing.T) bool {
	t.Helper()
	return os.Getenv(EnvLong) != ""
}

// farSide is the provider "inventory" as its connector sees it, served from
// the test process (it outlives every processor): it counts dispatches per
// idempotency key and queries per reconciliation attempt id, and answers a
// reconcile with the truth.
type farSide struct {
	*adapters.Fake
	env *testenv.Env
	rec *history.Recorder // the run's history (recorded_test.go)
}

func serveFarSide(t *testing.T, env *testenv.Env) *farSide {
	t.Helper()
	f := &farSide{Fake: adapters.NewFake("inventory", adapters.FakeScript{}), env: env, rec: history.NewRecorder()}
	f.rec.ObserveFake(f.Fake)
	f.OnReconcile(func(_ context.Context, req schema.ReconcileRequest) (schema.AdapterReply, error) {
		if f.DeliveredFor(req.IdempotencyKey) > 0 {
			return schema.AdapterReply{Outcome: schema.ReplyConfirmed}, nil
		}
		return schema.AdapterReply{Outcome: schema.ReplyFailedBeforeDispatch}, nil
	})
	nc := env.NC
	if env.Auth {
		nc = env.ConnectAs(t, env.Connector) // the connector's own login
	}
	stop, err := f.Serve(nc, env.Subjects)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return f
}

// node is one processor binary of a cluster deployment: its configuration
// (own store.dir, shared key file) and its current process.
type node struct {
	cfg  *config.Config
	p    *testenv.Process
	past []*testenv.Process // the processes before p, for their logs
	// in runs the processor inside a network namespace
	// (partition.Node.Exec); nil: in the test's.
	in []string
}

func (n *node) start(t *testing.T, env ...string) {
	t.Helper()
	if n.p != nil {
		n.past = append(n.past, n.p)
	}
	n.p = testenv.StartProcessIn(t, n.in, n.cfg, env...)
	n.p.WaitLog(t, "processor started")
}

func (n *node) stop(t *testing.T) {
	t.Helper()
	n.p.Terminate()
	if !n.p.Wait(30*time.Second) || n.p.ExitCode() != 0 {
		t.Errorf("graceful stop: exit %d\n%s", n.p.ExitCode(), n.p.Logs.Bytes())
	}
}

// caseName names a kill case: its crash point, and "/store-lost" when
// the killed processor's store.dir goes with it.
func caseName(point string, lose bool) string {
	if lose {
		return point + "/store-lost"
	}
	return point
}

// pair is two processors, a and b, with their own store dirs on env.
func pair(t *testing.T, env *testenv.Env) (a, b *node) {
	return &node{cfg: env.ProcessorConfig(t, "a")}, &node{cfg: env.ProcessorConfig(t, "b")}
}

// SIGKILL a processor of two on a three-server cluster at a boundary of
// SPEC §6 dispatch — with its store directory kept, or lost — while
// another processor runs; restart it; send a second proposal of the same
// intent. The provider saw the intent at most once (exactly as often as
// it did before the kill), every attempt id was queried once, and both
// proposals end with the truth reconciliation finds.
func TestClusterKillMidDispatch(t *testing.T) {
	type killCase struct {
		point     string
		lose      bool // delete the killed processor's store.dir
		delivered int  // times the provider receives the intent, in the end
		final     schema.Kind
	}
	cases := []killCase{
		{fault.DispatchAfterInFlight, true, 1, schema.KindConfirmed}, // lost in flight: sent again
		{fault.DispatchAfterReply, false, 1, schema.KindConfirmed},
	}
	if long(t) {
		cases = append(cases, killCase{fault.DispatchAfterInFlight, false, 1, schema.KindConfirmed},
			killCase{fault.DispatchAfterReply, true, 1, schema.KindConfirmed})
		for _, p := range []string{fault.DispatchBeforeInFlight, fault.DispatchAfterReceipt, fault.DispatchAfterOutcome} {
			cases = append(cases, killCase{p, false, 1, schema.KindConfirmed}, killCase{p, true, 1, schema.KindConfirmed})
		}
	}
	for _, tc := range cases {
		t.Run(caseName(tc.point, tc.lose), func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t, testenv.Clustered(), testenv.NotStarted(), fastReconcile)
			far := serveFarSide(t, env)
			a, b := pair(t, env)
			a.start(t, fault.Env+"="+tc.point)
			// A alone takes the proposal and dies at the point.
			prop, key := inventoryProposal(t, "prop-a")
			far.publish(t, prop)
			killedAt(t, a.p)
			before := far.DeliveredFor(key)
			if tc.lose {
				if err := os.RemoveAll(a.cfg.Store.Dir); err != nil {
					t.Fatal(err)
				}
			}
			b.start(t)
			a.start(t)
			second := prop
			second["proposal_id"] = "prop-b"
			testenv.Set(second, "context.delivery.delivery_id", "delivery:prop-b")
			far.publish(t, second)
			for _, id := range []string{"prop-a", "prop-b"} {
				if o := env.Recorder.Wait(t, id, testenv.Terminal); o.Kind != tc.final {
					t.Errorf("%s ended %s, want %s: %+v", id, o.Kind, tc.final, o.Incidents)
				}
			}
			if got := far.DeliveredFor(key); got != tc.delivered || before > got {
				t.Errorf("the provider received the intent %d times (%d before the restarts), want %d", got, before, tc.delivered)
			}
			far.check(t)
			a.stop(t)
			b.stop(t)
		})
	}
}

// Two processor binaries, logging in to NATS with the processor's key
// (authentication on, every role in its own account), share a burst of
// intents (each proposed twice); one of them is SIGKILLed at a random
// moment, loses its store directory and starts again. Every proposal ends,
// no key reaches the provider twice, no attempt id is queried twice.
func TestClusterBurstWithRandomKill(t *testing.T) {
	intents := 12
	if long(t) {
		intents = 60
	}
	env := testenv.New(t, testenv.Clustered(), testenv.WithAuth(), testenv.NotStarted(), fastReconcile)
	far := serveFarSide(t, env)
	a := &node{cfg: env.ProcessorConfig(t, "a")}
	b := &node{cfg: env.ProcessorConfig(t, "b")}
	a.start(t)
	b.start(t)
	kill := rand.IntN(intents)
	var ids []string
	for r := range 2 {
		for i := range intents {
			prop, _ := inventoryProposal(t, fmt.Sprintf("prop-%02d", i))
			id := fmt.Sprintf("prop-%02d-%d", i, r)
			prop["proposal_id"] = id
			testenv.Set(prop, "context.delivery.delivery_id", "delivery:"+id)
			far.publish(t, prop)
			ids = append(ids, id)
			if r == 0 && i == kill {
				a.p.Kill()
			}
		}
	}
	if !a.p.Wait(30 * time.Second) {
		t.Fatal("processor survived SIGKILL")
	}
	if err := os.RemoveAll(a.cfg.Store.Dir); err != nil {
		t.Fatal(err)
	}
	a.start(t)
	for _, id := range ids {
		if o := env.Recorder.Wait(t, id, testenv.Terminal); o.Kind != schema.KindConfirmed && o.Kind != schema.KindFailedBeforeDispatch {
			t.Errorf("%s ended %s", id, o.Kind)
		}
	}
	far.check(t)
	a.stop(t)
	b.stop(t)
}

// SIGKILL the processor in the middle of a reconciliation attempt on a
// cluster; another processor carries polling on (SPEC §6: polling
// continues when the processor that started it is gone). The attempt that
// was interrupted is recorded without asking again; no attempt id is
// queried twice; the proposal ends with the truth.
func TestClusterKillMidReconciliation(t *testing.T) {
	type killCase struct {
		point string
		lose  bool
	}
	cases := []killCase{{fault.ReconcileAfterReply, true}}
	if long(t) {
		cases = append(cases, killCase{fault.ReconcileAfterReply, false}, killCase{fault.ReconcileAfterCheckpoint, false},
			killCase{fault.ReconcileAfterCheckpoint, true})
	}
	for _, tc := range cases {
		t.Run(caseName(tc.point, tc.lose), func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t, testenv.Clustered(), testenv.NotStarted(), fastReconcile)
			far := serveFarSide(t, env)
			// The provider leaves the dispatch unknown; reconciliation finds
			// it done.
			far.OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
				return schema.AdapterReply{Outcome: schema.ReplyIndeterminate}, nil
			})
			a, b := pair(t, env)
			a.start(t, fault.Env+"="+tc.point)
			prop, key := inventoryProposal(t, "prop-r")
			far.publish(t, prop)
			killedAt(t, a.p)
			if tc.lose {
				if err := os.RemoveAll(a.cfg.Store.Dir); err != nil {
					t.Fatal(err)
				}
			}
			b.start(t)
			a.start(t)
			o := env.Recorder.Wait(t, "prop-r", testenv.Terminal)
			if o.Kind != schema.KindConfirmed {
				t.Errorf("ended %s: %+v", o.Kind, o.Incidents)
			}
			// The interrupted attempt 1 was recorded without an answer; a
			// later attempt, with a new id, found the effect.
			first := kv.AttemptID("sha256:"+key, 1)
			if rc := o.Receipt; rc == nil || rc.Reconciliation == nil || rc.Reconciliation.AttemptID == first {
				t.Errorf("settled by %+v, want an attempt after %s", o.Receipt, first)
			}
			if q := far.Attempted(first); q != map[string]int{fault.ReconcileAfterReply: 1, fault.ReconcileAfterCheckpoint: 0}[tc.point] {
				t.Errorf("attempt 1 queried %d times", q)
			}
			if n := far.DeliveredFor(key); n != 1 {
				t.Errorf("the provider received the intent %d times", n)
			}
			far.check(t)
			a.stop(t)
			b.stop(t)
		})
	}
}
