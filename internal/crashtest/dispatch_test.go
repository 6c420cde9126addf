package crashtest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/fault"
)

// connector runs a fake "inventory" provider in the test process, behind
// the nats adapter the child processor uses: its counters survive the
// processor's SIGKILL (serveFarSide, which records the run's history).
func connector(t *testing.T, env *testenv.Env) *farSide { return serveFarSide(t, env) }

// fastReconcile polls 200ms after an unknown outcome, and believes an
// absence 1s after the dispatch's not_after_ms (the clock skew: every
// clock here is the test machine's), so interrupted dispatches settle
// inside the test.
var fastReconcile = testenv.WithConfig(func(c *config.Config) {
	c.Reconciliation.Interval = 200 * time.Millisecond
	c.Approval.ClockSkew = time.Second
})

func inventoryProposal(t *testing.T, id string) (map[string]any, string) {
	t.Helper()
	p := testenv.Lumber(id)
	testenv.Set(p, "intent.provider", "inventory")
	testenv.Set(p, "intent.payload", map[string]any{"quantity": 20, "batch": id})
	p = testenv.Granted(t, p, "sku-1001", time.Now())
	return p, strings.TrimPrefix(testenv.FingerprintOf(t, p, "sku-1001"), "sha256:")
}

func killedAt(t *testing.T, p *testenv.Process) {
	t.Helper()
	if !p.Wait(60 * time.Second) {
		t.Fatal("processor did not die at the fault point")
	}
	if !p.Killed() {
		t.Fatalf("processor exited without SIGKILL (code %d):\n%s", p.ExitCode(), p.Logs.Bytes())
	}
}

// SIGKILL at each boundary of SPEC §3 Dispatch, restart, and check: the
// provider saw the fingerprint at most once, and the proposal ended with
// the outcome the journal allows — DISPATCH_INTERRUPTED wherever the
// provider may have been reached before a receipt. Killed after the
// in-flight write, the request never left: reconciliation hears "never
// received" past the fence and dispatch sends it again (a second dispatch
// receipt), so the provider receives it once.
func TestDispatchBoundaries(t *testing.T) {
	cases := []struct {
		point     string
		delivered int         // times the provider received it
		kind      schema.Kind // dispatch's outcome after the restart
		code      schema.Code // its incident, if any
		final     schema.Kind // the outcome once reconciliation settled it
		receipts  int         // distinct dispatch receipts: 2 after a redispatch
	}{
		{fault.DispatchBeforeInFlight, 1, schema.KindConfirmed, "", schema.KindConfirmed, 1},
		{fault.DispatchAfterInFlight, 1, schema.KindReconciliationRequired, schema.CodeDispatchInterrupted, schema.KindConfirmed, 2},
		{fault.DispatchAfterReply, 1, schema.KindReconciliationRequired, schema.CodeDispatchInterrupted, schema.KindConfirmed, 1},
		{fault.DispatchAfterReceipt, 1, schema.KindConfirmed, "", schema.KindConfirmed, 1},
		{fault.DispatchAfterOutcome, 1, schema.KindConfirmed, "", schema.KindConfirmed, 1},
		{fault.RunnerAfterPublish + "#4", 1, schema.KindConfirmed, "", schema.KindConfirmed, 1}, // the 4th publish-then-ack is dispatch's
	}
	for _, tc := range cases {
		t.Run(tc.point, func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t, testenv.NotStarted(), fastReconcile)
			conn := connector(t, env)
			p := testenv.StartProcess(t, env.Config, fault.Env+"="+tc.point)
			p.WaitLog(t, "processor started")
			prop, key := inventoryProposal(t, "prop-crash")
			conn.publish(t, prop)
			killedAt(t, p)
			before := conn.DeliveredFor(key)

			p2 := testenv.StartProcess(t, env.Config)
			p2.WaitLog(t, "processor started")
			final := env.Recorder.Wait(t, "prop-crash", testenv.Terminal)
			// Let the restarted processor take over what the dead one held
			// (redelivered after the ack wait), then judge.
			env.QuiesceWithin(t, 60*time.Second)
			var fromDispatch []schema.Outcome
			for _, o := range env.Recorder.Outcomes("prop-crash") {
				if o.Receipt != nil && o.Receipt.Reconciliation == nil {
					fromDispatch = append(fromDispatch, o)
				}
			}
			if len(fromDispatch) == 0 {
				t.Fatalf("no dispatch outcome: %+v", env.Recorder.Outcomes("prop-crash"))
			}
			first := fromDispatch[0]
			if first.Kind != tc.kind {
				t.Errorf("dispatch outcome %s, want %s: %+v", first.Kind, tc.kind, first)
			}
			if tc.code != "" && (len(first.Incidents) != 1 || first.Incidents[0].Code != tc.code) {
				t.Errorf("incidents %+v, want %s", first.Incidents, tc.code)
			}
			// A replay republishes a dispatch receipt, never another verdict
			// under its id; only a redispatch makes a new receipt.
			kinds := map[string]schema.Kind{}
			for _, o := range fromDispatch {
				if k, ok := kinds[o.Receipt.ReceiptID]; ok && k != o.Kind {
					t.Errorf("dispatch outcomes disagree: %+v", fromDispatch)
				}
				kinds[o.Receipt.ReceiptID] = o.Kind
			}
			if len(kinds) != tc.receipts {
				t.Errorf("%d dispatch receipts, want %d: %+v", len(kinds), tc.receipts, fromDispatch)
			}
			if final.Kind != tc.final {
				t.Errorf("settled as %s, want %s: %+v", final.Kind, tc.final, final)
			}
			if got := conn.DeliveredFor(key); got != tc.delivered {
				t.Errorf("provider received the fingerprint %d times (%d before the restart), want %d", got, before, tc.delivered)
			}
			conn.check(t)
			p2.Terminate()
			p2.Wait(30 * time.Second)
		})
	}
}

// Killed after the in-flight write (the request never left), then killed
// again by the restart that declared the dispatch interrupted, between its
// receipt and keeping the envelope for a redispatch: reconciliation hears
// "never received" past the fence but finds no envelope to send again. It
// waits for dispatch's input to be redelivered, which keeps the envelope,
// and the intent is sent again: CONFIRMED, received once. Before the fix
// the finding stood and the proposal ended FAILED_BEFORE_DISPATCH for a
// crash (seen once in TestClusterSoak, soak-0002).
func TestDispatchCrashBeforeKeepingTheEnvelope(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.NotStarted(), fastReconcile)
	conn := connector(t, env)
	p1 := testenv.StartProcess(t, env.Config, fault.Env+"="+fault.DispatchAfterInFlight)
	p1.WaitLog(t, "processor started")
	prop, key := inventoryProposal(t, "prop-twice")
	conn.publish(t, prop)
	killedAt(t, p1)
	p2 := testenv.StartProcess(t, env.Config, fault.Env+"="+fault.DispatchAfterReceipt)
	killedAt(t, p2)
	if conn.DeliveredFor(key) != 0 {
		t.Fatal("the request reached the provider before the restarts; the test needs it lost")
	}
	p3 := testenv.StartProcess(t, env.Config)
	p3.WaitLog(t, "processor started")
	final := env.Recorder.Wait(t, "prop-twice", testenv.Terminal)
	if final.Kind != schema.KindConfirmed {
		t.Errorf("settled as %s %v, want CONFIRMED", final.Kind, final.Incidents)
	}
	if got := conn.DeliveredFor(key); got != 1 {
		t.Errorf("provider received the fingerprint %d times, want 1", got)
	}
	conn.checkTruth(t)
	p3.Terminate()
	p3.Wait(30 * time.Second)
}

// A burst of distinct intents and repeats, with the processor SIGKILLed at
// a random moment and restarted: no fingerprint reaches the provider twice
// and every proposal ends.
func TestDispatchBurstWithRandomKill(t *testing.T) {
	env := testenv.New(t, testenv.NotStarted(), fastReconcile)
	conn := connector(t, env)
	p := testenv.StartProcess(t, env.Config)
	p.WaitLog(t, "processor started")
	const intents, repeats = 40, 2
	kill := 20 + rand.IntN(40)
	n := 0
	for r := range repeats {
		for i := range intents {
			prop, _ := inventoryProposal(t, fmt.Sprintf("prop-%02d", i))
			prop["proposal_id"] = fmt.Sprintf("prop-%02d-%d", i, r)
			testenv.Set(prop, "context.delivery.delivery_id", fmt.Sprintf("delivery:%02d-%d", i, r))
			conn.publish(t, prop)
			if n++; n == kill {
				p.Kill()
			}
		}
	}
	if !p.Wait(30 * time.Second) {
		t.Fatal("processor survived SIGKILL")
	}
	p2 := testenv.StartProcess(t, env.Config)
	p2.WaitLog(t, "processor started")
	for r := range repeats {
		for i := range intents {
			o := env.Recorder.Wait(t, fmt.Sprintf("prop-%02d-%d", i, r), testenv.Terminal)
			if o.Kind != schema.KindConfirmed && o.Kind != schema.KindFailedBeforeDispatch {
				t.Errorf("%s settled as %s", o.ProposalID, o.Kind)
			}
		}
	}
	env.QuiesceWithin(t, 60*time.Second)
	conn.check(t)
	p2.Terminate()
	p2.Wait(30 * time.Second)
}
