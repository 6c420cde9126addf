package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// ungranted is a lumber proposal for "demo" without a grant (it parks),
// and its fingerprint once grounded.
func ungranted(t *testing.T, id string) (map[string]any, string) {
	t.Helper()
	p := testenv.Lumber(id)
	testenv.Set(p, "intent.payload", map[string]any{"quantity": 20, "batch": "parked-" + id, "note": payloadOnly})
	return p, testenv.FingerprintOf(t, p, "sku-1001")
}

// park publishes an ungranted proposal and waits for its NEEDS_APPROVAL.
func park(t *testing.T, env *testenv.Env, id string) string {
	t.Helper()
	p, fp := ungranted(t, id)
	call := time.Now()
	env.PublishSigned(t, p, env.Host)
	proposed(env, id, call)
	env.Recorder.Wait(t, id, testenv.Kind(schema.KindNeedsApproval))
	return fp
}

// grant publishes a standalone grant for a parked proposal.
func grant(t *testing.T, env *testenv.Env, id, fp string) {
	t.Helper()
	g := testenv.Grant(fp, time.Now(), nil)
	g["proposal_id"] = id
	call := time.Now()
	env.PublishGrant(t, g, env.Host)
	recorderOf(env).Grant(testenv.Ref(id), call)
}

// timeouts counts a proposal's APPROVAL_TIMED_OUT outcomes.
func timeouts(env *testenv.Env, id string) int {
	n := 0
	for _, o := range env.Recorder.Outcomes(id) {
		if o.Kind == schema.KindDenied && len(o.Incidents) == 1 && o.Incidents[0].Code == schema.CodeApprovalTimedOut {
			n++
		}
	}
	return n
}

// A proposal parked by one processor, which then stops, is resumed by a
// grant on another: the approval record is in the replicated bucket, not
// in the first processor's store, and the intent reaches the provider
// once.
func TestParkedProposalResumedByAnotherProcessor(t *testing.T) {
	env := testenv.New(t, testenv.Clustered())
	prov := newProvider(env)
	fp := park(t, env, "resume-1")
	if n := env.Processor().Approvals().Count(); n != 1 {
		t.Fatalf("the parking processor counts %d parked", n)
	}
	env.Stop(t) // in process: its store and its consumers go with it
	second := addProcessor(t, env, "second")
	if n := second.Processor().Approvals().Count(); n != 1 {
		t.Fatalf("the other processor counts %d parked", n)
	}
	grant(t, env, "resume-1", fp)
	out := terminal(t, env, []string{"resume-1"})
	if o := out["resume-1"]; o.Kind != schema.KindConfirmed {
		t.Fatalf("resumed proposal ended %s: %+v", o.Kind, o.Incidents)
	}
	prov.check(t)
	if n := len(prov.fake.Delivered()); n != 1 {
		t.Errorf("%d intents reached the provider, want 1", n)
	}
	// A second grant finds nothing parked: no second dispatch.
	grant(t, env, "resume-1", fp)
	env.Recorder.WaitEvent(t, schema.PhaseAuthorization, schema.CodeGrantUnmatched)
	prov.check(t)
	testenv.WaitFor(t, "nothing parked", func() bool { return second.Processor().Approvals().Count() == 0 })
}

// An approval whose parking processor is gone times out once, on the
// processor that is alive: its expiry is a message schedule in the
// authorization stream, fired by the server.
func TestApprovalTimesOutWithoutItsProcessor(t *testing.T) {
	env := testenv.New(t, testenv.Clustered(), testenv.WithConfig(func(c *config.Config) { c.Approval.TTL = 3 * time.Second }))
	prov := newProvider(env)
	park(t, env, "expire-1")
	env.Stop(t)
	second := addProcessor(t, env, "second")
	o := env.Recorder.Wait(t, "expire-1", testenv.Terminal)
	if o.Kind != schema.KindDenied || len(o.Incidents) != 1 || o.Incidents[0].Code != schema.CodeApprovalTimedOut {
		t.Fatalf("outcome = %+v", o)
	}
	// A third processor joins; nothing fires again: once the pipeline is
	// idle, no schedule is left in the timers stream (a fired schedule is
	// purged, and no processor armed the expiry again).
	addProcessor(t, env, "third")
	env.Quiesce(t)
	testenv.Retry(t, func(ctx context.Context) error {
		stream, err := env.JS.Stream(ctx, env.Subjects.TimersStream(subjects.StageAuthorization))
		if err != nil {
			return err
		}
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(env.Subjects.Schedules(subjects.StageAuthorization)))
		if err != nil {
			return err
		}
		if len(info.State.Subjects) != 0 {
			t.Errorf("schedules left to fire: %v", info.State.Subjects)
		}
		return nil
	})
	if n := timeouts(env, "expire-1"); n != 1 {
		t.Errorf("%d APPROVAL_TIMED_OUT outcomes, want 1", n)
	}
	if n := len(prov.fake.Delivered()); n != 0 {
		t.Errorf("%d intents reached the provider", n)
	}
	testenv.WaitFor(t, "nothing parked", func() bool { return second.Processor().Approvals().Count() == 0 })
	prov.check(t) // the approval ended once, among the rest
}

// actions_approvals_pending is the cluster-wide count on every processor,
// whichever parked and decided the proposals.
func TestApprovalsGaugeIsClusterWide(t *testing.T) {
	env := testenv.New(t, testenv.Clustered())
	prov := newProvider(env)
	second := addProcessor(t, env, "second")
	gauges := func() (float64, float64) {
		return testutil.ToFloat64(env.Processor().Metrics().ApprovalsPending), testutil.ToFloat64(second.Processor().Metrics().ApprovalsPending)
	}
	same := func(want float64) {
		t.Helper()
		testenv.WaitFor(t, fmt.Sprintf("both gauges at %v", want), func() bool { a, b := gauges(); return a == want && b == want })
	}
	fps := map[string]string{}
	for i := range 4 {
		id := fmt.Sprintf("gauge-%d", i)
		fps[id] = park(t, env, id)
	}
	same(4)
	for _, id := range []string{"gauge-0", "gauge-1"} {
		grant(t, env, id, fps[id])
	}
	terminal(t, env, []string{"gauge-0", "gauge-1"})
	same(2)
	// The operator's listing, answered by either processor, is the
	// cluster's too.
	for range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		a, err := env.Admin().Approvals(ctx, 0)
		cancel()
		if err != nil || a.Total != 2 || len(a.Approvals) != 2 || a.Approvals[0].ProposalID != "gauge-2" && a.Approvals[0].ProposalID != "gauge-3" {
			t.Fatalf("processor approvals list = %+v, %v", a, err)
		}
	}
	prov.checkHistory(t, false) // gauge-2 and gauge-3 stay parked
	env.AssertNowhere(t, payloadOnly)
}
