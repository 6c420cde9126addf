package reconciliation_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/fault"
)

// TestStaleOutcomeNeverLast reproduces issue 33's cluster soak with real
// servers and stores: dispatch records a timed-out dispatch
// (RECONCILIATION_REQUIRED) and its publish of that outcome is held up —
// the soak's "server is disconnected", retried — while reconciliation
// confirms the effect and publishes CONFIRMED. The held publish then goes
// out. SPEC §2.4 Order: the last outcome on the subject, stored and live,
// is CONFIRMED; nothing non-terminal follows it. On one server, and on a
// three-server cluster (replicated streams and journal) with a second
// processor beside the first: either may reconcile.
func TestStaleOutcomeNeverLast(t *testing.T) {
	t.Run("single node", func(t *testing.T) { testStaleOutcomeNeverLast(t, false) })
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("a three-server cluster")
		}
		testStaleOutcomeNeverLast(t, true)
	})
}

func testStaleOutcomeNeverLast(t *testing.T, cluster bool) {
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	var hits atomic.Int32
	held := make(chan struct{})
	restore := fault.Set(func(name string) {
		if name == fault.RunnerBeforeOutcome && hits.Add(1) == 1 {
			close(held)
			<-release // the first outcome of the run: dispatch's
		}
	})
	defer restore()

	var opts []testenv.Option
	if cluster {
		opts = append(opts, testenv.Clustered())
	}
	env, clock := start(t, opts...)
	fake := env.Fakes["demo"]
	timeoutDispatch(fake)
	script(fake, reply("confirmed"))
	if cluster {
		env.AddProcessor(t, "second")
	}
	propose(t, env, clock, "prop-1")
	select {
	case <-held:
	case <-time.After(testenv.WaitTimeout):
		t.Fatal("dispatch never came to publish its outcome")
	}
	// The poll was armed with the receipt: reconciliation confirms while
	// dispatch's publish waits.
	clock.Advance(interval)
	env.Recorder.Wait(t, "prop-1", last(schema.KindConfirmed))
	unblock()
	env.Quiesce(t)

	if o, found := env.StoredOutcome(t, "prop-1"); !found || o.Kind != schema.KindConfirmed {
		t.Errorf("last stored outcome: %s %v, want CONFIRMED (a host that recovers by a direct get reads it)", o.Kind, incidents(o))
	}
	checkOrder(t, "stored", env.StoredHistory(t)["prop-1"])
	env.Recorder.Flush(t)
	checkOrder(t, "live", env.Recorder.Outcomes("prop-1"))
}

// checkOrder fails unless outs, a proposal's outcomes in the order a host
// sees them, keep SPEC §2.4's order: each restates or supersedes the one
// before, and the last is terminal.
func checkOrder(t *testing.T, what string, outs []schema.Outcome) {
	t.Helper()
	var kinds []string
	for _, o := range outs {
		kinds = append(kinds, string(o.Kind))
	}
	for i := 1; i < len(outs); i++ {
		if !outs[i].Standing().Follows(outs[i-1].Standing()) {
			t.Errorf("%s outcomes %v: %s (%d) after %s", what, kinds, outs[i].Kind, i, outs[i-1].Kind)
		}
	}
	if len(outs) == 0 || !outs[len(outs)-1].Terminal {
		t.Errorf("%s outcomes %v: the last is not terminal", what, kinds)
	}
}
