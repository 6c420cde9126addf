package attack_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// TestJunkLeavesNoStorage (finding 8, the store): every malformed body with
// a readable id used to take its id (and leave a record for it), so a flood
// of junk grew Pebble without bound. Now a refusal before a proposal takes
// its ids — malformed, unauthenticated, tenant not permitted — and a grant
// that matches nothing leave no record: the store's record count does not
// grow with the junk.
func TestJunkLeavesNoStorage(t *testing.T) {
	env := testenv.New(t)
	// One genuine proposal first, so that whatever records the first
	// proposal creates exist before counting.
	warm := grantedA(t, "warm-1", 51, time.Now())
	env.PublishSigned(t, warm, env.Host)
	confirmed(t, env.Recorder.Wait(t, "warm-1", testenv.Terminal), testenv.FingerprintOf(t, warm, "sku-1001"))
	settled(t, env)
	before := records(t, env)

	const n = 500
	const m = 100
	for i := range n {
		env.PublishSigned(t, []byte(fmt.Sprintf(`{"proposal_id":"junk-%03d","schema":5}`, i)), env.Host)
		env.Publish(t, []byte(fmt.Sprintf(`{"proposal_id":"unsigned-%03d","junk":%d}`, i, i)))
	}
	for i := range m {
		env.PublishSigned(t, intentOf(fmt.Sprintf("b-as-a-%03d", i), i), env.OtherHost) // A's tenant
		env.PublishGrant(t, standalone(fmt.Sprintf("nothing-%03d", i), "sha256:"+strings.Repeat("1", 64), time.Now()), env.Host)
		env.PublishGrant(t, []byte(fmt.Sprintf(`{"proposal_id":"warm-1","n":%d}`, i)), nil)
	}
	h := settled(t, env)
	h.wantCodes(t, map[[2]string]int{
		malformed:          n,
		unauthenticated:    n + m,
		tenantNotPermitted: m,
		grantUnmatched:     m,
	})
	if h.total() != 1+n+m {
		t.Errorf("%d outcome messages, want %d (warm-1, each readable malformed id, each refused tenant)", h.total(), 1+n+m)
	}
	for _, id := range []string{"junk-000", "junk-499"} {
		if outs := h.on(env, hostA, id); len(outs) != 1 {
			t.Fatalf("%s: %+v", id, outs)
		} else {
			checkOutcome(t, outs[0], schema.KindIntegrationFailure, malformed)
		}
	}
	if outs := h.on(env, hostA, "unsigned-000"); len(outs) != 0 {
		t.Errorf("an unsigned body got an outcome: %+v", outs)
	}
	after := records(t, env)
	t.Logf("pebble records: %d before the junk, %d after %d junk messages", before, after, 2*n+3*m)
	if after != before {
		t.Errorf("pebble records grew from %d to %d with junk", before, after)
	}

	// Junk did not take the ids: a proper proposal may still use them.
	j := grantedA(t, "junk-000", 52, time.Now())
	env.PublishSigned(t, j, env.Host)
	outs := env.Recorder.WaitAll(t, "junk-000", testenv.Kind(schema.KindConfirmed))
	confirmed(t, outs[len(outs)-1], testenv.FingerprintOf(t, j, "sku-1001"))
}

// streamInfo returns a stream's current info.
func streamInfo(t *testing.T, env *testenv.Env, name string) *jetstream.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := env.JS.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestStreamLimits (finding 8, the streams; issue 20): streams were
// unbounded, so a host could fill the server's disk; then shared, so one
// host could fill them for everyone. Every stream is bounded: each host's
// ingress streams by its own budget (TestHostIngressBudget fills one),
// refusing new messages when full; the stage streams hold work, not
// history (a hand-off goes once acked) and refuse when full
// (TestStageStreamBackPressure); history drops its oldest. Each stream's
// limits are checked as configured on the server.
func TestStreamLimits(t *testing.T) {
	const mib = 1 << 20
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) {
		c.Streams.IngressMaxBytes = mib // the least config allows
		c.Streams.IngressMaxMsgs = 100
		c.Streams.HistoryMaxBytes = mib
	}))
	s := env.Subjects
	maxMsg := int32(env.Config.Admission.MaxPayloadBytes + 4096)
	stage := env.Config.Streams.StageMaxBytes
	for _, want := range []struct {
		stream    string
		maxBytes  int64
		maxMsgs   int64
		discard   jetstream.DiscardPolicy
		retention jetstream.RetentionPolicy
		maxMsg    int32
		direct    bool
	}{
		{s.HostProposalsStream(hostA), mib, 100, jetstream.DiscardNew, jetstream.WorkQueuePolicy, maxMsg, false},
		{s.HostGrantsStream(hostA), mib, 100, jetstream.DiscardNew, jetstream.WorkQueuePolicy, maxMsg, false},
		{s.HostProposalsStream(hostB), mib, 100, jetstream.DiscardNew, jetstream.WorkQueuePolicy, maxMsg, false},
		{s.HostGrantsStream(hostB), mib, 100, jetstream.DiscardNew, jetstream.WorkQueuePolicy, maxMsg, false},
		{s.OutcomesStream(), mib, -1, jetstream.DiscardOld, jetstream.LimitsPolicy, -1, true},
		{s.IncidentsStream(), mib, -1, jetstream.DiscardOld, jetstream.LimitsPolicy, -1, true},
		{s.StageStream(subjects.StageGrounding), stage, -1, jetstream.DiscardNew, jetstream.WorkQueuePolicy, -1, false},
		{s.StageStream(subjects.StageAuthorization), stage, -1, jetstream.DiscardNew, jetstream.WorkQueuePolicy, -1, false},
		{s.StageStream(subjects.StageDispatch), stage, -1, jetstream.DiscardNew, jetstream.WorkQueuePolicy, -1, false},
		{s.TimersStream(subjects.StageAuthorization), stage, -1, jetstream.DiscardNew, jetstream.WorkQueuePolicy, -1, false},
		{s.TimersStream(subjects.StageReconciliation), stage, -1, jetstream.DiscardNew, jetstream.WorkQueuePolicy, -1, false},
		{s.HostParkedStream(hostA), env.Config.Streams.HostParkedMaxBytes, -1, jetstream.DiscardNew, jetstream.LimitsPolicy, -1, false},
		{s.HostParkedStream(hostB), env.Config.Streams.HostParkedMaxBytes, -1, jetstream.DiscardNew, jetstream.LimitsPolicy, -1, false},
		{s.HostHeldStream(hostA), env.Config.Streams.HostHeldMaxBytes, -1, jetstream.DiscardNew, jetstream.LimitsPolicy, -1, false},
		{s.HostHeldStream(hostB), env.Config.Streams.HostHeldMaxBytes, -1, jetstream.DiscardNew, jetstream.LimitsPolicy, -1, false},
	} {
		c := streamInfo(t, env, want.stream).Config
		if c.MaxBytes != want.maxBytes || c.MaxMsgs != want.maxMsgs || c.Discard != want.discard || c.Retention != want.retention ||
			c.MaxMsgSize != want.maxMsg || c.AllowDirect != want.direct || c.MaxAge <= 0 {
			t.Errorf("stream %s: max_bytes %d max_msgs %d discard %v retention %v max_msg_size %d allow_direct %v max_age %s; want %d %d %v %v %d %v",
				want.stream, c.MaxBytes, c.MaxMsgs, c.Discard, c.Retention, c.MaxMsgSize, c.AllowDirect, c.MaxAge,
				want.maxBytes, want.maxMsgs, want.discard, want.retention, want.maxMsg, want.direct)
		}
	}
	// No stream every host shares takes their proposals or grants.
	for _, shared := range []string{s.ProposalsStream(), s.GrantsStream(), s.StageStream(subjects.StageReconciliation),
		s.KeptParkedStream(), s.KeptHeldStream(), s.LegacyParkedStream(), s.LegacyHeldStream()} {
		if _, err := env.JS.Stream(context.Background(), shared); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("stream %s exists: %v", shared, err)
		}
	}
}

// TestHistoryDropsOldest (finding 8, history): the outcomes and incidents
// streams, and the activity bucket that shares their bound, drop their
// oldest messages when full instead of refusing new ones. Before, the
// activity bucket (a JetStream KV bucket, which refuses writes when full)
// filled with B's snapshots and then every stage's activity update failed:
// every tenant's parked proposal was retried and ended
// INTEGRATION_FAILURE/PROCESSING_FAILED after its NEEDS_APPROVAL, and
// stages stayed busy retrying. B filling history cannot touch A.
func TestHistoryDropsOldest(t *testing.T) {
	const mib = 1 << 20
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) { c.Streams.HistoryMaxBytes = mib }))
	if c := streamInfo(t, env, "KV_"+env.Subjects.ActivityBucket()).Config; c.MaxBytes != mib || c.Discard != jetstream.DiscardOld {
		t.Errorf("activity bucket: max_bytes %d discard %v, want %d and discard old", c.MaxBytes, c.Discard, mib)
	}
	// B parks proposals whose summaries are as large as allowed: each
	// NEEDS_APPROVAL outcome and each activity snapshot carries ~8 KB.
	summary := strings.Repeat("\U0001D11E", schema.MaxSummaryLen)
	const n = 160
	for i := range n {
		p := testenv.AsOtherTenant(intentOf(fmt.Sprintf("fill-%03d", i), i))
		testenv.Set(p, "intent.display.summary", summary)
		env.PublishSigned(t, p, env.OtherHost)
	}
	for i := range n {
		checkOutcome(t, env.Recorder.Wait(t, refB(fmt.Sprintf("fill-%03d", i)), testenv.Kind(schema.KindNeedsApproval)), schema.KindNeedsApproval, approvalRequired)
	}
	a := grantedA(t, "after-fill", 61, time.Now())
	fpA := testenv.FingerprintOf(t, a, "sku-1001")
	env.PublishSigned(t, a, env.Host)
	confirmed(t, env.Recorder.Wait(t, "after-fill", testenv.Terminal), fpA)
	park := intentOf("after-fill-parked", 62)
	fpPark := testenv.FingerprintOf(t, park, "sku-1001")
	env.PublishSigned(t, park, env.Host)
	env.Recorder.Wait(t, "after-fill-parked", testenv.Kind(schema.KindNeedsApproval))

	h := settled(t, env)
	if outs := h.on(env, hostA, "after-fill-parked"); len(outs) != 1 || outs[0].Kind != schema.KindNeedsApproval {
		t.Errorf("A's parked proposal: %+v, want it parked", outs)
	}
	h.wantCodes(t, map[[2]string]int{approvalRequired: n + 1})
	pending(t, env, n+1)
	m := env.Processor().Metrics()
	for _, st := range []string{subjects.StageAuthorization, subjects.StageDispatch} {
		for _, r := range []string{"retry", "gave_up"} {
			if got := testutil.ToFloat64(m.StageMessages.WithLabelValues(st, r)); got != 0 {
				t.Errorf("actions_stage_messages_total{stage=%q,result=%q} = %v", st, r, got)
			}
		}
	}
	out := streamInfo(t, env, env.Subjects.OutcomesStream()).State
	if out.Bytes > mib || out.FirstSeq <= 1 || out.LastSeq != n+2 {
		t.Errorf("outcomes stream: %d bytes, seq %d–%d; want at most %d bytes, the oldest dropped, %d published", out.Bytes, out.FirstSeq, out.LastSeq, mib, n+2)
	}
	act := streamInfo(t, env, "KV_"+env.Subjects.ActivityBucket()).State
	if act.Bytes > mib || act.FirstSeq <= 1 {
		t.Errorf("activity bucket: %d bytes from seq %d; want at most %d bytes with the oldest dropped", act.Bytes, act.FirstSeq, mib)
	}
	for _, fp := range []string{fpA, fpPark} {
		if _, err := env.Processor().Activity().Get(context.Background(), fp); err != nil {
			t.Errorf("activity of A's %s: %v", fp, err)
		}
	}
	t.Logf("outcomes stream: %d messages, %d bytes, seq %d–%d; activity: %d messages, %d bytes", out.Msgs, out.Bytes, out.FirstSeq, out.LastSeq, act.Msgs, act.Bytes)

	// Every start keeps it so (the client creates and updates buckets with
	// discard new).
	env.Restart(t)
	if c := streamInfo(t, env, "KV_"+env.Subjects.ActivityBucket()).Config; c.Discard != jetstream.DiscardOld {
		t.Errorf("activity bucket after a restart: discard %v", c.Discard)
	}
	env.PublishGrant(t, standalone("after-fill-parked", fpPark, time.Now()), env.Host)
	confirmed(t, env.Recorder.Wait(t, "after-fill-parked", testenv.Terminal), fpPark)
}
