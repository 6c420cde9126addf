package crashtest

import (
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/fault"
)

// lease is how long an in-flight record fences its dispatch in these
// tests: the inventory provider's timeout (2s) and dispatch's margin (5s).
// A request's not_after_ms is its in-flight write plus lease.
const lease = 7 * time.Second

// withSkew sets approval.clock_skew: reconciliation believes an absence
// only after a dispatch's not_after_ms plus it (SPEC §4).
func withSkew(d time.Duration) testenv.Option {
	return testenv.WithConfig(func(c *config.Config) { c.Approval.ClockSkew = d })
}

// kindsOf lists outcome kinds with their first incident, for messages.
func kindsOf(outs []schema.Outcome) []string {
	var k []string
	for _, o := range outs {
		s := string(o.Kind)
		if len(o.Incidents) > 0 {
			s += "/" + string(o.Incidents[0].Phase) + "/" + string(o.Incidents[0].Code)
		}
		k = append(k, s)
	}
	return k
}

// hasIncident reports whether some outcome carries phase/code.
func hasIncident(outs []schema.Outcome, phase schema.Phase, code schema.Code) bool {
	for _, o := range outs {
		for _, i := range o.Incidents {
			if i.Phase == phase && i.Code == code {
				return true
			}
		}
	}
	return false
}

// SIGSTOP a processor of two on a three-server cluster between its
// in-flight record and its provider request, for longer than the lease
// (SPEC §4, §6). The other processor concludes DISPATCH_INTERRUPTED once
// the lease has ended, and reconciliation asks the provider, which never
// heard of the intent; past the fence (not_after_ms plus the skew) that is
// the truth, so the request was lost in flight and dispatch sends it again
// under a new lease: CONFIRMED. Then the frozen processor is thawed and
// carries on:
//
//   - paused after checking its lease, just before sending
//     (dispatch.before_send): it sends the request late, and the
//     connector refuses it (NOT_AFTER_PASSED) without acting;
//   - paused right after the in-flight write (dispatch.after_inflight):
//     it finds its lease ended and does not send at all.
//
// Either way the provider acts once (on the redispatch, never on the
// frozen request), the thawed processor's record loses to the other's,
// and the proposal's outcomes agree with the provider: CONFIRMED, never a
// second terminal answer.
func TestClusterPauseMidDispatch(t *testing.T) {
	cases := []struct {
		point string
		late  int // requests the connector refused as late
	}{
		{fault.DispatchBeforeSend, 1},
		{fault.DispatchAfterInFlight, 0},
	}
	for _, tc := range cases {
		t.Run(tc.point, func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t, testenv.Clustered(), testenv.NotStarted(), fastReconcile, withSkew(2*time.Second))
			far := serveFarSide(t, env)
			a, b := pair(t, env)
			a.start(t, fault.Env+"="+tc.point+"@pause")
			prop, key := inventoryProposal(t, "prop-p")
			far.publish(t, prop)
			a.p.WaitLog(t, fault.PauseLog+tc.point)
			b.start(t)
			// B takes the proposal over once A's delivery times out, waits
			// out A's lease, records the dispatch interrupted; reconciliation
			// finds nothing done, believes it after the fence, and dispatch
			// sends the request again.
			outs := env.Recorder.WaitAllWithin(t, "prop-p", testenv.Terminal, 2*time.Minute)
			if o := outs[len(outs)-1]; o.Kind != schema.KindConfirmed ||
				!hasIncident(outs, schema.PhaseDispatch, schema.CodeDispatchInterrupted) {
				t.Fatalf("while A was frozen: %v", kindsOf(outs))
			}

			a.p.Resume()
			a.p.WaitLog(t, "another processor recorded this intent while its provider call ran")
			if tc.point == fault.DispatchAfterInFlight {
				a.p.WaitLog(t, "the lease ended before the request could be sent")
			}
			testenv.WaitFor(t, "the late request at the connector", func() bool { return far.LateFor(key) == tc.late })
			// A second proposal of the intent gets the same answer.
			second := prop
			second["proposal_id"] = "prop-q"
			testenv.Set(second, "context.delivery.delivery_id", "delivery:prop-q")
			far.publish(t, second)
			env.Recorder.Wait(t, "prop-q", testenv.Terminal)
			env.QuiesceWithin(t, time.Minute)

			if n := far.DeliveredFor(key); n != 1 || far.LateFor(key) != tc.late {
				t.Errorf("the provider acted %d times, want 1; %d late requests refused, want %d", n, far.LateFor(key), tc.late)
			}
			for _, id := range []string{"prop-p", "prop-q"} {
				if outs := env.Recorder.Outcomes(id); outs[len(outs)-1].Kind != schema.KindConfirmed {
					t.Errorf("%s: %v", id, kindsOf(outs))
				}
			}
			far.checkTruth(t)
			a.stop(t)
			b.stop(t)
		})
	}
}

// Clock skew between processors and a connector (SPEC §4): the connector's
// clock runs 20s behind the processors', within approval.clock_skew (30s).
// A processor frozen just before sending, past its lease, is thawed after
// the other processor recorded the dispatch interrupted and reconciliation
// heard "never received" from the provider; by the connector's clock the
// late request is still in time, so the provider acts. Reconciliation did
// not believe the early "never received" (the fence — not_after_ms plus
// the skew — had not passed): it asked again after the fence and found the
// action done. CONFIRMED, never FAILED_BEFORE_DISPATCH.
func TestClusterPauseConnectorClockBehind(t *testing.T) {
	const behind, skew = 20 * time.Second, 30 * time.Second
	env := testenv.New(t, testenv.Clustered(), testenv.NotStarted(), fastReconcile, withSkew(skew))
	far := serveFarSide(t, env)
	far.SetClock(func() time.Time { return time.Now().Add(-behind) })
	a, b := pair(t, env)
	a.start(t, fault.Env+"="+fault.DispatchBeforeSend+"@pause")
	prop, key := inventoryProposal(t, "prop-s")
	far.publish(t, prop)
	a.p.WaitLog(t, fault.PauseLog+fault.DispatchBeforeSend)
	paused := time.Now()
	b.start(t)
	// The interrupted dispatch, then reconciliation's early answer.
	outs := env.Recorder.WaitAllWithin(t, "prop-s", func(outs []schema.Outcome) bool {
		return hasIncident(outs, schema.PhaseReconciliation, schema.CodeProviderIndeterminate)
	}, time.Minute)
	if !hasIncident(outs, schema.PhaseDispatch, schema.CodeDispatchInterrupted) || testenv.Terminal(outs) {
		t.Fatalf("before the thaw: %v", kindsOf(outs))
	}
	thawed := time.Since(paused)
	if thawed > lease+behind-time.Second {
		t.Logf("thawed %s after the pause: the connector may find the request late after all", thawed)
	}
	a.p.Resume()
	testenv.WaitFor(t, "the provider acting on the late request", func() bool { return far.DeliveredFor(key)+far.LateFor(key) == 1 })
	outs = env.Recorder.WaitAllWithin(t, "prop-s", testenv.Terminal, 2*time.Minute)
	env.QuiesceWithin(t, time.Minute)
	t.Logf("thawed %s after the pause; provider acted %d, refused late %d; outcomes %v",
		thawed.Round(100*time.Millisecond), far.DeliveredFor(key), far.LateFor(key), kindsOf(outs))
	far.checkTruth(t)
	a.stop(t)
	b.stop(t)
}

// A single processor SIGSTOPped just before sending a provider request,
// past the lease, then thawed: the connector refuses the late request
// (nothing done); no other processor has recorded the intent, so the
// processor sends it again with a new lease, and the provider acts once.
// A pause on a single node costs time, never the action.
func TestPauseMidDispatch(t *testing.T) {
	env := testenv.New(t, testenv.NotStarted(), fastReconcile)
	conn := connector(t, env)
	p := testenv.StartProcess(t, env.Config, fault.Env+"="+fault.DispatchBeforeSend+"@pause")
	p.WaitLog(t, "processor started")
	prop, key := inventoryProposal(t, "prop-p")
	conn.publish(t, prop)
	p.WaitLog(t, fault.PauseLog+fault.DispatchBeforeSend)
	time.Sleep(lease + time.Second) // frozen past not_after_ms: nothing to observe until the thaw
	p.Resume()
	env.Recorder.Wait(t, "prop-p", testenv.Terminal)
	env.QuiesceWithin(t, time.Minute)
	conn.checkTruth(t)
	if conn.LateFor(key) != 1 || conn.DeliveredFor(key) != 1 {
		t.Errorf("late requests %d, deliveries %d: want 1, 1", conn.LateFor(key), conn.DeliveredFor(key))
	}
	p.Terminate()
	p.Wait(30 * time.Second)
}
