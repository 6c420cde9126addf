package attack_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// Issue 20: no host can spend another's budget. Each test is one of the
// issue's findings, replayed: the attacker refused or slowed alone, the
// victim unaffected.

// publishAs publishes body (signed by signer unless nil) on subject with
// kp's own NATS login, and returns the publish error.
func publishAs(t *testing.T, js jetstream.JetStream, subject string, body []byte, hdr nats.Header, msgID string) (*jetstream.PubAck, error) {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = body
	for k, v := range hdr {
		m.Header[k] = v
	}
	if msgID != "" {
		m.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return js.PublishMsg(ctx, m)
}

func jsOf(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestHostIngressBudget (issue 20, finding 1): one host filled the shared
// ingress stream with unsigned junk in 44 ms and every host's proposals
// were refused for a week. Now each host has its own ingress streams: B,
// with only its NATS login, fills its own budget and is refused; A's
// signed proposal is taken and confirmed; the junk leaves B's stream as
// admission refuses it, so B's budget frees at once. The same for grants.
func TestHostIngressBudget(t *testing.T) {
	const mib = 1 << 20
	env := testenv.New(t, testenv.WithAuth(), testenv.NotStarted(), testenv.WithConfig(func(c *config.Config) {
		c.Streams.IngressMaxBytes = mib
	}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The streams, with nothing consuming them yet: the junk stays.
	if _, err := engine.EnsureStreams(ctx, env.JS, env.Subjects, env.Config); err != nil {
		t.Fatal(err)
	}
	b := jsOf(t, env.ConnectAs(t, env.OtherHost))
	a := jsOf(t, env.ConnectAs(t, env.Host))
	pad := strings.Repeat("x", 60_000)
	fill := func(subject string) int {
		for i := 0; ; i++ {
			if i > 40 {
				t.Fatalf("%s took %d messages of 60 KB with a 1 MiB budget", subject, i)
			}
			_, err := publishAs(t, b, subject, []byte(fmt.Sprintf(`{"proposal_id":"junk-%02d","pad":%q}`, i, pad)), nil, "")
			if err != nil {
				if !strings.Contains(err.Error(), "maximum bytes exceeded") {
					t.Fatalf("%s refused with %v, want maximum bytes exceeded", subject, err)
				}
				return i
			}
		}
	}
	junk := fill(env.Subjects.Proposal(hostB))
	junkGrants := fill(env.Subjects.Grant(hostB))
	t.Logf("B's budget took %d junk proposals and %d junk grants of 60 KB, then refused", junk, junkGrants)

	// A is unaffected: its signed proposal and a grant are taken.
	p := grantedA(t, "a-beside-junk", 81, time.Now())
	body := testenv.Body(t, p)
	if _, err := publishAs(t, a, env.Subjects.Proposal(hostA), body, testenv.Sign(t, env.Host, body), ""); err != nil {
		t.Fatalf("A's proposal refused while B's budget is full: %v", err)
	}
	park := intentOf("a-parked-beside-junk", 82)
	body = testenv.Body(t, park)
	if _, err := publishAs(t, a, env.Subjects.Proposal(hostA), body, testenv.Sign(t, env.Host, body), ""); err != nil {
		t.Fatalf("A's second proposal refused: %v", err)
	}
	env.Start(t)
	confirmed(t, env.Recorder.Wait(t, "a-beside-junk", testenv.Terminal), testenv.FingerprintOf(t, p, "sku-1001"))
	o := env.Recorder.Wait(t, "a-parked-beside-junk", testenv.Kind(schema.KindNeedsApproval))
	g := testenv.Grant(o.Approval.Fingerprint, time.Now(), nil)
	g["proposal_id"] = "a-parked-beside-junk"
	gb := testenv.Body(t, g)
	if _, err := publishAs(t, a, env.Subjects.Grant(hostA), gb, testenv.Sign(t, env.Host, gb), ""); err != nil {
		t.Fatalf("A's grant refused: %v", err)
	}
	checkOutcome(t, env.Recorder.Wait(t, "a-parked-beside-junk", testenv.Terminal), schema.KindConfirmed)

	// The junk is refused unread (no signature) and leaves B's streams.
	waitEvents(t, env, unauthenticated, junk+junkGrants)
	env.Quiesce(t)
	for _, st := range []string{env.Subjects.HostProposalsStream(hostB), env.Subjects.HostGrantsStream(hostB)} {
		if n := streamInfo(t, env, st).State.Msgs; n != 0 {
			t.Errorf("%s still holds %d messages after admission refused them", st, n)
		}
	}
	if _, err := publishAs(t, b, env.Subjects.Proposal(hostB), []byte(`{"proposal_id":"again"}`), nil, ""); err != nil {
		t.Errorf("B's budget did not free: %v", err)
	}
}

// TestHostMsgIDsAreScoped (issue 20, finding 6): a host's Nats-Msg-Id was
// deduplicated against every host's, so B could make A's signed proposal a
// dropped duplicate by sending its id first. Each host's ingress now has
// its own duplicate window.
func TestHostMsgIDsAreScoped(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	b := jsOf(t, env.ConnectAs(t, env.OtherHost))
	a := jsOf(t, env.ConnectAs(t, env.Host))
	if _, err := publishAs(t, b, env.Subjects.Proposal(hostB), []byte(`{"squat":true}`), nil, "shared-msgid-t1"); err != nil {
		t.Fatal(err)
	}
	p := grantedA(t, "a-msgid", 83, time.Now())
	body := testenv.Body(t, p)
	ack, err := publishAs(t, a, env.Subjects.Proposal(hostA), body, testenv.Sign(t, env.Host, body), "shared-msgid-t1")
	if err != nil {
		t.Fatal(err)
	}
	if ack.Duplicate {
		t.Fatal("A's proposal was dropped as a duplicate of B's message id")
	}
	confirmed(t, env.Recorder.Wait(t, "a-msgid", testenv.Terminal), testenv.FingerprintOf(t, p, "sku-1001"))
}

// TestForgedHandOffCannotSquatItsID (issue 20, finding 6): with NATS
// authentication off any local process may publish on internal subjects;
// a forged hand-off is terminated by its seal, but it used to take the
// real hand-off's predictable message id (<stage>/<input seq>/n0), and the
// real proposal vanished without an outcome. Message ids are keyed now.
func TestForgedHandOffCannotSquatItsID(t *testing.T) {
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) { c.Admission.AllowUnsigned = true }))
	grounding := env.Subjects.Stage(subjects.StageGrounding, subjects.KindProposal, hostA+".squatted")
	for seq := 1; seq <= 20; seq++ {
		for _, id := range []string{
			fmt.Sprintf("admission/%d/n0", seq),
			fmt.Sprintf("admission/%s/%d/n0", env.Subjects.ProposalsStream(), seq),
		} {
			if _, err := publishAs(t, env.JS, grounding, []byte(`{"forged":true}`), nil, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 5 {
		p := grantedA(t, fmt.Sprintf("after-squat-%d", i), 90+i, time.Now())
		env.PublishSigned(t, p, env.Host)
		confirmed(t, env.Recorder.Wait(t, fmt.Sprintf("after-squat-%d", i), testenv.Terminal), testenv.FingerprintOf(t, p, "sku-1001"))
	}
	waitEvents(t, env, pc(schema.PhaseGrounding, schema.CodeInternalMessageRejected), 40)
}

// TestRepeatsDoNotGrowHistory (issue 20, finding 3): every repeat (a new
// delivery id, the same body) republished the recorded outcome, so 400
// repeats of one parked proposal with an 8.5 KB summary evicted every
// host's outcome history. A repeat now republishes at most once per
// window: the history does not grow with them, and A's outcome stays.
func TestRepeatsDoNotGrowHistory(t *testing.T) {
	const mib = 2 << 20
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) { c.Streams.HistoryMaxBytes = mib }))
	a := grantedA(t, "a-history", 84, time.Now())
	env.PublishSigned(t, a, env.Host)
	confirmed(t, env.Recorder.Wait(t, "a-history", testenv.Terminal), testenv.FingerprintOf(t, a, "sku-1001"))
	p := testenv.AsOtherTenant(intentOf("b-parked", 85))
	testenv.Set(p, "intent.display.summary", strings.Repeat("\U0001D11E", schema.MaxSummaryLen))
	env.PublishSigned(t, p, env.OtherHost)
	env.Recorder.Wait(t, refB("b-parked"), testenv.Kind(schema.KindNeedsApproval))
	env.Quiesce(t)
	before := streamInfo(t, env, env.Subjects.OutcomesStream()).State
	const repeats = 400
	for i := range repeats {
		testenv.Set(p, "context.delivery.delivery_id", fmt.Sprintf("delivery:repeat-%03d", i))
		env.PublishSigned(t, p, env.OtherHost)
	}
	env.Quiesce(t)
	after := streamInfo(t, env, env.Subjects.OutcomesStream()).State
	t.Logf("outcomes stream: %d messages, %d bytes before %d repeats; %d, %d after", before.Msgs, before.Bytes, repeats, after.Msgs, after.Bytes)
	if after.Msgs > before.Msgs+2 {
		t.Errorf("%d repeats added %d outcome messages, want at most 2 (one per window)", repeats, after.Msgs-before.Msgs)
	}
	if _, found := env.StoredOutcome(t, "a-history"); !found {
		t.Error("A's outcome is gone from the history")
	}
}

// TestRepeatsQuietLive (issue 32, finding 4: live fan-out of repeats): a
// repeat stored once per window, but every repeat was still published
// live — 400 repeats of B's proposal with an 8.6 KB outcome sent 401
// messages to B's subscribers and to every operator and console on the
// outcome subjects. Now the outcomes are sent live by the outcome stream
// once stored, so a repeat the stream drops as a duplicate sends nothing:
// the first outcome and one replay per window, however many repeats. B
// still reads the last outcome by a direct get.
func TestRepeatsQuietLive(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	bc := env.ConnectAs(t, env.OtherHost)
	live, err := bc.SubscribeSync(env.Subjects.HostOutcomes(hostB))
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.AsOtherTenant(intentOf("b-quiet", 86))
	testenv.Set(p, "intent.display.summary", strings.Repeat("\U0001D11E", schema.MaxSummaryLen))
	env.PublishSigned(t, p, env.OtherHost)
	env.Recorder.Wait(t, refB("b-quiet"), testenv.Kind(schema.KindNeedsApproval))
	const repeats = 400
	first := replayWindow()
	for i := range repeats {
		testenv.Set(p, "context.delivery.delivery_id", fmt.Sprintf("delivery:quiet-%03d", i))
		env.PublishSigned(t, p, env.OtherHost)
	}
	env.Quiesce(t)
	// The windows are the clock's 10-minute ones: a burst may straddle two.
	want := 1 + int(replayWindow()-first+1)
	if err := bc.Flush(); err != nil {
		t.Fatal(err)
	}
	var got, bytes int
	for {
		m, err := live.NextMsg(200 * time.Millisecond)
		if err != nil {
			break
		}
		got++
		bytes += len(m.Data)
	}
	operators := len(env.Recorder.Outcomes(refB("b-quiet")))
	t.Logf("%d repeats: B received %d live messages (%d bytes); a subscriber to every outcome %d", repeats, got, bytes, operators)
	if got > want || operators > want {
		t.Errorf("%d repeats sent B %d live messages and every operator %d, want at most %d (the outcome, one replay per window)", repeats, got, operators, want)
	}
	m, err := bc.Request(subjects.DirectGetLast(env.Subjects.OutcomesStream(), env.Subjects.Outcome(hostB, "b-quiet")), nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var o schema.Outcome
	if err := schema.Decode(m.Data, &o); err != nil || o.Kind != schema.KindNeedsApproval {
		t.Errorf("B's direct get of its last outcome: %s, %v", o.Kind, err)
	}
}

// TestHostHistoryBudget (issue 20, finding 3): the outcome history is one
// stream for every host; a host that produces outcomes fast enough pushes
// every other host's out. Each host's outcomes are kept within its own
// budget: past it, that host's oldest go, never another's.
func TestHostHistoryBudget(t *testing.T) {
	const budget = 40
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) { c.Streams.HostHistoryMaxMsgs = budget }))
	var mine []string
	for i := range 5 {
		id := fmt.Sprintf("a-kept-%d", i)
		p := grantedA(t, id, 100+i, time.Now())
		env.PublishSigned(t, p, env.Host)
		env.Recorder.Wait(t, id, testenv.Terminal)
		mine = append(mine, id)
	}
	// B's proposals, each refused at once with an outcome of its own.
	const flood = 400
	for i := range flood {
		env.PublishSigned(t, []byte(fmt.Sprintf(`{"proposal_id":"b-flood-%03d","schema":5}`, i)), env.OtherHost)
	}
	env.Recorder.Wait(t, refB(fmt.Sprintf("b-flood-%03d", flood-1)), testenv.Terminal)
	env.Quiesce(t)
	testenv.WaitFor(t, "B's history trimmed to its budget", func() bool {
		n := 0
		each(t, context.Background(), env, env.Subjects.OutcomesStream(), func(subject string, _ []byte) {
			if strings.HasPrefix(subject, env.Subjects.HostOutcomes(hostB)[:len(env.Subjects.HostOutcomes(hostB))-1]) {
				n++
			}
		})
		return n <= budget+budget/16
	})
	for _, id := range mine {
		if o, found := env.StoredOutcome(t, id); !found || o.Kind != schema.KindConfirmed {
			t.Errorf("A's %s: %+v, %v; want its CONFIRMED still readable", id, o, found)
		}
	}
}

// TestStageStreamBackPressure (issue 20, finding 2): stage streams kept
// every hand-off for a week and, full, failed everyone's proposals while
// /readyz said ok. They hold work now — a hand-off goes once its stage is
// done with it — and a full one pushes back: the stage before keeps its
// input and publishes again once there is room; /readyz says which stage
// is full meanwhile, and actions_stage_full is 1. Nothing fails, nothing
// is lost, and once the provider answers everything drains.
func TestStageStreamBackPressure(t *testing.T) {
	const mib = 1 << 20
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) {
		c.Streams.StageMaxBytes = mib
		for i := range c.Providers {
			if c.Providers[i].Name == "inventory" {
				c.Providers[i].Timeout = 5 * time.Minute
			}
		}
	}))
	connector := hold(t, env.NC, env.Subjects.ProviderDispatch("inventory"), confirmedReply)
	// B's granted proposals for a provider that does not answer yet: they
	// pile up, delivered and unacknowledged, in the dispatch stream.
	now := time.Now()
	pad := strings.Repeat("p", 4000)
	const n = 400
	for i := range n {
		p := testenv.Set(testenv.AsOtherTenant(intentOf(fmt.Sprintf("bp-%03d", i), 200+i)), "intent.provider", "inventory")
		testenv.Set(p, "intent.payload", map[string]any{"quantity": 200 + i, "pad": pad})
		env.PublishSigned(t, testenv.Granted(t, p, "sku-1001", now), env.OtherHost)
	}
	full := env.Processor().Metrics().StageFull.WithLabelValues(subjects.StageDispatch)
	testenv.WaitFor(t, "the dispatch stream full", func() bool { return testutil.ToFloat64(full) == 1 })
	if code, body := readyz(t, env); code != http.StatusServiceUnavailable || !strings.Contains(body, " full") {
		t.Errorf("/readyz while the dispatch stream is full: %d %q", code, body)
	}
	if st := streamInfo(t, env, env.Subjects.StageStream(subjects.StageDispatch)).State; st.Bytes > mib {
		t.Errorf("dispatch stream holds %d bytes, over its %d", st.Bytes, mib)
	}
	connector.release()
	for i := range n {
		checkOutcome(t, env.Recorder.Wait(t, refB(fmt.Sprintf("bp-%03d", i)), testenv.Terminal), schema.KindConfirmed)
	}
	env.Quiesce(t)
	testenv.WaitFor(t, "the dispatch stream taking hand-offs again", func() bool { return testutil.ToFloat64(full) == 0 })
	if code, body := readyz(t, env); code != http.StatusOK {
		t.Errorf("/readyz after the drain: %d %q", code, body)
	}
	// Work, not history: drained, the stage streams are empty.
	for _, st := range []string{subjects.StageGrounding, subjects.StageAuthorization, subjects.StageDispatch} {
		if n := streamInfo(t, env, env.Subjects.StageStream(st)).State.Msgs; n != 0 {
			t.Errorf("%s stream holds %d messages after the drain", st, n)
		}
	}
	h := settled(t, env)
	for code, k := range h.codes() {
		if strings.Contains(code, string(schema.CodeProcessingFailed)) {
			t.Errorf("%d outcomes %s: back-pressure failed proposals", k, code)
		}
	}
	m := env.Processor().Metrics()
	for _, st := range []string{subjects.StageAuthorization, subjects.StageGrants} {
		if got := testutil.ToFloat64(m.StageMessages.WithLabelValues(st, "gave_up")); got != 0 {
			t.Errorf("%s gave up on %v messages", st, got)
		}
	}
}

// readyz asks the processor's /readyz.
func readyz(t *testing.T, env *testenv.Env) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + env.Processor().MetricsAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestFairnessBetweenHosts (issue 20, finding 4): a burst of B's
// proposals made A's wait behind all of them (52 ms became 5 s). Each
// host has its own consumers at every stage, and a stage's fetchers take
// turns: A's proposal, sent after B's burst, is answered while most of
// B's burst is still waiting.
func TestFairnessBetweenHosts(t *testing.T) {
	env := testenv.New(t, testenv.NotStarted())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := engine.EnsureStreams(ctx, env.JS, env.Subjects, env.Config); err != nil {
		t.Fatal(err)
	}
	// B's burst is all queued before A's proposal: the processor starts
	// on both.
	now := time.Now()
	const burst = 1500
	for i := range burst {
		env.PublishSigned(t, grantedB(t, fmt.Sprintf("burst-%04d", i), 1000+i, now), env.OtherHost)
	}
	a := grantedA(t, "a-after-burst", 86, now)
	env.PublishSigned(t, a, env.Host)
	start := time.Now()
	env.Start(t)
	confirmed(t, env.Recorder.Wait(t, "a-after-burst", testenv.Terminal), testenv.FingerprintOf(t, a, "sku-1001"))
	took := time.Since(start)
	done := 0
	for i := range burst {
		if len(env.Recorder.Outcomes(refB(fmt.Sprintf("burst-%04d", i)))) > 0 {
			done++
		}
	}
	t.Logf("A's proposal answered in %s, when %d of B's %d were", took, done, burst)
	if done > burst/2 {
		t.Errorf("A's proposal waited behind %d of B's %d: no turn-taking between hosts", done, burst)
	}
	// B's burst is a backlog: 1,500 proposals through every stage under
	// -race on a shared machine take longer than one Wait's bound.
	env.Recorder.WaitAllWithin(t, refB(fmt.Sprintf("burst-%04d", burst-1)), testenv.Terminal, 3*time.Minute)
}
