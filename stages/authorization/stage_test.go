package authorization_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	kvjs "github.com/portcullis/portcullis/kv/jetstream"
	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/trust"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/authorization"
	"github.com/portcullis/portcullis/stages/policy"
	"github.com/portcullis/portcullis/subjects"
)

// harness drives the stage's handlers directly, as the runner would, against
// a real server and a real Pebble store, to exercise what the runner only
// does after a crash or a lost ack: delivering an input again.
type harness struct {
	env     *testenv.Env
	clock   *stages.ManualClock
	stage   *authorization.Stage
	store   *pebble.Store
	metrics *metrics.Metrics
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	clock := stages.NewManualClock(t0)
	env := testenv.New(t, testenv.NotStarted(), testenv.WithClock(clock))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := *env.Config
	cfg.Approval.TTL = ttl
	bucket, err := engine.EnsureStreams(ctx, env.JS, env.Subjects, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	store, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ap, err := pebble.NewApprovals(store)
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(nil, nil)
	m.SetApprovalsPending(ap.Count)
	h := &harness{env: env, clock: clock, store: store, metrics: m}
	parked, _ := engine.KeptEnvelopes(env.JS, env.Sealer(t), env.Subjects, &cfg)
	h.stage = &authorization.Stage{
		Policy: authorization.Policy{
			Rules: policy.Rules{Managed: policies()}, ApprovalTTL: ttl, MaxGrantBytes: 65536,
			Trust: trust.Policy{Hosts: env.Config.Hosts, Tenants: env.Config.Tenants},
		},
		Approvals: ap,
		Activity:  &kvjs.Activity{KV: bucket, Now: func() int64 { return stages.NowMs(clock) }},
		Route:     stages.Route{Subjects: env.Subjects, Self: subjects.StageAuthorization, Next: subjects.StageDispatch},
		Clock:     clock, Parked: parked,
		InStage: &kvjs.StreamMessages{JS: env.JS, Stream: env.Subjects.StageStream(subjects.StageAuthorization)},
	}
	return h
}

// input publishes a message and returns it as the runner would deliver it.
func (h *harness) input(t *testing.T, subject string, body []byte, hdr nats.Header) *stages.Input {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = body
	for k, v := range hdr {
		m.Header[k] = v
	}
	ack, err := h.env.JS.PublishMsg(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	return &stages.Input{Subject: subject, Data: body, Header: m.Header, Stream: ack.Stream, StreamSeq: ack.Sequence, Delivered: 1}
}

func (h *harness) proposal(t *testing.T, e schema.Envelope) *stages.Input {
	t.Helper()
	return h.input(t, h.env.Subjects.Stage(subjects.StageAuthorization, subjects.KindProposal, subjects.ProposalToken(e.Host, e.Proposal.ProposalID)), schema.EncodeEnvelope(&e), nil)
}

func (h *harness) timer(t *testing.T, pid string) *stages.Input {
	t.Helper()
	tok := subjects.ProposalToken(testenv.HostName, pid)
	return h.input(t, h.env.Subjects.Stage(subjects.StageAuthorization, subjects.KindTimer, tok), []byte(tok), nil)
}

func (h *harness) grant(t *testing.T, g map[string]any) *stages.Input {
	t.Helper()
	body := testenv.Body(t, g)
	return h.input(t, h.env.Subjects.Grant(testenv.HostName), body, testenv.Sign(t, h.env.Host, body))
}

func (h *harness) handle(t *testing.T, hd stages.Handler, in *stages.Input) stages.Result {
	t.Helper()
	res, err := hd.Handle(context.Background(), in)
	if err != nil {
		t.Fatalf("handle %s: %v", in.Subject, err)
	}
	if res.Done != nil {
		if err := res.Done(context.Background()); err != nil {
			t.Fatalf("done: %v", err)
		}
	}
	return res
}

func (h *harness) pending() float64 { return testutil.ToFloat64(h.metrics.ApprovalsPending) }

// published is what the runner would publish for a result.
func published(r stages.Result) string {
	return string(schema.MustMarshal([]any{r.Next, r.Outcomes, r.Replayed, r.Events}))
}

func isEmpty(r stages.Result) bool {
	return len(r.Next) == 0 && len(r.Outcomes) == 0 && len(r.Replayed) == 0 && len(r.Events) == 0
}

func TestRedeliveriesRepublishTheDecision(t *testing.T) {
	h := newHarness(t)
	e := grounded(t, "prop-r", nil)
	in := h.proposal(t, e)

	first := h.handle(t, h.stage, in)
	if len(first.Outcomes) != 1 || first.Outcomes[0].Kind != schema.KindNeedsApproval || h.pending() != 1 {
		t.Fatalf("park: %+v, pending %v", first, h.pending())
	}
	h.clock.Advance(time.Minute)
	if again := h.handle(t, h.stage, in); published(again) != published(first) || h.pending() != 1 {
		t.Errorf("redelivered proposal: %s, pending %v; want %s", published(again), h.pending(), published(first))
	}
	if dup := h.handle(t, h.stage, h.proposal(t, e)); !isEmpty(dup) {
		t.Errorf("second hand-off of the proposal: %s", published(dup))
	}
	// An expiry fired early by another clock: re-armed, nothing decided.
	if early := h.handle(t, h.stage, h.timer(t, "prop-r")); !isEmpty(early) {
		t.Errorf("early expiry: %s", published(early))
	}
	if tm, found, _ := h.store.Timer("approval/frontdesk.prop-r"); !found || tm.DueMs != t0.Add(ttl).UnixMilli() {
		t.Errorf("expiry timer = %+v, %v", tm, found)
	}

	gin := h.grant(t, grantFor(e, h.clock))
	grants := h.stage.Grants()
	resumed := h.handle(t, grants, gin)
	if len(resumed.Next) != 1 || len(resumed.Outcomes) != 0 || h.pending() != 0 {
		t.Fatalf("grant: %s, pending %v", published(resumed), h.pending())
	}
	h.clock.Advance(time.Hour) // the grant has expired since: a redelivery still hands the same on
	if again := h.handle(t, grants, gin); published(again) != published(resumed) || h.pending() != 0 {
		t.Errorf("redelivered grant: %s", published(again))
	}
	if again, err := grants.GiveUp(context.Background(), gin, stages.ErrRetriesExhausted); err != nil || published(again) != published(resumed) {
		t.Errorf("giving up on the grant that decided: %s, %v", published(again), err)
	}
	for _, late := range []*stages.Input{in, h.timer(t, "prop-r")} {
		if r := h.handle(t, h.stage, late); !isEmpty(r) {
			t.Errorf("%s after the grant: %s", late.Subject, published(r))
		}
		if r, err := h.stage.GiveUp(context.Background(), late, stages.ErrRetriesExhausted); err != nil || !isEmpty(r) {
			t.Errorf("giving up on %s after the grant: %s, %v", late.Subject, published(r), err)
		}
	}
	if r := h.handle(t, grants, h.grant(t, grantFor(e, h.clock))); len(r.Events) != 1 || r.Events[0].Code != schema.CodeGrantUnmatched || len(r.Next)+len(r.Outcomes) != 0 {
		t.Errorf("second grant: %s", published(r))
	}
	if _, found, _ := h.store.Timer("approval/frontdesk.prop-r"); found {
		t.Error("expiry timer outlived the approval")
	}
}

func TestRedeliveredInlineDecisionStands(t *testing.T) {
	h := newHarness(t)
	e := grounded(t, "prop-i", nil)
	in := h.proposal(t, withInline(t, e, grantFor(e, h.clock)))
	first := h.handle(t, h.stage, in)
	if len(first.Next) != 1 {
		t.Fatalf("inline grant: %s", published(first))
	}
	h.clock.Advance(time.Hour) // past the grant's window
	if again := h.handle(t, h.stage, in); published(again) != published(first) {
		t.Errorf("redelivery decided again: %s", published(again))
	}
	if r := h.handle(t, h.stage, h.timer(t, "prop-i")); !isEmpty(r) {
		t.Errorf("stray timer: %s", published(r))
	}
}

func TestExpiryIsDecidedOnce(t *testing.T) {
	h := newHarness(t)
	e := grounded(t, "prop-x", nil)
	h.handle(t, h.stage, h.proposal(t, e))
	h.clock.Advance(ttl)
	tin := h.timer(t, "prop-x")
	first := h.handle(t, h.stage, tin)
	if len(first.Outcomes) != 1 || first.Outcomes[0].Incidents[0].Code != schema.CodeApprovalTimedOut || h.pending() != 0 {
		t.Fatalf("expiry: %s, pending %v", published(first), h.pending())
	}
	h.clock.Advance(time.Minute)
	if again := h.handle(t, h.stage, tin); published(again) != published(first) || h.pending() != 0 {
		t.Errorf("redelivered expiry: %s", published(again))
	}
	if r, err := h.stage.GiveUp(context.Background(), tin, stages.ErrRetriesExhausted); err != nil || published(r) != published(first) {
		t.Errorf("giving up on the expiry that decided: %s, %v", published(r), err)
	}
	if r := h.handle(t, h.stage.Grants(), h.grant(t, grantFor(e, h.clock))); len(r.Events) != 1 || r.Events[0].Code != schema.CodeGrantUnmatched {
		t.Errorf("grant after expiry: %s", published(r))
	}
}

func TestGiveUp(t *testing.T) {
	h := newHarness(t)
	failed := schema.Incident{Phase: schema.PhaseAuthorization, Code: schema.CodeProcessingFailed, DispatchBoundary: schema.BoundaryNotInvoked}
	ctx := context.Background()

	// A parked proposal that cannot be processed any more is unparked.
	e := grounded(t, "prop-g", nil)
	in := h.proposal(t, e)
	h.handle(t, h.stage, in)
	r, err := h.stage.GiveUp(ctx, in, stages.ErrRetriesExhausted)
	if err != nil || len(r.Outcomes) != 1 || r.Outcomes[0].Kind != schema.KindIntegrationFailure || r.Outcomes[0].Incidents[0] != failed {
		t.Fatalf("give up on a parked proposal: %s, %v", published(r), err)
	}
	if o := r.Outcomes[0]; *o.Fingerprint != e.Grounded.Fingerprint || h.pending() != 0 {
		t.Errorf("outcome %+v, pending %v", o, h.pending())
	}
	if _, found, _ := h.store.Timer("approval/frontdesk.prop-g"); found {
		t.Error("expiry timer outlived the give-up")
	}
	if again, _ := h.stage.GiveUp(ctx, in, stages.ErrRetriesExhausted); published(again) != published(r) {
		t.Errorf("second give-up: %s", published(again))
	}
	if u := h.handle(t, h.stage.Grants(), h.grant(t, grantFor(e, h.clock))); len(u.Events) != 1 || u.Events[0].Code != schema.CodeGrantUnmatched {
		t.Errorf("grant after the give-up: %s", published(u))
	}

	// An envelope that does not decode is permanent: given up at once.
	bad := h.input(t, h.env.Subjects.Stage(subjects.StageAuthorization, subjects.KindProposal, "frontdesk.prop-bad"), []byte(`{"schema":1}`), nil)
	if _, err := h.stage.Handle(ctx, bad); !errors.Is(err, stages.ErrPermanent) {
		t.Fatalf("undecodable envelope: %v", err)
	}
	r, err = h.stage.GiveUp(ctx, bad, stages.ErrPermanent)
	if err != nil || len(r.Outcomes) != 1 || r.Outcomes[0].ProposalID != "prop-bad" || r.Outcomes[0].Incidents[0] != failed || r.Outcomes[0].Fingerprint != nil {
		t.Errorf("give up on an undecodable envelope: %s, %v", published(r), err)
	}
	// An envelope without grounding is not authorized.
	ungrounded := grounded(t, "prop-ungrounded", nil)
	ungrounded.Grounded = nil
	if _, err := h.stage.Handle(ctx, h.proposal(t, ungrounded)); !errors.Is(err, stages.ErrPermanent) {
		t.Errorf("ungrounded envelope: %v", err)
	}

	// A grant that cannot be processed leaves its proposal parked: an event only.
	f := grounded(t, "prop-g2", nil)
	h.handle(t, h.stage, h.proposal(t, f))
	gin := h.grant(t, grantFor(f, h.clock))
	r, err = h.stage.Grants().GiveUp(ctx, gin, stages.ErrRetriesExhausted)
	if err != nil || len(r.Outcomes) != 0 || len(r.Events) != 1 || r.Events[0] != failed || h.pending() != 1 {
		t.Errorf("give up on a grant: %s, %v, pending %v", published(r), err, h.pending())
	}
	// A stray subject: an event only.
	stray := &stages.Input{Subject: h.env.Subjects.Stage(subjects.StageAuthorization, "other", "x"), Data: []byte("x")}
	if _, err := h.stage.Handle(ctx, stray); !errors.Is(err, stages.ErrPermanent) {
		t.Errorf("stray subject: %v", err)
	}
	if r, err := h.stage.GiveUp(ctx, &stages.Input{Subject: "elsewhere"}, stages.ErrPermanent); err != nil || len(r.Outcomes) != 0 || len(r.Events) != 1 {
		t.Errorf("give up on a stray subject: %s, %v", published(r), err)
	}
}

// TestParkedEnvelopeGone: if the stream lost a parked envelope (purged by
// an operator), its grant ends the proposal instead of looping.
func TestParkedEnvelopeGone(t *testing.T) {
	h := newHarness(t)
	e := grounded(t, "prop-gone", nil)
	in := h.proposal(t, e)
	h.handle(t, h.stage, in)
	// Both copies gone: the parked one, and the hand-off (the stage stream
	// holds work: it goes once acked).
	ctx := context.Background()
	parked, err := h.env.JS.Stream(ctx, h.env.Subjects.HostParkedStream(e.Host))
	if err != nil {
		t.Fatal(err)
	}
	if err := parked.Purge(ctx, jetstream.WithPurgeSubject(h.env.Subjects.Parked(e.Host, "prop-gone"))); err != nil {
		t.Fatal(err)
	}
	if stream, err := h.env.JS.Stream(ctx, in.Stream); err != nil {
		t.Fatal(err)
	} else if err := stream.DeleteMsg(ctx, in.StreamSeq); err != nil {
		t.Fatal(err)
	}
	r := h.handle(t, h.stage.Grants(), h.grant(t, grantFor(e, h.clock)))
	if len(r.Next) != 0 || len(r.Outcomes) != 1 || r.Outcomes[0].Kind != schema.KindIntegrationFailure || r.Outcomes[0].Incidents[0].Code != schema.CodeProcessingFailed {
		t.Fatalf("grant for a lost envelope: %s", published(r))
	}
	if h.pending() != 0 {
		t.Errorf("pending = %v", h.pending())
	}
}

// TestParkedJSONEnvelopeOfAnEarlierVersion: a proposal parked as JSON by
// an earlier version (parked envelopes live up to twice approval.ttl, so
// an upgrade finds some) is read back when its grant comes and handed on
// to dispatch in the binary form, its proposal unchanged; the stage itself
// parks the binary form.
func TestParkedJSONEnvelopeOfAnEarlierVersion(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	e := grounded(t, "prop-upgrade", nil)
	in := h.proposal(t, e)
	h.handle(t, h.stage, in)
	kept, _, err := h.stage.Parked.Get(ctx, e.Host, "prop-upgrade")
	if err != nil || !schema.IsBinaryEnvelope(kept) {
		t.Fatalf("parked: binary %v, %v", schema.IsBinaryEnvelope(kept), err)
	}
	// What an earlier version kept, in its place.
	if err := h.stage.Parked.Keep(ctx, e.Host, "prop-upgrade", schema.MustMarshal(e), "earlier-version"); err != nil {
		t.Fatal(err)
	}
	if kept, _, err := h.stage.Parked.Get(ctx, e.Host, "prop-upgrade"); err != nil || kept[0] != '{' {
		t.Fatalf("the JSON envelope is not the one kept: %v", err)
	}
	// The hand-off is gone from the stage stream once acked.
	if stream, err := h.env.JS.Stream(ctx, in.Stream); err != nil {
		t.Fatal(err)
	} else if err := stream.DeleteMsg(ctx, in.StreamSeq); err != nil {
		t.Fatal(err)
	}
	r := h.handle(t, h.stage.Grants(), h.grant(t, grantFor(e, h.clock)))
	if len(r.Next) != 1 || !schema.IsBinaryEnvelope(r.Next[0].Data) {
		t.Fatalf("grant for a JSON-parked envelope: %s", published(r))
	}
	got, err := stages.DecodeEnvelope(r.Next[0].Data, stages.Authorized)
	if err != nil {
		t.Fatal(err)
	}
	if got.Proposal.ProposalID != "prop-upgrade" || got.Grounded.Fingerprint != e.Grounded.Fingerprint ||
		string(got.Proposal.Intent.Payload) != string(e.Proposal.Intent.Payload) || got.Authorization.Grant.IntentFingerprint != e.Grounded.Fingerprint {
		t.Fatalf("hand-off %+v", got)
	}
}

// A grant decided, its hand-off not yet stored (the processor died, or
// the publish got no answer, before Done): the redelivered grant finds the
// envelope still parked and hands the same on. Unparked before the
// hand-off was stored, the proposal would stay NEEDS_APPROVAL forever
// (found by TestClusterSoak: "cannot republish a permitted hand-off").
func TestGrantRedeliveredBeforeItsHandOffWasStored(t *testing.T) {
	h := newHarness(t)
	e := grounded(t, "prop-crash", nil)
	in := h.proposal(t, e)
	h.handle(t, h.stage, in)
	ctx := context.Background()
	// The stage stream holds work: the hand-off goes once acked.
	if stream, err := h.env.JS.Stream(ctx, in.Stream); err != nil {
		t.Fatal(err)
	} else if err := stream.DeleteMsg(ctx, in.StreamSeq); err != nil {
		t.Fatal(err)
	}
	gin := h.grant(t, grantFor(e, h.clock))
	first, err := h.stage.Grants().Handle(ctx, gin) // decided; Done never runs
	if err != nil || len(first.Next) != 1 {
		t.Fatalf("grant: %s, %v", published(first), err)
	}
	again := h.handle(t, h.stage.Grants(), gin)
	if published(again) != published(first) {
		t.Fatalf("redelivered grant: %s, want %s", published(again), published(first))
	}
	// Once the hand-off is out, the envelope goes.
	parked, err := h.env.JS.Stream(ctx, h.env.Subjects.HostParkedStream(e.Host))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parked.GetLastMsgForSubject(ctx, h.env.Subjects.Parked(e.Host, "prop-crash")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("the envelope stays parked after the hand-off: %v", err)
	}
}

// TestGrantAndExpiryRace: a grant and the expiry handled at once, at the
// deadline, decide the approval once: one publishes the end, the other
// changes nothing.
func TestGrantAndExpiryRace(t *testing.T) {
	h := newHarness(t)
	for i := range 5 {
		pid := "prop-race-" + string(rune('a'+i))
		e := grounded(t, pid, func(m map[string]any) { testenv.Set(m, "intent.payload.quantity", 100+i) })
		h.handle(t, h.stage, h.proposal(t, e))
		g := grantFor(e, h.clock)
		g["expires_at_ms"] = h.clock.Now().Add(time.Hour).UnixMilli()
		tin, gin := h.timer(t, pid), h.grant(t, g)
		h.clock.Advance(ttl)
		type answer struct {
			res stages.Result
			err error
		}
		answers := make(chan answer, 2)
		var wg sync.WaitGroup
		for _, in := range []struct {
			hd stages.Handler
			in *stages.Input
		}{{h.stage, tin}, {h.stage.Grants(), gin}} {
			wg.Go(func() {
				res, err := in.hd.Handle(context.Background(), in.in)
				answers <- answer{res, err}
			})
		}
		wg.Wait()
		close(answers)
		ended := 0
		for a := range answers {
			r := a.res
			if a.err != nil {
				t.Fatalf("%s: %v", pid, a.err)
			}
			switch {
			case len(r.Outcomes) == 1 && r.Outcomes[0].Incidents[0].Code == schema.CodeApprovalTimedOut:
				ended++
			case len(r.Events) == 1 && r.Events[0].Code == schema.CodeGrantUnmatched, isEmpty(r):
			default:
				t.Errorf("%s: %s", pid, published(r))
			}
		}
		if ended != 1 {
			t.Errorf("%s: ended %d times", pid, ended)
		}
	}
	if h.pending() != 0 {
		t.Errorf("pending = %v", h.pending())
	}
}
