package testenv_test

import (
	"fmt"
	"time"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/testenv"
)

// A test starts a deployment, publishes a proposal as its host would, and
// waits for the outcome. Quiesce then lets it check what else happened:
// once the pipeline is idle, whatever has not happened will not.
func Example() {
	t, stop := testenv.Standalone() // in a test function, use its t instead
	defer stop()

	// An embedded nats-server, a processor with a fake provider "demo" that
	// confirms, signing hosts and a Recorder of outcomes and events; all
	// stopped when the test ends.
	env := testenv.New(t)

	// The SPEC §2.1 proposal, with an inline grant for the fingerprint it
	// grounds to, signed by host "frontdesk".
	p := testenv.Granted(t, testenv.Lumber("prop-1"), "sku-1001", env.Clock.Now())
	env.PublishSigned(t, p, env.Host)

	o := env.Recorder.Wait(t, "prop-1", testenv.Terminal)
	fmt.Println(o.Kind, o.EffectTruth, *o.Referent)

	env.Quiesce(t)
	fmt.Println("outcomes:", len(env.Recorder.Outcomes("prop-1")))
	fmt.Println("provider calls:", env.Fakes["demo"].Dispatches())
	fmt.Println("incident events:", len(env.Recorder.Events()))
	// Output:
	// CONFIRMED PRESENT sku-1001
	// outcomes: 1
	// provider calls: 1
	// incident events: 0
}

// With a manual clock, time passes only when the test says so: a proposal
// waits for approval until the clock is moved past the approval TTL; then
// Quiesce lets the expiry timer fire and the pipeline settle.
func ExampleEnv_Quiesce() {
	t, stop := testenv.Standalone()
	defer stop()
	clock := stages.NewManualClock(time.UnixMilli(1_764_424_800_000))
	env := testenv.New(t, testenv.WithClock(clock))

	env.PublishSigned(t, testenv.Lumber("prop-2"), env.Host) // no grant
	o := env.Recorder.Wait(t, "prop-2", testenv.Kind(schema.KindNeedsApproval))
	fmt.Println(o.Kind, o.Incidents[0].Code)

	clock.Advance(env.ApprovalTTL - time.Second)
	env.Quiesce(t)
	fmt.Println("after TTL-1s:", len(env.Recorder.Outcomes("prop-2")), "outcome")

	clock.Advance(time.Second)
	env.Quiesce(t)
	outs := env.Recorder.Outcomes("prop-2")
	fmt.Println("after TTL:", len(outs), "outcomes, the last", outs[len(outs)-1].Kind, outs[len(outs)-1].Incidents[0].Code)
	// Output:
	// NEEDS_APPROVAL APPROVAL_REQUIRED
	// after TTL-1s: 1 outcome
	// after TTL: 2 outcomes, the last DENIED APPROVAL_TIMED_OUT
}
