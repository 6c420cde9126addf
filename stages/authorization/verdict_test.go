package authorization

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/trust"
	"github.com/portcullis/portcullis/stages/policy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	fp  = "sha256:" + "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12"
	now = int64(1_764_424_800_000)
)

// flight is a grounded envelope of the seed's booking (SEA→JFK, $245.67).
func flight() *schema.Envelope {
	return &schema.Envelope{
		Schema: schema.SchemaEnvelope,
		Proposal: schema.Proposal{
			Schema:     schema.SchemaProposal,
			ProposalID: "prop-1",
			Context: schema.Context{
				Tenant: schema.TenantContext{TenantRef: "tenant:demo", SecurityDomainRef: "security-domain:demo"},
				Actor:  schema.ActorContext{ActorRef: "actor:demo", Assurance: "host-session"},
			},
			Intent: schema.Intent{
				Provider: "duffel", Capability: "flights.book", Operation: "create_order", Environment: schema.EnvTest,
				Payload:       []byte(`{"offer_id":"off-1"}`),
				ExternalSpend: &schema.Spend{Currency: "USD", AmountMinor: 24567},
				Display:       schema.Display{Summary: "Book SEA to JFK for $245.67"},
			},
			Requester: &schema.Requester{AgentID: "agent:7"},
		},
		Host:     "frontdesk",
		Grounded: &schema.Grounded{Referent: "offer:off-1", Fingerprint: fp, IdempotencyKey: fp[7:]},
	}
}

func grant() *schema.Grant {
	return &schema.Grant{
		Schema: schema.SchemaGrant, ProposalID: "prop-1", IntentFingerprint: fp,
		AuthorizedBy: "actor:demo", AuthorizationMethod: schema.MethodManual,
		AuthenticationAssurance: schema.AssuranceBiometric,
		IssuedAtMs:              now, ExpiresAtMs: now + 300_000,
		MaxExternalSpend: &schema.Spend{Currency: "USD", AmountMinor: 24567},
	}
}

func withGrant(g *schema.Grant) *schema.Envelope {
	env := flight()
	env.Proposal.Grant = g
	return env
}

var seedPolicy = policy.ManagedPolicy{
	Name:                           "org",
	AutomaticApprovalForbidden:     true,
	LiveActionsForbidden:           true,
	MinimumAuthenticationAssurance: schema.AssuranceBiometric,
	MaxExternalSpend:               map[string]int64{"USD": 50000},
	AllowedProviders:               []string{"duffel"},
	AllowedCapabilities:            []string{"flights.book"},
	AllowedEnvironments:            []string{schema.EnvTest},
}

func TestDecideProposal(t *testing.T) {
	pol := Policy{Rules: policy.Rules{Managed: []policy.ManagedPolicy{seedPolicy}}, ApprovalTTL: 10 * time.Minute}
	passGrant := schema.PolicyEvaluation{Layer: "grant", Outcome: schema.EvalPass}
	passOrg := schema.PolicyEvaluation{Layer: "managed_policy:org", Outcome: schema.EvalPass}
	deny := func(layer string, code schema.Code) schema.PolicyEvaluation {
		return schema.PolicyEvaluation{Layer: layer, Outcome: schema.EvalDeny, ReasonCode: code}
	}
	cases := []struct {
		name     string
		env      func() *schema.Envelope
		decision string
		code     schema.Code
		evals    []schema.PolicyEvaluation
	}{
		{"no grant: park", flight, Park, schema.CodeApprovalRequired, []schema.PolicyEvaluation{passOrg}},
		{"no grant, live: denied before asking anyone", func() *schema.Envelope {
			e := flight()
			e.Proposal.Intent.Environment = schema.EnvLive
			return e
		}, Deny, schema.CodeLiveActionsForbidden, []schema.PolicyEvaluation{deny("managed_policy:org", schema.CodeLiveActionsForbidden)}},
		{"no grant, spend over policy", func() *schema.Envelope {
			e := flight()
			e.Proposal.Intent.ExternalSpend.AmountMinor = 50001
			return e
		}, Deny, schema.CodeExternalSpendExceedsPolicy, []schema.PolicyEvaluation{deny("managed_policy:org", schema.CodeExternalSpendExceedsPolicy)}},
		{"inline seed grant: permit", func() *schema.Envelope { return withGrant(grant()) }, Permit, "", []schema.PolicyEvaluation{passGrant, passOrg}},
		{"inline grant, changed payload", func() *schema.Envelope {
			g := grant()
			g.IntentFingerprint = "sha256:" + strings.Repeat("0", 64)
			return withGrant(g)
		}, Deny, schema.CodeGrantBindingMismatch, []schema.PolicyEvaluation{deny("grant", schema.CodeGrantBindingMismatch)}},
		{"inline adversarial_auto", func() *schema.Envelope {
			g := grant()
			g.AuthorizationMethod = schema.MethodAdversarialAuto
			return withGrant(g)
		}, Deny, schema.CodeAutomaticApprovalForbidden, []schema.PolicyEvaluation{passGrant, deny("managed_policy:org", schema.CodeAutomaticApprovalForbidden)}},
		{"inline session assurance", func() *schema.Envelope {
			g := grant()
			g.AuthenticationAssurance = schema.AssuranceSession
			return withGrant(g)
		}, Deny, schema.CodeAuthenticationTooWeak, []schema.PolicyEvaluation{passGrant, deny("managed_policy:org", schema.CodeAuthenticationTooWeak)}},
		{"inline grant expired", func() *schema.Envelope {
			g := grant()
			g.IssuedAtMs, g.ExpiresAtMs = now-10, now
			return withGrant(g)
		}, Deny, schema.CodeGrantExpired, []schema.PolicyEvaluation{deny("grant", schema.CodeGrantExpired)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := DecideProposal(pol, tc.env(), now)
			if v.Decision != tc.decision || v.Code != tc.code || !slices.Equal(v.Evaluations, tc.evals) {
				t.Fatalf("verdict = %+v, want %s %q %+v", v, tc.decision, tc.code, tc.evals)
			}
		})
	}
}

// judge is what the grants consumer decides for a message on host h's
// grants subject, when host "frontdesk"'s proposal "prop-1" (flight) is
// parked until expires: the event-only answers as Keep verdicts.
func judge(p Policy, h string, body []byte, hdr nats.Header, expires, at int64) Ruling {
	m, inc, _ := ReadStandalone(p, h, body, hdr)
	if inc != nil {
		return Ruling{Decision: Keep, Code: inc.Code, Event: inc}
	}
	if m.Host != "frontdesk" || m.ProposalID != "prop-1" {
		return keep(schema.PhaseAuthorization, schema.CodeGrantUnmatched)
	}
	return DecideStandalone(p, m, flight(), fp, expires, at)
}

func TestStandaloneGrantsAndDeclines(t *testing.T) {
	host, _ := nkeys.CreateUser()
	other, _ := nkeys.CreateUser()
	stranger, _ := nkeys.CreateUser()
	hostKey, _ := host.PublicKey()
	otherKey, _ := other.PublicKey()
	pol := Policy{
		Rules:         policy.Rules{Managed: []policy.ManagedPolicy{seedPolicy}, ClockSkew: 30 * time.Second, MaxGrantLifetime: 24 * time.Hour},
		ApprovalTTL:   10 * time.Minute,
		MaxGrantBytes: 4096,
	}
	tr := trust.Policy{
		Hosts: []trust.Host{
			{Name: "frontdesk", PublicKey: hostKey, Tenants: []string{"tenant:demo"}},
			{Name: "elsewhere", PublicKey: otherKey, Tenants: []string{"tenant:other"}},
		},
		Tenants: []trust.Tenant{
			{Ref: "tenant:demo", SecurityDomains: []string{"security-domain:demo"}},
			{Ref: "tenant:other", SecurityDomains: []string{"security-domain:other"}},
		},
	}
	pol.Trust = tr
	dev := pol
	devTrust := tr
	devTrust.AllowUnsigned = true
	dev.Trust = devTrust
	moved := pol // the host no longer speaks for the parked proposal's tenant
	movedTrust := tr
	movedTrust.Hosts = []trust.Host{{Name: "frontdesk", PublicKey: hostKey, Tenants: []string{"tenant:other"}}}
	moved.Trust = movedTrust
	expires := now + 600_000
	edit := func(v any, f func(m map[string]any)) []byte {
		b, _ := json.Marshal(v)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		if f != nil {
			f(m)
		}
		b, _ = json.Marshal(m)
		return b
	}
	body := func(f func(m map[string]any)) []byte { return edit(grant(), f) }
	decline := func(f func(m map[string]any)) []byte {
		return edit(schema.Decline{Schema: schema.SchemaDecline, ProposalID: "prop-1", IntentFingerprint: fp, DeclinedBy: "actor:demo"}, f)
	}
	sign := func(kp nkeys.KeyPair) func([]byte) nats.Header {
		return func(b []byte) nats.Header {
			h, err := trust.Sign(kp, b)
			if err != nil {
				t.Fatal(err)
			}
			return h
		}
	}
	unsigned := func([]byte) nats.Header { return nil }
	seed := body(nil)
	const unauth, unmatched, notYet = schema.CodeAdmissionUnauthenticated, schema.CodeGrantUnmatched, schema.CodeGrantNotYetValid
	cases := []struct {
		name     string
		policy   Policy
		h        string // the subject's host; "" frontdesk
		body     []byte
		hdr      func([]byte) nats.Header
		at       int64
		decision string
		code     schema.Code
	}{
		{"signed seed grant", pol, "", seed, sign(host), now, Permit, ""},
		{"unsigned in dev", dev, "", seed, unsigned, now, Permit, ""},
		// Nothing proves who sent these: an event, the proposal stays parked.
		{"unsigned", pol, "", seed, unsigned, now, Keep, unauth},
		{"bare proposal id", pol, "", []byte(`{"proposal_id":"prop-1"}`), unsigned, now, Keep, unauth},
		{"another host's key on this host's subject", pol, "", seed, sign(other), now, Keep, unauth},
		{"another host, its own subject", pol, "elsewhere", seed, sign(other), now, Keep, unmatched},
		{"unknown host", pol, "", seed, sign(stranger), now, Keep, unauth},
		{"unknown host in dev", dev, "", seed, sign(stranger), now, Keep, unauth},
		{"edited authorized_by", pol, "", body(func(m map[string]any) { m["authorized_by"] = "actor:mallory" }), func([]byte) nats.Header { return sign(host)(seed) }, now, Keep, unauth},
		{"garbled signature", pol, "", seed, func(b []byte) nats.Header {
			h := sign(host)(b)
			h.Set(trust.HeaderSignature, "%%%")
			return h
		}, now, Keep, unauth},
		{"host no longer speaks for the tenant", moved, "", seed, sign(host), now, Keep, unauth},
		// Authenticated, but naming no parked proposal of this host.
		{"not json", pol, "", []byte(`{"proposal_id":"prop-1",`), sign(host), now, Keep, unmatched},
		{"no proposal id", pol, "", body(func(m map[string]any) { delete(m, "proposal_id") }), sign(host), now, Keep, unmatched},
		{"other proposal (replayed grant)", pol, "", body(func(m map[string]any) { m["proposal_id"] = "prop-2" }), sign(host), now, Keep, unmatched},
		// Authenticated for the parked proposal: judged like an inline grant.
		{"approval expired, even signed", pol, "", seed, sign(host), expires, Deny, schema.CodeApprovalTimedOut},
		{"approval expires 1ms later", pol, "", seed, sign(host), now + 299_999, Permit, ""},
		{"unknown field", pol, "", body(func(m map[string]any) { m["scope"] = "all" }), sign(host), now, Deny, schema.CodeGrantMalformed},
		{"duplicate key", pol, "", []byte(strings.Replace(string(seed), `"schema"`, `"authorized_by":"x","schema"`, 1)), sign(host), now, Deny, schema.CodeGrantMalformed},
		{"too large", pol, "", body(func(m map[string]any) { m["authorized_by"] = strings.Repeat("a", 5000) }), sign(host), now, Deny, schema.CodeGrantMalformed},
		{"wrong type", pol, "", body(func(m map[string]any) { m["issued_at_ms"] = "now" }), sign(host), now, Deny, schema.CodeGrantMalformed},
		{"another intent's fingerprint", pol, "", body(func(m map[string]any) { m["intent_fingerprint"] = "sha256:" + strings.Repeat("0", 64) }), sign(host), now, Deny, schema.CodeGrantBindingMismatch},
		{"issued 200ms ahead (clock skew)", pol, "", seed, sign(host), now - 200, Permit, ""},
		{"issued 30s ahead", pol, "", seed, sign(host), now - 30_000, Permit, ""},
		{"issued 31s ahead: stays parked", pol, "", seed, sign(host), now - 31_000, Keep, notYet},
		{"expired", pol, "", seed, sign(host), now + 300_000, Deny, schema.CodeGrantExpired},
		{"lifetime 24h", pol, "", body(func(m map[string]any) { m["expires_at_ms"] = now + 24*3600_000 }), sign(host), now, Permit, ""},
		{"lifetime 24h + 1ms", pol, "", body(func(m map[string]any) { m["expires_at_ms"] = now + 24*3600_000 + 1 }), sign(host), now, Deny, schema.CodeGrantLifetimeExceeded},
		{"valid until 2286", pol, "", body(func(m map[string]any) { m["expires_at_ms"] = int64(9_999_999_999_999) }), sign(host), now, Deny, schema.CodeGrantLifetimeExceeded},
		{"spend over grant", pol, "", body(func(m map[string]any) {
			m["max_external_spend"] = map[string]any{"currency": "USD", "amount_minor": 24566}
		}), sign(host), now, Deny, schema.CodeExternalSpendExceedsGrant},
		{"policy method", pol, "", body(func(m map[string]any) { m["authorization_method"] = "policy" }), sign(host), now, Deny, schema.CodeAutomaticApprovalForbidden},
		// Declines.
		{"decline", pol, "", decline(nil), sign(host), now, Deny, schema.CodeApprovalDeclined},
		{"decline after the approval expired", pol, "", decline(nil), sign(host), expires, Deny, schema.CodeApprovalDeclined},
		{"decline unsigned", pol, "", decline(nil), unsigned, now, Keep, unauth},
		{"decline of another intent", pol, "", decline(func(m map[string]any) { m["intent_fingerprint"] = "sha256:" + strings.Repeat("0", 64) }), sign(host), now, Keep, unmatched},
		{"decline without declined_by", pol, "", decline(func(m map[string]any) { delete(m, "declined_by") }), sign(host), now, Keep, unmatched},
		{"decline with an unknown field", pol, "", decline(func(m map[string]any) { m["why"] = "x" }), sign(host), now, Keep, unmatched},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.h
			if h == "" {
				h = "frontdesk"
			}
			v := judge(tc.policy, h, tc.body, tc.hdr(tc.body), expires, tc.at)
			if v.Decision != tc.decision || v.Code != tc.code {
				t.Fatalf("verdict = %s %q, want %s %q", v.Decision, v.Code, tc.decision, tc.code)
			}
			if v.Decision == Keep && (v.Event == nil || v.Event.Code != tc.code) {
				t.Errorf("keep without its event: %+v", v)
			}
			if v.Decision == Permit && (v.Grant == nil || v.Grant.AuthorizedBy != "actor:demo") {
				t.Errorf("permit without its grant: %+v", v)
			}
			if v.Decision != Keep && (len(v.Evaluations) == 0 || v.Evaluations[0].Layer != "grant") {
				t.Errorf("evaluations = %+v", v.Evaluations)
			}
		})
	}
}

func TestOutcomesAndHandOff(t *testing.T) {
	env := flight()
	exp := now + 600_000
	park := DecideProposal(Policy{}, env, now)
	ref := schema.ProposalRef{Host: "frontdesk", ProposalID: "prop-1"}
	o := Outcome(ref, fp, "offer:off-1", park, now, ApprovalRequest(env, exp))
	want := schema.Approval{Fingerprint: fp, Summary: "Book SEA to JFK for $245.67", ExternalSpend: env.Proposal.Intent.ExternalSpend, ExpiresAtMs: exp}
	if o.Kind != schema.KindNeedsApproval || o.Terminal || o.EffectTruth != schema.TruthNotDispatched || o.Approval == nil || *o.Approval != want {
		t.Fatalf("parked outcome = %+v", o)
	}
	if *o.Fingerprint != fp || *o.Referent != "offer:off-1" || o.AtMs != now || len(o.Incidents) != 1 || o.Incidents[0].Code != schema.CodeApprovalRequired {
		t.Errorf("parked outcome = %+v", o)
	}
	d := Outcome(ref, fp, "offer:off-1", TimedOut(), now, ApprovalRequest(env, exp))
	if d.Kind != schema.KindDenied || !d.Terminal || d.Approval != nil || d.Incidents[0] != (schema.Incident{Phase: "authorization", Code: schema.CodeApprovalTimedOut, DispatchBoundary: "not_invoked"}) {
		t.Errorf("timed-out outcome = %+v", d)
	}

	permit := DecideProposal(Policy{}, withGrant(grant()), now)
	h := HandOff(withGrant(grant()), permit, now)
	if h.Authorization == nil || string(schema.MustMarshal(h.Authorization.Grant)) != string(schema.MustMarshal(grant())) || h.Authorization.DecidedAtMs != now || !slices.Equal(h.Authorization.Evaluations, permit.Evaluations) {
		t.Errorf("hand-off authorization = %+v", h.Authorization)
	}
	if h.Grounded == nil || h.Grounded.Fingerprint != fp || h.Proposal.ProposalID != "prop-1" {
		t.Errorf("hand-off lost the proposal: %+v", h)
	}
}

func ref(id string) schema.ProposalRef { return schema.ProposalRef{Host: "frontdesk", ProposalID: id} }

func TestActivityEdit(t *testing.T) {
	env := withGrant(grant())
	var a schema.Activity
	ActivityEdit(ref("prop-1"), flight(), DecideProposal(Policy{}, flight(), now), now, now+600_000).Apply(&a)
	if a.Status != schema.ActivityAwaitingApproval || a.Decision.Outcome != "pending" || a.Decision.ReasonCode != schema.CodeApprovalRequired ||
		a.Authorization.ApprovalExpiresAtMs != now+600_000 || a.Authorization.Method != "" {
		t.Fatalf("parked activity = %+v %+v %+v", a, a.Decision, a.Authorization)
	}
	if a.Provider != "duffel" || a.Referent != "offer:off-1" || a.Summary == "" || a.ExternalSpend.AmountMinor != 24567 || a.Requester.AgentID != "agent:7" {
		t.Errorf("parked activity = %+v", a)
	}
	v := DecideProposal(Policy{}, env, now+5)
	ActivityEdit(ref("prop-1"), env, v, now+5, 0).Apply(&a)
	if a.Status != schema.ActivityAuthorized || a.Decision.Outcome != "permit" || a.Decision.ReasonCode != "" || a.Decision.DecidedAtMs != now+5 {
		t.Errorf("permitted activity decision = %+v", a.Decision)
	}
	wantAuth := schema.ActivityAuthorization{Method: "manual", Assurance: "biometric", IssuedAtMs: now, ExpiresAtMs: now + 300_000, ApprovalExpiresAtMs: now + 600_000}
	if *a.Authorization != wantAuth || !slices.Equal(a.Proposals, []schema.ProposalRef{ref("prop-1")}) {
		t.Errorf("permitted activity authorization = %+v, ids %v", a.Authorization, a.Proposals)
	}
	// The grant's author never reaches the activity record, nor does the payload.
	raw := string(schema.MustMarshal(a))
	for _, leak := range []string{"actor:demo", "tenant:demo", "off-1\"}", "offer_id"} {
		if strings.Contains(raw, leak) {
			t.Errorf("activity holds %q: %s", leak, raw)
		}
	}
	// Once authorized, a later proposal of the same intent is only listed.
	bad := grant()
	bad.AuthorizationMethod = "telepathy"
	ActivityEdit(ref("prop-2"), nil, Ruling{Decision: Deny, Code: schema.CodeGrantMalformed, Grant: bad}, now+6, 0).Apply(&a)
	if a.Status != schema.ActivityAuthorized || a.Decision.Outcome != "permit" || !slices.Equal(a.Proposals, []schema.ProposalRef{ref("prop-1"), ref("prop-2")}) {
		t.Errorf("activity after a later denial = %+v %+v", a, a.Decision)
	}
	// So is any decision once a receipt exists.
	a.Receipt = &schema.Receipt{Status: "confirmed"}
	a.Status = "confirmed"
	ActivityEdit(ref("prop-3"), env, v, now+7, 0).Apply(&a)
	if a.Status != "confirmed" || a.Decision.DecidedAtMs != now+5 || len(a.Proposals) != 3 {
		t.Errorf("activity after the receipt = %+v %+v", a, a.Decision)
	}
	// A write that lands late (a parked proposal's, after its grant's)
	// does not roll the snapshot back.
	var late schema.Activity
	park := DecideProposal(Policy{}, flight(), now)
	ActivityEdit(ref("prop-5"), flight(), Ruling{Decision: Deny, Code: schema.CodeGrantExpired}, now, 0).Apply(&late)
	ActivityEdit(ref("prop-5"), flight(), park, now, now+600_000).Apply(&late)
	if late.Status != schema.ActivityDenied || late.Decision.ReasonCode != schema.CodeGrantExpired {
		t.Errorf("late park write = %+v", late.Decision)
	}
	ActivityEdit(ref("prop-5"), flight(), Ruling{Decision: Deny, Code: schema.CodeGrantMalformed}, now-1, 0).Apply(&late)
	if late.Decision.ReasonCode != schema.CodeGrantExpired {
		t.Errorf("older decision applied: %+v", late.Decision)
	}
	ActivityEdit(ref("prop-6"), flight(), park, now+1, now+600_001).Apply(&late)
	if late.Status != schema.ActivityAwaitingApproval {
		t.Errorf("a newer proposal of the intent is not shown: %+v", late.Decision)
	}
	// Before that, a denial replaces the picture; a malformed grant's
	// fields are not recorded.
	var d schema.Activity
	ActivityEdit(ref("prop-4"), flight(), DecideProposal(Policy{}, flight(), now), now, now+600_000).Apply(&d)
	ActivityEdit(ref("prop-4"), nil, Ruling{Decision: Deny, Code: schema.CodeGrantMalformed, Grant: bad}, now+6, 0).Apply(&d)
	if d.Status != schema.ActivityDenied || d.Decision.ReasonCode != schema.CodeGrantMalformed || d.Authorization.Method != "" ||
		d.Authorization.ApprovalExpiresAtMs != now+600_000 || d.Provider != "duffel" {
		t.Errorf("denied activity = %+v %+v", d, d.Authorization)
	}
}

// FuzzStandalone feeds arbitrary grant and decline bodies: every verdict
// is a closed code; only a strictly valid grant bound to the proposal
// permits, and only a valid decline of its fingerprint declines.
func FuzzStandalone(f *testing.F) {
	seed, _ := json.Marshal(grant())
	f.Add(seed)
	f.Add(seed[:len(seed)/2])
	f.Add(seed[len(seed)/2:])
	f.Add([]byte(`{"proposal_id":"prop-1","proposal_id":"prop-1"}`))
	f.Add([]byte(`{"schema":"actions.decline.v1","proposal_id":"prop-1","intent_fingerprint":"` + fp + `","declined_by":"a"}`))
	f.Add([]byte(`null`))
	pol := Policy{Rules: policy.Rules{Managed: []policy.ManagedPolicy{seedPolicy}}, Trust: trust.Policy{AllowUnsigned: true}, MaxGrantBytes: 65536}
	f.Fuzz(func(t *testing.T, body []byte) {
		v := judge(pol, "frontdesk", body, nil, now+600_000, now)
		switch v.Decision {
		case Permit:
			g, err := schema.DecodeGrant(body, 0)
			if err != nil || !g.Valid() || g.IntentFingerprint != fp || g.ProposalID != "prop-1" {
				t.Fatalf("permitted %q", body)
			}
			return
		case Keep:
			if v.Event == nil {
				t.Fatal("keep without an event")
			}
			return
		}
		if v.Code == schema.CodeApprovalDeclined {
			var d schema.Decline
			if schema.Decode(body, &d) != nil || !d.Valid() || d.IntentFingerprint != fp {
				t.Fatalf("declined by %q", body)
			}
		}
		if info, ok := schema.LookupCode(schema.PhaseAuthorization, v.Code); !ok || info.Kind != schema.KindDenied {
			t.Fatalf("code %q is not an authorization denial", v.Code)
		}
	})
}
