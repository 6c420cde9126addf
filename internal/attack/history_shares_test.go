package attack_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// bigParked publishes n of B's proposals without a grant whose display
// summaries are as large as allowed: each NEEDS_APPROVAL outcome and each
// activity snapshot carries ~8 KB. It waits until every one is parked.
func bigParked(t *testing.T, env *testenv.Env, prefix string, n int) {
	t.Helper()
	summary := strings.Repeat("\U0001D11E", schema.MaxSummaryLen)
	for i := range n {
		p := testenv.AsOtherTenant(intentOf(fmt.Sprintf("%s-%03d", prefix, i), 500+i))
		testenv.Set(p, "intent.display.summary", summary)
		env.PublishSigned(t, p, env.OtherHost)
	}
	for i := range n {
		env.Recorder.WaitAllWithin(t, refB(fmt.Sprintf("%s-%03d", prefix, i)), testenv.Count(1), soon)
	}
}

// TestLargeOutcomesCannotEvictAnotherHost (issue 32, finding 2): each host's
// outcome history was bounded in messages, not bytes, in one stream that
// drops its oldest: 400 of B's 8.5 KB NEEDS_APPROVAL outcomes evicted A's
// outcome (a direct get answered 404). Each host's share is bounded in
// bytes now: B's oldest go, A's stays readable.
func TestLargeOutcomesCannotEvictAnotherHost(t *testing.T) {
	const mib = 1 << 20
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) {
		c.Streams.HistoryMaxBytes = 2 * mib
		hostHistoryBytes(c, mib/2)
	}))
	a := grantedA(t, "a-history-kept", 7201, time.Now())
	env.PublishSigned(t, a, env.Host)
	confirmed(t, env.Recorder.Wait(t, "a-history-kept", testenv.Terminal), testenv.FingerprintOf(t, a, "sku-1001"))
	bigParked(t, env, "b-outcome", 400)
	env.Quiesce(t)
	if o, found := env.StoredOutcome(t, "a-history-kept"); !found || o.Kind != schema.KindConfirmed {
		t.Fatalf("A's outcome after B's flood of large outcomes: %+v, found %v; want its CONFIRMED readable", o, found)
	}
	testenv.WaitFor(t, "B's outcome history within its budget", func() bool {
		return hostBytes(t, env, env.Subjects.OutcomesStream(), env.Subjects.HostOutcomes(hostB)) <= mib/2
	})
	// B still reads its newest outcome.
	if _, found := env.StoredOutcome(t, refB("b-outcome-399")); !found {
		t.Error("B's newest outcome is gone")
	}
}

// TestActivityCannotEvictAnotherHost (issue 32, finding 2, activity): the
// activity bucket is one for every host and drops its oldest snapshots
// when full: B's large snapshots evicted A's. Each host's share is
// bounded in bytes now.
func TestActivityCannotEvictAnotherHost(t *testing.T) {
	const mib = 1 << 20
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) {
		c.Streams.HistoryMaxBytes = 2 * mib
		hostHistoryBytes(c, mib/2)
	}))
	a := grantedA(t, "a-activity-kept", 7301, time.Now())
	fp := testenv.FingerprintOf(t, a, "sku-1001")
	env.PublishSigned(t, a, env.Host)
	confirmed(t, env.Recorder.Wait(t, "a-activity-kept", testenv.Terminal), fp)
	env.Quiesce(t)
	bigParked(t, env, "b-activity", 400)
	env.Quiesce(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	act, err := env.Processor().Activity().Get(ctx, fp)
	if err != nil {
		t.Fatalf("A's activity snapshot after B's flood of large snapshots: %v", err)
	}
	if act.Receipt == nil || act.Receipt.Status != schema.StatusConfirmed {
		t.Errorf("A's activity snapshot: %+v", act)
	}
}

// TestJunkCannotEvictAnotherHostsIncidents (issue 32, finding 2,
// incidents): every message that fails authentication leaves an incident
// event; 12,000 unsigned 35-byte bodies from B erased every earlier event
// of every host. Events are rationed per host and code now (the rest are
// counted in actions_incidents_suppressed_total), and each host's share of
// the stream is bounded: A's events stay readable.
func TestJunkCannotEvictAnotherHostsIncidents(t *testing.T) {
	const mib = 1 << 20
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) {
		c.Streams.HistoryMaxBytes = mib
		hostHistoryBytes(c, mib/4)
	}))
	// A's event: its proposal parked (APPROVAL_REQUIRED), which B's junk
	// never produces.
	env.PublishSigned(t, intentOf("a-event", 7401), env.Host)
	env.Recorder.Wait(t, "a-event", testenv.Kind(schema.KindNeedsApproval))
	const junk = 6000
	for i := range junk {
		env.PublishWith(t, env.Subjects.Proposal(hostB), []byte(fmt.Sprintf(`{"proposal_id":"j%05d"}`, i)), nil)
	}
	h := settled(t, env)
	if n := h.count(approvalRequired); n != 1 {
		t.Fatalf("A's APPROVAL_REQUIRED event: %d in the incidents stream after B's %d junk messages, want 1 (events %v)", n, junk, h.codes())
	}
	got := h.count(unauthenticated)
	t.Logf("B's %d junk messages left %d ADMISSION_UNAUTHENTICATED events in the stream", junk, got)
	if got >= junk {
		t.Errorf("every one of B's junk messages left its event: nothing rations them")
	}
}

// hostBytes sums the bytes of the messages of stream under filter (a
// subject with a trailing >).
func hostBytes(t *testing.T, env *testenv.Env, stream, filter string) int {
	t.Helper()
	prefix := strings.TrimSuffix(filter, ">")
	n := 0
	each(t, context.Background(), env, stream, func(subject string, data []byte) {
		if strings.HasPrefix(subject, prefix) {
			n += len(subject) + len(data)
		}
	})
	return n
}

// hostHistoryBytes sets each host's share of the history.
func hostHistoryBytes(c *config.Config, n int64) { c.Streams.HostHistoryMaxBytes = n }
