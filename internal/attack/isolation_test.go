package attack_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/subjects"
	"github.com/portcullis/portcullis/testenv"
)

// TestDownProviderCannotStarveAnother: B's proposals for a provider whose
// connector is down (NATS "no responders": dispatch retries each for the
// provider's unavailable_retry) must delay only proposals for that
// provider (SPEC §3 Isolation: "no provider's backlog takes capacity from
// another's"); A's proposal for another provider is answered at once.
//
// KNOWN BUG, not fixed here: provider.max_in_flight is parsed but never
// enforced, and the dispatch stage is one consumer whose 16 workers every
// provider shares; a dispatch that reaches nobody holds its worker for the
// whole unavailable_retry window (default 30s), and a hanging connector
// for its timeout. Sixteen proposals from any tenant to a provider that is
// down stall every tenant's dispatches for that long. Fixing it needs
// per-provider capacity in the dispatch stage (its own consumer, or a
// hand-off that does not hold a worker), which is not a local change.
func TestDownProviderCannotStarveAnother(t *testing.T) {
	t.Skip("known bug (see the comment): dispatch workers are shared by every provider; max_in_flight is not enforced")
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) {
		for i := range c.Providers {
			if c.Providers[i].Name == "inventory" {
				c.Providers[i].UnavailableRetry = 20 * time.Second
			}
		}
	}))
	now := time.Now()
	for i := range dispatchWorkers {
		p := testenv.Set(testenv.AsOtherTenant(intentOf(fmt.Sprintf("down-%02d", i), i)), "intent.provider", "inventory")
		env.PublishSigned(t, testenv.Granted(t, p, "sku-1001", now), env.OtherHost)
	}
	// Every one of them is in a dispatch worker's hands.
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	for {
		cons, err := env.JS.Consumer(ctx, env.Subjects.StageStream(subjects.StageDispatch), subjects.StageDispatch)
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending >= dispatchWorkers {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	a := grantedA(t, "not-starved", 71, now)
	start := time.Now()
	env.PublishSigned(t, a, env.Host)
	confirmed(t, env.Recorder.Wait(t, "not-starved", testenv.Terminal), testenv.FingerprintOf(t, a, "sku-1001"))
	waited := time.Since(start)
	for i := range dispatchWorkers {
		if outs := env.Recorder.Outcomes(refB(fmt.Sprintf("down-%02d", i))); len(outs) != 0 {
			t.Fatalf("A's demo proposal waited %s, until B's inventory proposals gave up: %+v", waited, outs)
		}
	}
}
