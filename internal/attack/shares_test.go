package attack_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// Issue 32: no host can stall another, anywhere. Each test replays one of
// the findings as a hostile tenant (host B) would, and checks that
// host A's proposals are still answered in their usual time and that A's
// history, activity and incident events stay readable.
//
// "Within seconds" is a wait with a generous deadline (soon), never a
// measurement: on the code before the fix A waited for B's approvals to
// time out (approval.ttl, two minutes here) or forever.

// soon bounds how long A's proposals may take while B attacks: far above
// their usual tens of milliseconds (a shared two-core machine under -race),
// far below the stalls the attacks caused (approval.ttl and more).
const soon = 30 * time.Second

// fitted sets each host's pipeline bound to the most that fits the stage
// streams (config.BudgetWarnings has nothing to say of them): what a
// careful operator runs.
func fitted(c *config.Config) {
	largest := int64(c.Admission.MaxPayloadBytes) + config.EnvelopeAllowance
	c.Streams.HostPipelineMaxMsgs = c.Streams.StageMaxBytes / (int64(len(c.Hosts)) * largest)
}

// roomyPipeline lets each host have more proposals inside the pipeline
// than a stage stream holds (config.BudgetWarnings warns of it): a stage
// stream can fill.
func roomyPipeline(c *config.Config) { c.Streams.HostPipelineMaxMsgs = 10_000 }

// noWarnings fails unless the configuration's budgets fit its streams.
func noWarnings(t *testing.T, env *testenv.Env) {
	t.Helper()
	if w := env.Config.BudgetWarnings(); len(w) > 0 {
		t.Fatalf("budget warnings: %q", w)
	}
}

// padded is B's proposal id with a payload of pad bytes, no grant.
func padded(id string, quantity, pad int) map[string]any {
	p := testenv.AsOtherTenant(intentOf(id, quantity))
	return testenv.Set(p, "intent.payload", map[string]any{"quantity": quantity, "pad": strings.Repeat("p", pad)})
}

// aStillServed publishes A's granted proposal and A's proposal without a
// grant, and checks within soon that the first is confirmed and the second
// parked: A is answered whatever B holds.
func aStillServed(t *testing.T, env *testenv.Env, tag string, quantity int) {
	t.Helper()
	aStillServedPadded(t, env, tag, quantity, 0)
}

// aStillServedPadded is aStillServed with payloads of pad bytes.
func aStillServedPadded(t *testing.T, env *testenv.Env, tag string, quantity, pad int) {
	t.Helper()
	now := time.Now()
	payload := func(q int) map[string]any {
		p := map[string]any{"quantity": q}
		if pad > 0 {
			p["pad"] = strings.Repeat("a", pad)
		}
		return p
	}
	granted := testenv.Granted(t, testenv.Set(intentOf("a-granted-"+tag, quantity), "intent.payload", payload(quantity)), "sku-1001", now)
	ask := testenv.Set(intentOf("a-asks-"+tag, quantity+1), "intent.payload", payload(quantity+1))
	start := time.Now()
	env.PublishSigned(t, granted, env.Host)
	env.PublishSigned(t, ask, env.Host)
	confirmed(t, env.Recorder.WaitAllWithin(t, "a-granted-"+tag, testenv.Terminal, soon)[0], testenv.FingerprintOf(t, granted, "sku-1001"))
	outs := env.Recorder.WaitAllWithin(t, "a-asks-"+tag, testenv.Kind(schema.KindNeedsApproval), soon)
	checkOutcome(t, outs[len(outs)-1], schema.KindNeedsApproval, approvalRequired)
	t.Logf("A's granted proposal confirmed and its other parked within %s of publishing", time.Since(start))
}

// TestParkedFillCannotStallAnotherHost (issue 32, finding 1): the parked
// stream was one for every host. B's ungranted proposals with 50 KB
// payloads filled it; authorization then retried B's parks as transient,
// B's proposals filled the shared authorization stream, and no host's
// proposal could be handed on until B's first batch timed out (A waited
// ~110 s; at default sizes as long as approval.ttl, renewable by B). Now
// each host parks within its own budget: B's parks over it end at once
// with DENIED/APPROVALS_PENDING_EXCEEDED, and A's granted proposal
// confirms and its ungranted one parks within seconds.
func TestParkedFillCannotStallAnotherHost(t *testing.T) {
	const mib = 1 << 20
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) {
		c.Streams.StageMaxBytes = mib
		c.Streams.HostParkedMaxBytes = mib
		fitted(c)
		c.Approval.TTL = 2 * time.Minute
		c.Streams.MaxAge = engine.DuplicateWindow
	}))
	noWarnings(t, env)
	const big, small = 25, 600
	for i := range big {
		env.PublishSigned(t, padded(fmt.Sprintf("b-big-%02d", i), i, 50_000), env.OtherHost)
	}
	for i := range small {
		env.PublishSigned(t, testenv.AsOtherTenant(intentOf(fmt.Sprintf("b-small-%03d", i), 100+i)), env.OtherHost)
	}
	aStillServed(t, env, "parked", 7001)

	// Every one of B's proposals is answered too: parked, or refused at
	// once for want of room in B's own budget — never left waiting in a
	// stream A needs.
	parkedB, refused := 0, 0
	for _, id := range append(ids("b-big-%02d", big), ids("b-small-%03d", small)...) {
		o := env.Recorder.WaitAllWithin(t, refB(id), testenv.Count(1), soon)[0]
		switch o.Kind {
		case schema.KindNeedsApproval:
			parkedB++
		case schema.KindDenied:
			checkOutcome(t, o, schema.KindDenied, pc(schema.PhaseAuthorization, schema.CodeApprovalsPendingExceeded))
			refused++
		default:
			t.Fatalf("B's %s: %+v", id, o)
		}
	}
	t.Logf("B: %d parked, %d refused beyond its parked budget", parkedB, refused)
	if refused == 0 {
		t.Error("none of B's parks was refused: its budget did not bind")
	}
	if code, body := readyz(t, env); code != http.StatusOK {
		t.Errorf("/readyz while one host's parked budget is spent: %d %q (a host at its own bound is not the processor's failure)", code, body)
	}
}

func ids(format string, n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = fmt.Sprintf(format, i)
	}
	return out
}

// TestHeldFillCannotStallAnotherHost (issue 32, finding 1, held): the
// envelopes of dispatches whose effect is unknown were kept in one stream
// for every host. 28 of B's 50 KB envelopes to a provider that never
// answers filled it; dispatch then retried B's hand-offs, B's proposals
// filled the shared dispatch stream, and authorization could hand on
// nobody's. Each host keeps its own now: past its budget an envelope is
// not kept (should the request turn out lost, reconciliation ends the
// intent FAILED_BEFORE_DISPATCH instead of sending it again), and A is
// answered within seconds.
func TestHeldFillCannotStallAnotherHost(t *testing.T) {
	const mib = 1 << 20
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) {
		c.Streams.StageMaxBytes = mib
		c.Streams.HostHeldMaxBytes = mib
		fitted(c)
		for i := range c.Providers {
			if c.Providers[i].Name == "inventory" {
				c.Providers[i].Timeout = 200 * time.Millisecond
			}
		}
	}))
	noWarnings(t, env)
	// A connector that takes every request and never answers: each of
	// B's dispatches times out, its effect unknown.
	connector := hold(t, env.NC, env.Subjects.ProviderDispatch("inventory"), confirmedReply)
	hold(t, env.NC, env.Subjects.ProviderReconcile("inventory"), `{"outcome":"indeterminate"}`)
	now := time.Now()
	const n = 60
	for i := range n {
		p := testenv.Set(padded(fmt.Sprintf("b-held-%02d", i), 300+i, 50_000), "intent.provider", "inventory")
		env.PublishSigned(t, testenv.Granted(t, p, "sku-1001", now), env.OtherHost)
	}
	// About 1 MiB of B's envelopes (18) were kept and the provider has
	// had more of B's requests since: a shared held stream is full, and
	// so would be the dispatch stream behind it.
	waitCount(t, connector, 34)
	// A's proposals as large as B's: no room left over by B's fits them.
	aStillServedPadded(t, env, "held", 7101, 50_000)
	for i := range n {
		o := env.Recorder.WaitAllWithin(t, refB(fmt.Sprintf("b-held-%02d", i)), testenv.Count(1), soon)[0]
		if o.Kind != schema.KindReconciliationRequired {
			t.Errorf("B's b-held-%02d: %+v, want RECONCILIATION_REQUIRED (its provider never answered)", i, o)
		}
	}
	m := env.Processor().Metrics()
	if got := testutil.ToFloat64(m.StageMessages.WithLabelValues(subjects.StageDispatch, "gave_up")); got != 0 {
		t.Errorf("dispatch gave up on %v messages", got)
	}
}

// TestReadyzStaysUnreadyWhileAStageRefuses (issue 32, finding 3):
// /readyz and actions_stage_full were cleared by any successful hand-off,
// so they flapped while a stage was refusing work. They stay unready from
// the first refusal until no refusal is outstanding: here the dispatch
// stream is full, a provider answers one request at a time, each answer
// frees room for exactly one waiting hand-off — and /readyz stays 503
// naming the stage after each, until every waiting hand-off is in.
func TestReadyzStaysUnreadyWhileAStageRefuses(t *testing.T) {
	const mib = 1 << 20
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) {
		c.Streams.StageMaxBytes = mib
		roomyPipeline(c)
		for i := range c.Providers {
			if c.Providers[i].Name == "inventory" {
				c.Providers[i].Timeout = 5 * time.Minute
				c.Providers[i].MaxInFlight = 1
			}
		}
	}))
	connector := hold(t, env.NC, env.Subjects.ProviderDispatch("inventory"), confirmedReply)
	now := time.Now()
	const n = 300
	for i := range n {
		p := testenv.Set(padded(fmt.Sprintf("rz-%03d", i), 800+i, 4000), "intent.provider", "inventory")
		env.PublishSigned(t, testenv.Granted(t, p, "sku-1001", now), env.OtherHost)
	}
	full := env.Processor().Metrics().StageFull.WithLabelValues(subjects.StageDispatch)
	testenv.WaitFor(t, "the dispatch stream full", func() bool { return testutil.ToFloat64(full) == 1 })
	dispatch := env.Subjects.StageStream(subjects.StageDispatch)
	for round := range 5 {
		last := streamInfo(t, env, dispatch).State.LastSeq
		connector.releaseOne(t)
		// A waiting hand-off took the room the answer freed: a publish
		// to the full stream succeeded while others still wait.
		testenv.WaitFor(t, "a waiting hand-off taken", func() bool { return streamInfo(t, env, dispatch).State.LastSeq > last })
		code, body := readyz(t, env)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "stage dispatch full") || testutil.ToFloat64(full) != 1 {
			t.Fatalf("round %d: /readyz %d %q, actions_stage_full{stage=dispatch} %v after one waiting hand-off went through while others wait; want 503 naming the stage and 1",
				round, code, body, testutil.ToFloat64(full))
		}
	}
	connector.release()
	for i := range n {
		checkOutcome(t, env.Recorder.WaitAllWithin(t, refB(fmt.Sprintf("rz-%03d", i)), testenv.Terminal, 2*time.Minute)[0], schema.KindConfirmed)
	}
	env.Quiesce(t)
	testenv.WaitFor(t, "the dispatch stream taking hand-offs again", func() bool { return testutil.ToFloat64(full) == 0 })
	if code, body := readyz(t, env); code != http.StatusOK {
		t.Errorf("/readyz after the drain: %d %q", code, body)
	}
}

// releaseOne answers the oldest request the connector holds.
func (h *held) releaseOne(t *testing.T) {
	t.Helper()
	testenv.WaitFor(t, "a request held", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.pending) > 0
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.pending[0]
	h.pending = h.pending[1:]
	_ = m.Respond(h.reply)
}
