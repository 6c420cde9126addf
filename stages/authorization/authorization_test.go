package authorization_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/policy"
	"github.com/portcullis/portcullis/subjects"
)

// t0 is the manual clock's start; every grant window is relative to it.
var t0 = time.UnixMilli(1_764_424_800_000)

const ttl = 10 * time.Minute

// Security domains that select the test policies below.
const (
	domainDemo = testenv.SecurityDomain // policy "org"
	domainOff  = "security-domain:off"  // policy "off": disabled
)

// policies are the managed policies of these tests: the seed's policy
// adapted to the lumber fixture for the demo domain, and a disabled one
// for another domain.
func policies() []policy.ManagedPolicy {
	return []policy.ManagedPolicy{
		{
			Name:                           "org",
			SecurityDomains:                []string{domainDemo},
			AutomaticApprovalForbidden:     true,
			LiveActionsForbidden:           true,
			AllowedProviders:               []string{"demo"},
			AllowedCapabilities:            []string{"inventory.adjust"},
			AllowedEnvironments:            []string{"test", "live"},
			MinimumAuthenticationAssurance: schema.AssuranceBiometric,
			MaxExternalSpend:               map[string]int64{"USD": 50000},
		},
		{Name: "off", SecurityDomains: []string{domainOff}, Disabled: true},
	}
}

func start(t *testing.T, opts ...testenv.Option) (*testenv.Env, *stages.ManualClock) {
	t.Helper()
	clock := stages.NewManualClock(t0)
	opts = append([]testenv.Option{testenv.WithClock(clock), testenv.WithConfig(func(c *config.Config) {
		c.Policies = policies()
		c.Approval.TTL = ttl
		// Admission lets the host name these domains of its tenant.
		c.Tenants[0].SecurityDomains = append(c.Tenants[0].SecurityDomains, domainOff, "security-domain:lab")
	})}, opts...)
	return testenv.New(t, opts...), clock
}

// grounded builds the envelope the grounding stage would hand on for the
// lumber fixture (after edit), with its real fingerprint (dispatch
// recomputes it and rejects any other).
func grounded(t *testing.T, pid string, edit func(m map[string]any)) schema.Envelope {
	t.Helper()
	m := testenv.Lumber(pid)
	if edit != nil {
		edit(m)
	}
	p, err := schema.DecodeProposal(testenv.Body(t, m), 0)
	if err != nil {
		t.Fatalf("fixture does not decode: %v", err)
	}
	fp, err := fingerprint.Of(p, "sku-1001")
	if err != nil {
		t.Fatal(err)
	}
	return schema.Envelope{
		Schema: schema.SchemaEnvelope, Proposal: *p, Host: testenv.HostName, AdmittedAtMs: t0.UnixMilli(),
		Grounded: &schema.Grounded{Referent: "sku-1001", Fingerprint: fp.Fingerprint, IdempotencyKey: fp.IdempotencyKey, ObservationRef: "catalog:12"},
	}
}

// handOff publishes an envelope where grounding would: to the authorization stage.
func handOff(t *testing.T, env *testenv.Env, e schema.Envelope) {
	t.Helper()
	env.PublishInternal(t, env.Subjects.Stage(subjects.StageAuthorization, subjects.KindProposal, subjects.ProposalToken(e.Host, e.Proposal.ProposalID)), schema.EncodeEnvelope(&e))
}

// grantFor is a manual, biometric grant for e, issued now by the clock and
// valid for 5 minutes, as a map a test may edit.
func grantFor(e schema.Envelope, clock stages.Clock) map[string]any {
	now := clock.Now().UnixMilli()
	g := map[string]any{
		"schema":                   schema.SchemaGrant,
		"proposal_id":              e.Proposal.ProposalID,
		"intent_fingerprint":       e.Grounded.Fingerprint,
		"authorized_by":            "actor:demo",
		"authorization_method":     schema.MethodManual,
		"authentication_assurance": schema.AssuranceBiometric,
		"issued_at_ms":             now,
		"expires_at_ms":            now + 300_000,
		"max_external_spend":       nil,
	}
	if s := e.Proposal.Intent.ExternalSpend; s != nil {
		g["max_external_spend"] = map[string]any{"currency": s.Currency, "amount_minor": s.AmountMinor}
	}
	return g
}

// withInline returns e carrying grant g inline.
func withInline(t *testing.T, e schema.Envelope, g map[string]any) schema.Envelope {
	t.Helper()
	var gr schema.Grant
	if err := schema.Decode(testenv.Body(t, g), &gr); err != nil {
		t.Fatalf("grant fixture does not decode: %v", err)
	}
	e.Proposal.Grant = &gr
	return e
}

// inbox waits for want hand-offs to dispatch and returns every one.
func inbox(t *testing.T, env *testenv.Env, want int) []schema.Envelope {
	t.Helper()
	return env.StageEnvelopes(t, subjects.StageDispatch, want)
}

func ids(es []schema.Envelope) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Proposal.ProposalID)
	}
	return out
}

func incident(code schema.Code) schema.Incident {
	return schema.Incident{Phase: schema.PhaseAuthorization, Code: code, DispatchBoundary: schema.BoundaryNotInvoked}
}

// denied waits for the proposal's terminal outcome and checks it is
// DENIED with code, bound to the envelope's fingerprint and referent.
func denied(t *testing.T, env *testenv.Env, e schema.Envelope, code schema.Code) {
	t.Helper()
	o := env.Recorder.Wait(t, e.Proposal.ProposalID, testenv.Terminal)
	if o.Kind != schema.KindDenied || o.EffectTruth != schema.TruthNotDispatched || len(o.Incidents) != 1 || o.Incidents[0] != incident(code) {
		t.Fatalf("%s: outcome = %+v, want DENIED/%s", e.Proposal.ProposalID, o, code)
	}
	if o.Fingerprint == nil || *o.Fingerprint != e.Grounded.Fingerprint || o.Referent == nil || *o.Referent != "sku-1001" || o.Approval != nil || o.Receipt != nil {
		t.Errorf("%s: outcome fields = %+v", e.Proposal.ProposalID, o)
	}
}

// parked waits for NEEDS_APPROVAL and checks what it asks.
func parked(t *testing.T, env *testenv.Env, e schema.Envelope, expiresAtMs int64) {
	t.Helper()
	o := env.Recorder.Wait(t, e.Proposal.ProposalID, testenv.Kind(schema.KindNeedsApproval))
	if o.Terminal || o.EffectTruth != schema.TruthNotDispatched || len(o.Incidents) != 1 || o.Incidents[0] != incident(schema.CodeApprovalRequired) {
		t.Fatalf("parked outcome = %+v", o)
	}
	want := schema.Approval{Fingerprint: e.Grounded.Fingerprint, Summary: e.Proposal.Intent.Display.Summary, ExternalSpend: e.Proposal.Intent.ExternalSpend, ExpiresAtMs: expiresAtMs}
	if o.Approval == nil || string(schema.MustMarshal(*o.Approval)) != string(schema.MustMarshal(want)) {
		t.Errorf("approval = %+v, want %+v", o.Approval, want)
	}
	if o.Fingerprint == nil || *o.Fingerprint != e.Grounded.Fingerprint || o.Referent == nil || *o.Referent != "sku-1001" {
		t.Errorf("parked outcome fields = %+v", o)
	}
}

// pending checks actions_approvals_pending once the pipeline is idle: the
// stage updates it before it acks its input.
func pending(t *testing.T, env *testenv.Env, want float64) {
	t.Helper()
	env.Quiesce(t)
	if got := testutil.ToFloat64(env.Processor().Metrics().ApprovalsPending); got != want {
		t.Fatalf("actions_approvals_pending = %v, want %v", got, want)
	}
}

// activityOf waits until the fingerprint's activity satisfies ok.
// authOutcomes are a proposal's outcomes from before dispatch: the dispatch
// stage runs too and adds its own (they carry a receipt).
func authOutcomes(env *testenv.Env, id string) []schema.Outcome {
	var out []schema.Outcome
	for _, o := range env.Recorder.Outcomes(id) {
		if o.Receipt == nil {
			out = append(out, o)
		}
	}
	return out
}

// permitted holds once authorization's permit is on the activity record
// (dispatch may already have moved its status on).
func permitOnRecord(a *schema.Activity) bool {
	return a.Decision != nil && a.Decision.Outcome == "permit"
}

func activityOf(t *testing.T, env *testenv.Env, fp string, ok func(a *schema.Activity) bool) *schema.Activity {
	t.Helper()
	env.Quiesce(t) // a stage writes the snapshot after its outcome, before it acks
	a, err := env.Processor().Activity().Get(context.Background(), fp)
	if err != nil || !ok(a) {
		t.Fatalf("activity of %s = %+v (%v)", fp, a, err)
	}
	return a
}

func countEvents(env *testenv.Env, code schema.Code) int {
	return env.Recorder.CountEvents(schema.PhaseAuthorization, code)
}

func waitEvents(t *testing.T, env *testenv.Env, code schema.Code, n int) {
	t.Helper()
	env.Recorder.WaitEvents(t, schema.PhaseAuthorization, code, n)
}

// TestInlineGrants covers every code an inline grant can meet, Harn's
// scenarios and the ones Harn never tested, end to end.
func TestInlineGrants(t *testing.T) {
	env, clock := start(t)
	set := func(path string, v any) func(m map[string]any) {
		return func(m map[string]any) { testenv.Set(m, path, v) }
	}
	usd := func(n int64) map[string]any { return map[string]any{"currency": "USD", "amount_minor": n} }
	now := t0.UnixMilli()
	type tc struct {
		id    string
		edit  func(m map[string]any) // the proposal
		grant func(e *schema.Envelope, g map[string]any)
		code  schema.Code // "" permitted
	}
	cases := []tc{
		{"ok", nil, nil, ""},
		{"ok-spend", set("intent.external_spend", usd(24567)), nil, ""},
		{"ok-no-proposal-id", nil, func(_ *schema.Envelope, g map[string]any) { delete(g, "proposal_id") }, ""},
		{"malformed", nil, func(_ *schema.Envelope, g map[string]any) { g["authorization_method"] = "telepathy" }, schema.CodeGrantMalformed},
		{"malformed-window", nil, func(_ *schema.Envelope, g map[string]any) { g["expires_at_ms"] = g["issued_at_ms"] }, schema.CodeGrantMalformed},
		// Harn: the payload changed after the grant was issued.
		{"changed-payload", nil, func(e *schema.Envelope, g map[string]any) {
			other := grounded(t, e.Proposal.ProposalID, set("intent.payload.quantity", 2000))
			e.Proposal.Intent = other.Proposal.Intent
			e.Grounded = other.Grounded
		}, schema.CodeGrantBindingMismatch},
		// Not in Harn: a grant for another proposal of the same intent, replayed.
		{"replayed-for-another", nil, func(_ *schema.Envelope, g map[string]any) { g["proposal_id"] = "ok" }, schema.CodeGrantBindingMismatch},
		// Issued further ahead than approval.clock_skew (30s).
		{"not-yet-valid", nil, func(_ *schema.Envelope, g map[string]any) {
			g["issued_at_ms"], g["expires_at_ms"] = now+30_001, now+300_000
		}, schema.CodeGrantNotYetValid},
		// Ordinary clock skew: issued 200ms ahead of the processor's clock.
		{"issued-ahead", nil, func(_ *schema.Envelope, g map[string]any) { g["issued_at_ms"] = now + 200 }, ""},
		{"lifetime", nil, func(_ *schema.Envelope, g map[string]any) {
			g["expires_at_ms"] = now + 24*3600_000 + 1
		}, schema.CodeGrantLifetimeExceeded},
		{"issued-now", nil, func(_ *schema.Envelope, g map[string]any) { g["issued_at_ms"] = now }, ""},
		// Harn: an expired grant; expires_at == now is already expired.
		{"expired", nil, func(_ *schema.Envelope, g map[string]any) {
			g["issued_at_ms"], g["expires_at_ms"] = now-300_000, now
		}, schema.CodeGrantExpired},
		{"test-for-live", set("intent.environment", "live"), func(_ *schema.Envelope, g map[string]any) {
			g["authorization_method"] = schema.MethodTestFixture
		}, schema.CodeTestGrantForLiveAction},
		// Harn: spend over the grant's ceiling.
		{"spend-over-grant", set("intent.external_spend", usd(24568)), func(_ *schema.Envelope, g map[string]any) {
			g["max_external_spend"] = usd(24567)
		}, schema.CodeExternalSpendExceedsGrant},
		{"spend-other-currency", set("intent.external_spend", usd(100)), func(_ *schema.Envelope, g map[string]any) {
			g["max_external_spend"] = map[string]any{"currency": "EUR", "amount_minor": 100}
		}, schema.CodeExternalSpendExceedsGrant},
		{"spend-no-ceiling", set("intent.external_spend", usd(100)), func(_ *schema.Envelope, g map[string]any) {
			g["max_external_spend"] = nil
		}, schema.CodeExternalSpendExceedsGrant},
		{"disabled", set("context.tenant.security_domain_ref", domainOff), nil, schema.CodeExternalActionsDisabled},
		// Harn: managed policy against adversarial_auto.
		{"adversarial-auto", nil, func(_ *schema.Envelope, g map[string]any) {
			g["authorization_method"] = schema.MethodAdversarialAuto
		}, schema.CodeAutomaticApprovalForbidden},
		{"live", set("intent.environment", "live"), nil, schema.CodeLiveActionsForbidden},
		{"provider", set("intent.provider", "inventory"), nil, schema.CodeProviderNotAllowed},
		{"capability", set("intent.capability", "inventory.count"), nil, schema.CodeCapabilityNotAllowed},
		{"environment", set("intent.environment", "mock"), nil, schema.CodeEnvironmentNotAllowed},
		{"weak-auth", nil, func(_ *schema.Envelope, g map[string]any) {
			g["authentication_assurance"] = schema.AssuranceSession
		}, schema.CodeAuthenticationTooWeak},
		{"spend-over-policy", set("intent.external_spend", usd(50001)), nil, schema.CodeExternalSpendExceedsPolicy},
		{"spend-equal-policy", set("intent.external_spend", usd(50000)), nil, ""},
		{"spend-unlisted-currency", set("intent.external_spend", map[string]any{"currency": "EUR", "amount_minor": 1}), nil, schema.CodeExternalSpendExceedsPolicy},
		{"other-domain-no-policy", func(m map[string]any) {
			testenv.Set(m, "context.tenant.security_domain_ref", "security-domain:lab")
			testenv.Set(m, "intent.environment", "live") // only "org" forbids live
		}, nil, ""},
	}
	envs := map[string]schema.Envelope{}
	var permitted []string
	for i, c := range cases {
		// One intent per case, so that each has its own activity, except
		// the grant replayed from "ok": same intent, another proposal.
		quantity := i + 1
		if c.id == "replayed-for-another" {
			quantity = 1
		}
		e := grounded(t, c.id, func(m map[string]any) {
			testenv.Set(m, "intent.payload.quantity", quantity)
			if c.edit != nil {
				c.edit(m)
			}
		})
		g := grantFor(e, clock)
		if c.grant != nil {
			// The grant is made for e; the hook may then change e (the
			// proposal) or the grant.
			c.grant(&e, g)
		}
		e = withInline(t, e, g)
		envs[c.id] = e
		handOff(t, env, e)
		if c.code == "" {
			permitted = append(permitted, c.id)
		}
	}
	for _, c := range cases {
		if c.code != "" {
			t.Run(c.id, func(t *testing.T) {
				denied(t, env, envs[c.id], c.code)
				env.Recorder.WaitEvent(t, schema.PhaseAuthorization, c.code)
			})
		}
	}
	got := inbox(t, env, len(permitted))
	if !sameSet(ids(got), permitted) {
		t.Fatalf("dispatch inbox = %v, want %v", ids(got), permitted)
	}
	for _, h := range got {
		want := envs[h.Proposal.ProposalID]
		a := h.Authorization
		if a == nil || a.DecidedAtMs != now || a.Grant.IntentFingerprint != want.Grounded.Fingerprint || a.Evaluations[0] != (schema.PolicyEvaluation{Layer: "grant", Outcome: "pass"}) {
			t.Errorf("%s: authorization = %+v", h.Proposal.ProposalID, a)
		}
		if h.Grounded == nil || *h.Grounded != *want.Grounded || string(h.Proposal.Intent.Payload) != string(want.Proposal.Intent.Payload) {
			t.Errorf("%s: the hand-off changed the proposal", h.Proposal.ProposalID)
		}
		if outs := authOutcomes(env, h.Proposal.ProposalID); len(outs) != 0 {
			t.Errorf("%s: a permitted proposal got outcomes %+v", h.Proposal.ProposalID, outs)
		}
	}
	// Policy evaluations name the layers that decided, for the activity record.
	a := activityOf(t, env, envs["adversarial-auto"].Grounded.Fingerprint, func(a *schema.Activity) bool { return a.Status == schema.ActivityDenied })
	wantEvals := []schema.PolicyEvaluation{{Layer: "grant", Outcome: "pass"}, {Layer: "managed_policy:org", Outcome: "deny", ReasonCode: schema.CodeAutomaticApprovalForbidden}}
	if !slices.Equal(a.PolicyEvaluations, wantEvals) || a.Decision.ReasonCode != schema.CodeAutomaticApprovalForbidden || a.Authorization.Method != schema.MethodAdversarialAuto {
		t.Errorf("activity = %+v %+v %+v", a.PolicyEvaluations, a.Decision, a.Authorization)
	}
	ok := activityOf(t, env, envs["ok"].Grounded.Fingerprint, permitOnRecord)
	if ok.Decision.Outcome != "permit" || ok.Authorization.Assurance != "biometric" || ok.Referent != "sku-1001" || ok.Requester == nil {
		t.Errorf("activity = %+v", ok)
	}
	// The replayed grant's proposal shares the intent: it is listed, and
	// the authorized picture stands.
	ok = activityOf(t, env, envs["ok"].Grounded.Fingerprint, func(a *schema.Activity) bool { return len(a.Proposals) == 2 })
	if ok.Decision == nil || ok.Decision.Outcome != "permit" || !sameSet(testenv.IDs(ok.Proposals), []string{"ok", "replayed-for-another"}) {
		t.Errorf("shared activity = %+v", ok)
	}
	pending(t, env, 0)
	checkPrivacy(t, env)
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// checkPrivacy: no payload, tenant or actor id, or grant author in logs,
// outcomes or events.
func checkPrivacy(t *testing.T, env *testenv.Env) {
	t.Helper()
	var all []byte
	all = append(all, env.Logs.Bytes()...)
	for _, r := range env.Recorder.Raw() {
		all = append(all, r...)
	}
	for _, leak := range []string{"tenant:demo", "actor:demo", "quantity", "authorized_by"} {
		if strings.Contains(string(all), leak) {
			t.Errorf("%q leaked into logs, outcomes or events", leak)
		}
	}
}

// TestApprovalRoundTripAcrossRestart: proposal → NEEDS_APPROVAL → restart →
// signed standalone grant → the proposal is on the dispatch stream.
func TestApprovalRoundTripAcrossRestart(t *testing.T) {
	env, clock := start(t)
	e := grounded(t, "prop-book", func(m map[string]any) {
		testenv.Set(m, "intent.external_spend", map[string]any{"currency": "USD", "amount_minor": 24567})
		testenv.Set(m, "intent.display.summary", "Book SEA→JFK for $245.67?")
	})
	handOff(t, env, e)
	expires := t0.Add(ttl).UnixMilli()
	parked(t, env, e, expires)
	pending(t, env, 1)
	a := activityOf(t, env, e.Grounded.Fingerprint, func(a *schema.Activity) bool { return a.Status == schema.ActivityAwaitingApproval })
	if a.Decision.Outcome != "pending" || a.Authorization.ApprovalExpiresAtMs != expires || a.Summary != "Book SEA→JFK for $245.67?" {
		t.Errorf("parked activity = %+v %+v", a.Decision, a.Authorization)
	}
	// The parked record is value-free: the payload stays in the stream.
	rec, found, err := env.Processor().Approvals().Load(testenv.Ref("prop-book"))
	if err != nil || !found || rec.State != "parked" || rec.ExpiresAtMs != expires {
		t.Fatalf("approval record = %+v %v %v", rec, found, err)
	}

	env.Restart(t)
	pending(t, env, 1)
	clock.Advance(time.Minute) // the user takes a minute to say yes
	env.PublishGrant(t, grantFor(e, clock), env.Host)

	got := inbox(t, env, 1)
	if len(got) != 1 || got[0].Proposal.ProposalID != "prop-book" {
		t.Fatalf("dispatch inbox = %v", ids(got))
	}
	h := got[0]
	if h.Authorization == nil || h.Authorization.Grant.AuthorizedBy != "actor:demo" || h.Authorization.DecidedAtMs != t0.Add(time.Minute).UnixMilli() {
		t.Errorf("authorization = %+v", h.Authorization)
	}
	if *h.Grounded != *e.Grounded || h.Proposal.Intent.Display.Summary != e.Proposal.Intent.Display.Summary || string(h.Proposal.Intent.Payload) != string(e.Proposal.Intent.Payload) {
		t.Errorf("the re-read envelope differs: %+v", h)
	}
	pending(t, env, 0)
	a = activityOf(t, env, e.Grounded.Fingerprint, permitOnRecord)
	if a.Authorization.Method != "manual" || a.Authorization.ApprovalExpiresAtMs != expires || len(a.PolicyEvaluations) != 2 {
		t.Errorf("authorized activity = %+v %+v", a.Authorization, a.PolicyEvaluations)
	}
	if outs := authOutcomes(env, "prop-book"); len(outs) != 1 {
		t.Errorf("outcomes = %+v, want only NEEDS_APPROVAL (dispatch decides the rest)", outs)
	}

	// A second grant for the finished approval, and the expiry time
	// passing, change nothing.
	env.PublishGrant(t, grantFor(e, clock), env.Host)
	waitEvents(t, env, schema.CodeGrantUnmatched, 1)
	clock.Advance(ttl)
	env.Quiesce(t) // the scheduler fires whatever fell due
	if got := inbox(t, env, 1); len(got) != 1 {
		t.Errorf("dispatch inbox = %v", ids(got))
	}
	if outs := authOutcomes(env, "prop-book"); len(outs) != 1 {
		t.Errorf("outcomes after the second grant = %+v", outs)
	}
	if _, found, _ := env.Processor().Store().Timer("approval/frontdesk.prop-book"); found {
		t.Error("the expiry timer outlived the approval")
	}
	checkPrivacy(t, env)
}

func TestApprovalTimesOut(t *testing.T) {
	env, clock := start(t)
	e := grounded(t, "prop-late", nil)
	handOff(t, env, e)
	parked(t, env, e, t0.Add(ttl).UnixMilli())
	pending(t, env, 1)

	clock.Advance(ttl - time.Millisecond)
	env.Quiesce(t) // the scheduler fires whatever fell due
	if o := authOutcomes(env, "prop-late"); len(o) != 1 {
		t.Fatalf("timed out early: %+v", o)
	}
	clock.Advance(time.Millisecond)
	denied(t, env, e, schema.CodeApprovalTimedOut)
	pending(t, env, 0)
	a := activityOf(t, env, e.Grounded.Fingerprint, func(a *schema.Activity) bool { return a.Status == schema.ActivityDenied })
	if a.Decision.ReasonCode != schema.CodeApprovalTimedOut || a.Decision.DecidedAtMs != t0.Add(ttl).UnixMilli() {
		t.Errorf("activity decision = %+v", a.Decision)
	}
	// A grant after the end is unmatched and changes nothing.
	env.PublishGrant(t, grantFor(e, clock), env.Host)
	waitEvents(t, env, schema.CodeGrantUnmatched, 1)
	env.Quiesce(t)
	if o := authOutcomes(env, "prop-late"); len(o) != 2 {
		t.Errorf("outcomes = %+v", o)
	}
	if got := inbox(t, env, 0); len(got) != 0 {
		t.Errorf("dispatch inbox = %v", ids(got))
	}
}

func TestApprovalTimesOutWhileStopped(t *testing.T) {
	env, clock := start(t)
	e := grounded(t, "prop-down", nil)
	f := grounded(t, "prop-down-granted", func(m map[string]any) { testenv.Set(m, "intent.payload.quantity", 7) })
	handOff(t, env, e)
	handOff(t, env, f)
	parked(t, env, e, t0.Add(ttl).UnixMilli())
	parked(t, env, f, t0.Add(ttl).UnixMilli())
	env.Stop(t)
	clock.Advance(ttl + time.Second)
	// A grant sent while the processor was down, after the TTL: the
	// approval ended before it is read, whichever of the two comes first.
	env.PublishGrant(t, grantFor(f, clock), env.Host)
	env.Start(t)
	denied(t, env, e, schema.CodeApprovalTimedOut)
	denied(t, env, f, schema.CodeApprovalTimedOut)
	pending(t, env, 0)
	env.Quiesce(t)
	if got := inbox(t, env, 0); len(got) != 0 {
		t.Errorf("dispatch inbox = %v", ids(got))
	}
}

// TestStandaloneGrantRefusals covers what a standalone grant can meet.
func TestStandaloneGrantRefusals(t *testing.T) {
	env, clock := start(t)
	type tc struct {
		id   string
		send func(e schema.Envelope)
		code schema.Code
	}
	// An authenticated grant for the parked proposal ends it, with the
	// grant's code (SPEC §2.2).
	cases := []tc{
		{"malformed", func(e schema.Envelope) {
			g := grantFor(e, clock)
			g["scope"] = "everything"
			env.PublishGrant(t, g, env.Host)
		}, schema.CodeGrantMalformed},
		{"duplicate-keys", func(e schema.Envelope) {
			body := strings.Replace(string(testenv.Body(t, grantFor(e, clock))), `"schema"`, `"issued_at_ms":0,"schema"`, 1)
			env.PublishGrant(t, []byte(body), env.Host)
		}, schema.CodeGrantMalformed},
		// Not in Harn: a grant of another proposal re-sent under this one's id.
		{"replayed", func(e schema.Envelope) {
			other := grounded(t, "someone-else", func(m map[string]any) { testenv.Set(m, "intent.payload.quantity", 99) })
			g := grantFor(other, clock)
			g["proposal_id"] = e.Proposal.ProposalID
			env.PublishGrant(t, g, env.Host)
		}, schema.CodeGrantBindingMismatch},
		{"lifetime", func(e schema.Envelope) {
			g := grantFor(e, clock)
			g["expires_at_ms"] = t0.Add(25 * time.Hour).UnixMilli()
			env.PublishGrant(t, g, env.Host)
		}, schema.CodeGrantLifetimeExceeded},
		{"declined", func(e schema.Envelope) {
			env.PublishGrant(t, map[string]any{"schema": schema.SchemaDecline, "proposal_id": e.Proposal.ProposalID,
				"intent_fingerprint": e.Grounded.Fingerprint, "declined_by": "actor:demo"}, env.Host)
		}, schema.CodeApprovalDeclined},
		{"expired", func(e schema.Envelope) {
			g := grantFor(e, clock)
			g["issued_at_ms"], g["expires_at_ms"] = t0.Add(-time.Hour).UnixMilli(), t0.UnixMilli()
			env.PublishGrant(t, g, env.Host)
		}, schema.CodeGrantExpired},
		{"test-for-live", func(e schema.Envelope) {
			g := grantFor(e, clock)
			g["authorization_method"] = schema.MethodTestFixture
			env.PublishGrant(t, g, env.Host)
		}, schema.CodeTestGrantForLiveAction},
		{"spend", func(e schema.Envelope) {
			g := grantFor(e, clock)
			g["max_external_spend"] = map[string]any{"currency": "USD", "amount_minor": 99}
			env.PublishGrant(t, g, env.Host)
		}, schema.CodeExternalSpendExceedsGrant},
		{"policy-method", func(e schema.Envelope) {
			g := grantFor(e, clock)
			g["authorization_method"] = schema.MethodPolicy
			env.PublishGrant(t, g, env.Host)
		}, schema.CodeAutomaticApprovalForbidden},
		{"weak", func(e schema.Envelope) {
			g := grantFor(e, clock)
			g["authentication_assurance"] = schema.AssuranceNone
			env.PublishGrant(t, g, env.Host)
		}, schema.CodeAuthenticationTooWeak},
	}
	envs := map[string]schema.Envelope{}
	for _, c := range cases {
		e := grounded(t, c.id, func(m map[string]any) {
			switch c.id {
			case "test-for-live":
				// Live is forbidden by "org": use a domain without policies.
				testenv.Set(m, "context.tenant.security_domain_ref", "security-domain:lab")
				testenv.Set(m, "intent.environment", "live")
			case "spend":
				testenv.Set(m, "intent.external_spend", map[string]any{"currency": "USD", "amount_minor": 100})
			}
		})
		envs[c.id] = e
		handOff(t, env, e)
	}
	for _, c := range cases {
		parked(t, env, envs[c.id], t0.Add(ttl).UnixMilli())
	}
	pending(t, env, float64(len(cases)))
	for _, c := range cases {
		c.send(envs[c.id])
	}
	for _, c := range cases {
		t.Run(c.id, func(t *testing.T) { denied(t, env, envs[c.id], c.code) })
	}
	pending(t, env, 0)
	env.Quiesce(t)
	if got := inbox(t, env, 0); len(got) != 0 {
		t.Errorf("dispatch inbox = %v", ids(got))
	}
	if n := countEvents(env, schema.CodeGrantUnmatched); n != 0 {
		t.Errorf("%d unmatched events", n)
	}
	checkPrivacy(t, env)
}

// TestStandaloneMessagesThatChangeNothing: a grant or decline that is not
// authenticated for the proposal's host, that names another host's
// proposal, that declines another intent, or that is not yet valid gets
// only an incident event; the proposal stays parked and a valid grant
// still resumes it (SPEC §2.2).
func TestStandaloneMessagesThatChangeNothing(t *testing.T) {
	env, clock := start(t)
	e := grounded(t, "prop-kept", nil)
	handOff(t, env, e)
	parked(t, env, e, t0.Add(ttl).UnixMilli())
	g := grantFor(e, clock)
	body := testenv.Body(t, g)
	edited := grantFor(e, clock)
	edited["authorized_by"] = "actor:mallory"
	future := grantFor(e, clock)
	future["issued_at_ms"] = t0.Add(31 * time.Second).UnixMilli()
	sends := []struct {
		name  string
		send  func()
		phase schema.Phase
		code  schema.Code
	}{
		{"another host's grant, on its own subject", func() { env.PublishGrant(t, g, env.OtherHost) }, schema.PhaseAuthorization, schema.CodeGrantUnmatched},
		{"another host's key on this host's subject", func() {
			env.PublishWith(t, env.Subjects.Grant(testenv.HostName), body, testenv.Sign(t, env.OtherHost, body))
		}, schema.PhaseAdmission, schema.CodeAdmissionUnauthenticated},
		{"edited after signing", func() {
			env.PublishWith(t, env.Subjects.Grant(testenv.HostName), testenv.Body(t, edited), testenv.Sign(t, env.Host, body))
		}, schema.PhaseAdmission, schema.CodeAdmissionUnauthenticated},
		{"unsigned", func() { env.PublishGrant(t, g, nil) }, schema.PhaseAdmission, schema.CodeAdmissionUnauthenticated},
		{"bare proposal id", func() {
			env.PublishWith(t, env.Subjects.Grant(testenv.HostName), []byte(`{"proposal_id":"prop-kept"}`), nil)
		}, schema.PhaseAdmission, schema.CodeAdmissionUnauthenticated},
		{"decline of another intent", func() {
			env.PublishGrant(t, map[string]any{"schema": schema.SchemaDecline, "proposal_id": "prop-kept",
				"intent_fingerprint": "sha256:" + strings.Repeat("0", 64), "declined_by": "actor:demo"}, env.Host)
		}, schema.PhaseAuthorization, schema.CodeGrantUnmatched},
		{"not yet valid (31s ahead, skew 30s)", func() { env.PublishGrant(t, future, env.Host) }, schema.PhaseAuthorization, schema.CodeGrantNotYetValid},
	}
	seen := map[[2]string]int{}
	for _, sd := range sends {
		sd.send()
		key := [2]string{string(sd.phase), string(sd.code)}
		seen[key]++
		env.Recorder.WaitEvents(t, sd.phase, sd.code, seen[key])
	}
	env.Quiesce(t)
	if outs := env.Recorder.Outcomes("prop-kept"); len(outs) != 1 || outs[0].Kind != schema.KindNeedsApproval {
		t.Fatalf("outcomes = %+v, want only NEEDS_APPROVAL", outs)
	}
	pending(t, env, 1)
	env.PublishGrant(t, g, env.Host)
	if got := inbox(t, env, 1); !slices.Equal(ids(got), []string{"prop-kept"}) {
		t.Errorf("dispatch inbox = %v", ids(got))
	}
	pending(t, env, 0)
}

// TestUnmatchedGrants: grants for nothing parked are refused with a
// bounded event and change nothing, whatever their body.
func TestUnmatchedGrants(t *testing.T) {
	env, clock := start(t)
	// An intent of its own: prop-inline's is dispatched below, and a
	// proposal of a dispatched intent is answered from it, never parked.
	early := grounded(t, "prop-early", func(m map[string]any) { testenv.Set(m, "intent.payload", map[string]any{"quantity": 21}) })
	env.PublishGrant(t, grantFor(early, clock), env.Host)                      // before its proposal parked
	env.PublishGrant(t, grantFor(grounded(t, "nobody", nil), clock), env.Host) // unknown proposal
	env.PublishGrant(t, []byte(`not json`), env.Host)
	env.PublishGrant(t, []byte(`{"proposal_id":"a","proposal_id":"b"}`), env.Host)
	env.PublishGrant(t, []byte(`{"proposal_id":"bad id"}`), env.Host)
	waitEvents(t, env, schema.CodeGrantUnmatched, 5)

	// An inline-granted proposal is never parked: a later grant is unmatched.
	inline := grounded(t, "prop-inline", nil)
	handOff(t, env, withInline(t, inline, grantFor(inline, clock)))
	inbox(t, env, 1)
	env.PublishGrant(t, grantFor(inline, clock), env.Host)
	waitEvents(t, env, schema.CodeGrantUnmatched, 6)

	// The early grant did not consume anything: the proposal still parks
	// and a fresh grant resumes it.
	handOff(t, env, early)
	parked(t, env, early, t0.Add(ttl).UnixMilli())
	env.PublishGrant(t, grantFor(early, clock), env.Host)
	if got := inbox(t, env, 2); !slices.Equal(ids(got), []string{"prop-inline", "prop-early"}) {
		t.Errorf("dispatch inbox = %v", ids(got))
	}
	for _, id := range []string{"nobody", "a", "b", "prop-inline"} {
		if outs := authOutcomes(env, id); len(outs) != 0 {
			t.Errorf("%s got outcomes %+v", id, outs)
		}
	}
	if n := countEvents(env, schema.CodeGrantUnmatched); n != 6 {
		t.Errorf("%d unmatched events, want 6", n)
	}
	m := env.Processor().Metrics()
	if got := testutil.ToFloat64(m.Incidents.WithLabelValues(string(schema.PhaseAuthorization), string(schema.CodeGrantUnmatched))); got != 6 {
		t.Errorf("actions_incidents_total{GRANT_UNMATCHED} = %v", got)
	}
	pending(t, env, 0)
}

// TestRedeliveredProposalIsDecidedOnce: the same envelope handed on again
// (a grounding redelivery after the duplicate window) neither parks twice
// nor re-decides a proposal a grant already resumed.
func TestRedeliveredProposalIsDecidedOnce(t *testing.T) {
	env, clock := start(t)
	e := grounded(t, "prop-twice", nil)
	handOff(t, env, e)
	parked(t, env, e, t0.Add(ttl).UnixMilli())
	env.PublishGrant(t, grantFor(e, clock), env.Host)
	inbox(t, env, 1)
	handOff(t, env, e) // a second message on the subject: not a redelivery of the first
	env.Quiesce(t)
	clock.Advance(2 * ttl)
	// An intent of its own: prop-twice's was dispatched, and a proposal of
	// a dispatched intent is answered from it, never parked.
	other := grounded(t, "prop-after", func(m map[string]any) { testenv.Set(m, "intent.payload", map[string]any{"quantity": 21}) })
	handOff(t, env, other)
	parked(t, env, other, t0.Add(3*ttl).UnixMilli())
	env.Quiesce(t)
	if outs := authOutcomes(env, "prop-twice"); len(outs) != 1 {
		t.Errorf("outcomes = %+v", outs)
	}
	if got := inbox(t, env, 1); len(got) != 1 {
		t.Errorf("dispatch inbox = %v", ids(got))
	}
	pending(t, env, 1)
}

// TestUnsignedGrantsInDev: with admission.allow_unsigned, an unsigned
// grant resumes a parked proposal; a wrongly signed one still does not.
func TestUnsignedGrantsInDev(t *testing.T) {
	env, clock := start(t, testenv.WithConfig(func(c *config.Config) { c.Admission.AllowUnsigned = true }))
	e := grounded(t, "prop-dev", nil)
	f := grounded(t, "prop-dev-bad", func(m map[string]any) { testenv.Set(m, "intent.payload.quantity", 3) })
	handOff(t, env, e)
	handOff(t, env, f)
	parked(t, env, e, t0.Add(ttl).UnixMilli())
	parked(t, env, f, t0.Add(ttl).UnixMilli())
	env.PublishGrant(t, grantFor(e, clock), nil)
	// Signed messages are checked in full even in development mode: another
	// host's grant reaches only its own proposals (none), a bad signature
	// nothing at all.
	env.PublishGrant(t, grantFor(f, clock), env.OtherHost)
	fb := testenv.Body(t, grantFor(f, clock))
	env.PublishWith(t, env.Subjects.Grant(testenv.HostName), fb, testenv.Sign(t, env.Host, []byte("other")))
	waitEvents(t, env, schema.CodeGrantUnmatched, 1)
	env.Recorder.WaitEvents(t, schema.PhaseAdmission, schema.CodeAdmissionUnauthenticated, 1)
	if got := inbox(t, env, 1); !slices.Equal(ids(got), []string{"prop-dev"}) {
		t.Errorf("dispatch inbox = %v", ids(got))
	}
	env.Quiesce(t)
	if outs := env.Recorder.Outcomes("prop-dev-bad"); len(outs) != 1 || outs[0].Kind != schema.KindNeedsApproval {
		t.Errorf("prop-dev-bad outcomes = %+v, want it still parked", outs)
	}
}

// TestUndecodableHandOff: an envelope the stage cannot read ends its
// proposal with PROCESSING_FAILED at once, not a redelivery loop.
func TestUndecodableHandOff(t *testing.T) {
	env, _ := start(t)
	env.PublishInternal(t, env.Subjects.Stage(subjects.StageAuthorization, subjects.KindProposal, "frontdesk.prop-garbled"), []byte(`{"schema":`))
	o := env.Recorder.Wait(t, "prop-garbled", testenv.Terminal)
	if o.Kind != schema.KindIntegrationFailure || len(o.Incidents) != 1 || o.Incidents[0] != incident(schema.CodeProcessingFailed) {
		t.Fatalf("outcome = %+v", o)
	}
	env.Quiesce(t)
	m := env.Processor().Metrics()
	gaveUp := m.StageMessages.WithLabelValues(subjects.StageAuthorization, "gave_up")
	// The runner counts a message after it acked it.
	testenv.WaitFor(t, "gave_up = 1", func() bool { return testutil.ToFloat64(gaveUp) == 1 })
	if got := testutil.ToFloat64(m.StageMessages.WithLabelValues(subjects.StageAuthorization, "retry")); got != 0 {
		t.Errorf("retries = %v", got)
	}
}

// TestPolicyRefusesBeforeAsking: a proposal that managed policy refuses
// whatever the grant is denied at once, without asking anyone to approve it.
func TestPolicyRefusesBeforeAsking(t *testing.T) {
	env, _ := start(t)
	off := grounded(t, "prop-off", func(m map[string]any) { testenv.Set(m, "context.tenant.security_domain_ref", domainOff) })
	live := grounded(t, "prop-live", func(m map[string]any) { testenv.Set(m, "intent.environment", "live") })
	rich := grounded(t, "prop-rich", func(m map[string]any) {
		testenv.Set(m, "intent.external_spend", map[string]any{"currency": "GBP", "amount_minor": 1})
	})
	for _, e := range []schema.Envelope{off, live, rich} {
		handOff(t, env, e)
	}
	denied(t, env, off, schema.CodeExternalActionsDisabled)
	denied(t, env, live, schema.CodeLiveActionsForbidden)
	denied(t, env, rich, schema.CodeExternalSpendExceedsPolicy)
	for _, id := range []string{"prop-off", "prop-live", "prop-rich"} {
		if outs := authOutcomes(env, id); len(outs) != 1 {
			t.Errorf("%s: outcomes = %+v", id, outs)
		}
	}
	a := activityOf(t, env, off.Grounded.Fingerprint, func(a *schema.Activity) bool { return a.Status == schema.ActivityDenied })
	want := []schema.PolicyEvaluation{{Layer: "managed_policy:off", Outcome: "deny", ReasonCode: schema.CodeExternalActionsDisabled}}
	if !slices.Equal(a.PolicyEvaluations, want) || a.Authorization.Method != "" {
		t.Errorf("activity = %+v %+v", a.PolicyEvaluations, a.Authorization)
	}
	pending(t, env, 0)
}

// TestUnusedGrantsAreLoggedValueFree: a grant or decline that changes
// nothing is logged with its codes and, for one that does not decode, the
// field path and rule — never what it carried.
func TestUnusedGrantsAreLoggedValueFree(t *testing.T) {
	env, clock := start(t)
	const (
		by     = "SECRET-AUTHORIZER-61a"
		member = "SECRET-MEMBER-62b"
	)
	g := grantFor(grounded(t, "log-nobody", nil), clock)
	g["authorized_by"] = by
	env.PublishGrant(t, g, env.Host) // names no parked proposal
	bad := grantFor(grounded(t, "log-bad", nil), clock)
	bad[member] = by
	env.PublishGrant(t, bad, env.Host) // does not decode: an unknown member
	waitEvents(t, env, schema.CodeGrantUnmatched, 2)
	env.Quiesce(t)

	type line struct {
		Msg        string   `json:"msg"`
		Path       string   `json:"path"`
		Rule       string   `json:"rule"`
		Level      string   `json:"level"`
		Codes      []string `json:"codes"`
		ProposalID string   `json:"proposal_id"`
	}
	var lines []line
	for _, raw := range bytes.Split(env.Logs.Bytes(), []byte("\n")) {
		var l line
		if json.Unmarshal(raw, &l) == nil && l.Msg == "authorization: grant or decline changed nothing" {
			lines = append(lines, l)
		}
	}
	byID := map[string]line{}
	for _, l := range lines {
		byID[l.ProposalID] = l
	}
	if l, ok := byID["log-nobody"]; !ok || !slices.Equal(l.Codes, []string{string(schema.CodeGrantUnmatched)}) || l.Path != "" || l.Level != "INFO" {
		t.Errorf("unmatched grant logged %+v (found %v) among %+v", l, ok, lines)
	}
	if l, ok := byID["log-bad"]; !ok || l.Rule != string(schema.RuleUnknownMember) {
		t.Errorf("undecodable grant logged %+v (found %v), want rule %q", l, ok, schema.RuleUnknownMember)
	}
	env.AssertNowhere(t, by, member)
}

// An intent already dispatched, proposed again under a new proposal id
// without a grant, is answered with its receipt (SPEC §2.4: the same
// receipt) — no approval is asked for an action that will not happen
// again, and the provider is not called.
func TestDoneIntentIsAnsweredFromItsReceipt(t *testing.T) {
	env, clock := start(t)
	first := grounded(t, "prop-done-1", nil)
	handOff(t, env, withInline(t, first, grantFor(first, clock)))
	done := env.Recorder.Wait(t, "prop-done-1", testenv.Terminal)
	if done.Kind != schema.KindConfirmed || done.Receipt == nil {
		t.Fatalf("first proposal: %+v", done)
	}
	again := grounded(t, "prop-done-2", nil) // the same intent, no grant
	handOff(t, env, again)
	o := env.Recorder.Wait(t, "prop-done-2", testenv.Terminal)
	if o.Kind != schema.KindConfirmed || o.Receipt == nil || o.Receipt.ReceiptID != done.Receipt.ReceiptID {
		t.Errorf("the done intent proposed again: %+v, want its receipt %s", o, done.Receipt.ReceiptID)
	}
	for _, x := range env.Recorder.Outcomes("prop-done-2") {
		if x.Kind == schema.KindNeedsApproval {
			t.Errorf("an approval was asked for a done intent: %+v", x)
		}
	}
	if n := env.Fakes["demo"].Dispatches(); n != 1 {
		t.Errorf("the provider was called %d times", n)
	}
	// A redelivery of the bound decision republishes it, nothing else.
	env.Quiesce(t)
	if n := env.Fakes["demo"].Dispatches(); n != 1 {
		t.Errorf("the provider was called %d times", n)
	}
}
