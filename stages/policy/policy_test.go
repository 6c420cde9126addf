package policy

import (
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/schema"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	fp    = "sha256:" + "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12"
	other = "sha256:" + "cd34cd34cd34cd34cd34cd34cd34cd34cd34cd34cd34cd34cd34cd34cd34cd34"
	now   = int64(1_764_424_800_000)
)

// flight is the seed's booking: SEA→JFK for $245.67, in test.
func flight() Target {
	return Target{
		ProposalID: "prop-1", Fingerprint: fp, SecurityDomain: "security-domain:demo",
		Provider: "duffel", Capability: "flights.book", Environment: schema.EnvTest,
		ExternalSpend: &schema.Spend{Currency: "USD", AmountMinor: 24567},
	}
}

// grant is the seed's manual, biometric grant for flight(), valid for 5 minutes from now.
func grant() *schema.Grant {
	return &schema.Grant{
		Schema: schema.SchemaGrant, ProposalID: "prop-1", IntentFingerprint: fp,
		AuthorizedBy: "actor:demo", AuthorizationMethod: schema.MethodManual,
		AuthenticationAssurance: schema.AssuranceBiometric,
		IssuedAtMs:              now, ExpiresAtMs: now + 300_000,
		MaxExternalSpend: &schema.Spend{Currency: "USD", AmountMinor: 24567},
	}
}

func TestCheckGrant(t *testing.T) {
	type edit func(g *schema.Grant, tg *Target, at *int64)
	cases := []struct {
		name string
		edit edit
		want schema.Code
	}{
		{"seed grant", func(*schema.Grant, *Target, *int64) {}, ""},
		{"no proposal id (inline)", func(g *schema.Grant, _ *Target, _ *int64) { g.ProposalID = "" }, ""},
		{"wrong schema", func(g *schema.Grant, _ *Target, _ *int64) { g.Schema = "actions.grant.v2" }, schema.CodeGrantMalformed},
		{"bad fingerprint form", func(g *schema.Grant, _ *Target, _ *int64) { g.IntentFingerprint = strings.ToUpper(fp) }, schema.CodeGrantMalformed},
		{"bad proposal id", func(g *schema.Grant, _ *Target, _ *int64) { g.ProposalID = "a b" }, schema.CodeGrantMalformed},
		{"empty authorized_by", func(g *schema.Grant, _ *Target, _ *int64) { g.AuthorizedBy = " " }, schema.CodeGrantMalformed},
		{"multi-line authorized_by", func(g *schema.Grant, _ *Target, _ *int64) { g.AuthorizedBy = "a\nb" }, schema.CodeGrantMalformed},
		{"unknown method", func(g *schema.Grant, _ *Target, _ *int64) { g.AuthorizationMethod = "telepathy" }, schema.CodeGrantMalformed},
		{"unknown assurance", func(g *schema.Grant, _ *Target, _ *int64) { g.AuthenticationAssurance = "retina" }, schema.CodeGrantMalformed},
		{"empty window", func(g *schema.Grant, _ *Target, _ *int64) { g.ExpiresAtMs = g.IssuedAtMs }, schema.CodeGrantMalformed},
		{"negative issued_at", func(g *schema.Grant, _ *Target, _ *int64) { g.IssuedAtMs = -1 }, schema.CodeGrantMalformed},
		{"bad ceiling currency", func(g *schema.Grant, _ *Target, _ *int64) { g.MaxExternalSpend.Currency = "usd" }, schema.CodeGrantMalformed},
		{"negative ceiling", func(g *schema.Grant, _ *Target, _ *int64) { g.MaxExternalSpend.AmountMinor = -1 }, schema.CodeGrantMalformed},
		// Harn: a changed payload changes the fingerprint.
		{"other fingerprint", func(g *schema.Grant, _ *Target, _ *int64) { g.IntentFingerprint = other }, schema.CodeGrantBindingMismatch},
		// Never tested by Harn: a grant replayed for a different proposal.
		{"other proposal", func(g *schema.Grant, _ *Target, _ *int64) { g.ProposalID = "prop-2" }, schema.CodeGrantBindingMismatch},
		{"binding before window", func(g *schema.Grant, _ *Target, at *int64) { g.IntentFingerprint = other; *at = g.ExpiresAtMs }, schema.CodeGrantBindingMismatch},
		{"issued_at == now", func(g *schema.Grant, _ *Target, at *int64) { *at = g.IssuedAtMs }, ""},
		{"issued_at == now+1", func(g *schema.Grant, _ *Target, at *int64) { *at = g.IssuedAtMs - 1 }, schema.CodeGrantNotYetValid},
		{"expires_at == now+1", func(g *schema.Grant, _ *Target, at *int64) { *at = g.ExpiresAtMs - 1 }, ""},
		{"expires_at == now", func(g *schema.Grant, _ *Target, at *int64) { *at = g.ExpiresAtMs }, schema.CodeGrantExpired},
		{"long expired", func(g *schema.Grant, _ *Target, at *int64) { *at = g.ExpiresAtMs + 86_400_000 }, schema.CodeGrantExpired},
		{"test fixture in test", func(g *schema.Grant, _ *Target, _ *int64) { g.AuthorizationMethod = schema.MethodTestFixture }, ""},
		{"test fixture in mock", func(g *schema.Grant, tg *Target, _ *int64) {
			g.AuthorizationMethod, tg.Environment = schema.MethodTestFixture, schema.EnvMock
		}, ""},
		{"test fixture for live", func(g *schema.Grant, tg *Target, _ *int64) {
			g.AuthorizationMethod, tg.Environment = schema.MethodTestFixture, schema.EnvLive
		}, schema.CodeTestGrantForLiveAction},
		{"manual for live", func(_ *schema.Grant, tg *Target, _ *int64) { tg.Environment = schema.EnvLive }, ""},
		{"expired before test-for-live", func(g *schema.Grant, tg *Target, at *int64) {
			g.AuthorizationMethod, tg.Environment, *at = schema.MethodTestFixture, schema.EnvLive, g.ExpiresAtMs
		}, schema.CodeGrantExpired},
		{"ceiling equals spend", func(*schema.Grant, *Target, *int64) {}, ""},
		{"spend one over ceiling", func(_ *schema.Grant, tg *Target, _ *int64) { tg.ExternalSpend.AmountMinor++ }, schema.CodeExternalSpendExceedsGrant},
		{"ceiling above spend", func(g *schema.Grant, _ *Target, _ *int64) { g.MaxExternalSpend.AmountMinor = 50000 }, ""},
		{"ceiling in another currency", func(g *schema.Grant, _ *Target, _ *int64) { g.MaxExternalSpend.Currency = "EUR" }, schema.CodeExternalSpendExceedsGrant},
		{"spend without ceiling", func(g *schema.Grant, _ *Target, _ *int64) { g.MaxExternalSpend = nil }, schema.CodeExternalSpendExceedsGrant},
		{"zero spend without ceiling", func(g *schema.Grant, tg *Target, _ *int64) {
			g.MaxExternalSpend, tg.ExternalSpend.AmountMinor = nil, 0
		}, schema.CodeExternalSpendExceedsGrant},
		{"no spend, no ceiling", func(g *schema.Grant, tg *Target, _ *int64) { g.MaxExternalSpend, tg.ExternalSpend = nil, nil }, ""},
		{"no spend, a ceiling", func(_ *schema.Grant, tg *Target, _ *int64) { tg.ExternalSpend = nil }, ""},
		{"test-for-live before spend", func(g *schema.Grant, tg *Target, _ *int64) {
			g.AuthorizationMethod, tg.Environment, g.MaxExternalSpend = schema.MethodTestFixture, schema.EnvLive, nil
		}, schema.CodeTestGrantForLiveAction},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, tg, at := grant(), flight(), now
			tc.edit(g, &tg, &at)
			if got := (Rules{}).CheckGrant(g, tg, at); got != tc.want {
				t.Fatalf("CheckGrant = %q, want %q", got, tc.want)
			}
			d := Rules{}.Authorize(g, tg, at)
			if d.Code != tc.want || d.Permitted() != (tc.want == "") {
				t.Fatalf("Authorize = %+v, want %q", d, tc.want)
			}
			outcome := schema.EvalPass
			if tc.want != "" {
				outcome = schema.EvalDeny
			}
			want := []schema.PolicyEvaluation{{Layer: LayerGrant, Outcome: outcome, ReasonCode: tc.want}}
			if !slices.Equal(d.Evaluations, want) {
				t.Errorf("evaluations = %+v, want %+v", d.Evaluations, want)
			}
		})
	}
}

func TestAuthorizeWithoutGrant(t *testing.T) {
	d := Rules{Managed: []ManagedPolicy{{Name: "open"}}}.Authorize(nil, flight(), now)
	if d.Code != schema.CodeApprovalRequired || d.Permitted() || len(d.Evaluations) != 0 {
		t.Fatalf("Authorize(nil) = %+v", d)
	}
}

// seedPolicy is the managed policy of seed 003.
func seedPolicy() ManagedPolicy {
	return ManagedPolicy{
		Name:                           "org",
		AutomaticApprovalForbidden:     true,
		LiveActionsForbidden:           true,
		MinimumAuthenticationAssurance: schema.AssuranceBiometric,
		MaxExternalSpend:               map[string]int64{"USD": 50000},
		AllowedProviders:               []string{"duffel"},
		AllowedCapabilities:            []string{"flights.book"},
		AllowedEnvironments:            []string{schema.EnvTest},
	}
}

func TestManagedPolicy(t *testing.T) {
	type edit func(p *ManagedPolicy, g *schema.Grant, tg *Target)
	cases := []struct {
		name string
		edit edit
		want schema.Code
	}{
		{"seed policy passes seed grant", func(*ManagedPolicy, *schema.Grant, *Target) {}, ""},
		{"empty policy restricts nothing", func(p *ManagedPolicy, _ *schema.Grant, tg *Target) {
			*p = ManagedPolicy{Name: "org"}
			tg.Environment = schema.EnvLive
		}, ""},
		{"disabled", func(p *ManagedPolicy, _ *schema.Grant, _ *Target) { p.Disabled = true }, schema.CodeExternalActionsDisabled},
		{"disabled before everything", func(p *ManagedPolicy, g *schema.Grant, tg *Target) {
			p.Disabled, g.AuthorizationMethod, tg.Environment = true, schema.MethodAdversarialAuto, schema.EnvLive
		}, schema.CodeExternalActionsDisabled},
		// Harn: managed policy vs adversarial_auto.
		{"adversarial_auto", func(_ *ManagedPolicy, g *schema.Grant, _ *Target) {
			g.AuthorizationMethod = schema.MethodAdversarialAuto
		}, schema.CodeAutomaticApprovalForbidden},
		{"policy method", func(_ *ManagedPolicy, g *schema.Grant, _ *Target) { g.AuthorizationMethod = schema.MethodPolicy }, schema.CodeAutomaticApprovalForbidden},
		{"managed_policy method", func(_ *ManagedPolicy, g *schema.Grant, _ *Target) {
			g.AuthorizationMethod = schema.MethodManagedPolicy
		}, schema.CodeAutomaticApprovalForbidden},
		{"test_fixture is not automatic", func(_ *ManagedPolicy, g *schema.Grant, _ *Target) {
			g.AuthorizationMethod = schema.MethodTestFixture
		}, ""},
		{"automatic allowed when not forbidden", func(p *ManagedPolicy, g *schema.Grant, _ *Target) {
			p.AutomaticApprovalForbidden, g.AuthorizationMethod = false, schema.MethodAdversarialAuto
		}, ""},
		{"automatic before live", func(p *ManagedPolicy, g *schema.Grant, tg *Target) {
			g.AuthorizationMethod, tg.Environment = schema.MethodPolicy, schema.EnvLive
		}, schema.CodeAutomaticApprovalForbidden},
		{"live forbidden", func(p *ManagedPolicy, _ *schema.Grant, tg *Target) {
			p.AllowedEnvironments, tg.Environment = nil, schema.EnvLive
		}, schema.CodeLiveActionsForbidden},
		{"live before environment list", func(_ *ManagedPolicy, _ *schema.Grant, tg *Target) { tg.Environment = schema.EnvLive }, schema.CodeLiveActionsForbidden},
		{"provider not allowed", func(_ *ManagedPolicy, _ *schema.Grant, tg *Target) { tg.Provider = "amadeus" }, schema.CodeProviderNotAllowed},
		{"provider before capability", func(_ *ManagedPolicy, _ *schema.Grant, tg *Target) {
			tg.Provider, tg.Capability = "amadeus", "hotels.book"
		}, schema.CodeProviderNotAllowed},
		{"capability not allowed", func(_ *ManagedPolicy, _ *schema.Grant, tg *Target) { tg.Capability = "flights.cancel" }, schema.CodeCapabilityNotAllowed},
		{"capability before environment", func(_ *ManagedPolicy, _ *schema.Grant, tg *Target) {
			tg.Capability, tg.Environment = "flights.cancel", schema.EnvMock
		}, schema.CodeCapabilityNotAllowed},
		{"environment not allowed", func(_ *ManagedPolicy, _ *schema.Grant, tg *Target) { tg.Environment = schema.EnvMock }, schema.CodeEnvironmentNotAllowed},
		{"empty allow-list allows nothing", func(p *ManagedPolicy, _ *schema.Grant, _ *Target) { p.AllowedProviders = []string{} }, schema.CodeProviderNotAllowed},
		{"assurance equal to minimum", func(*ManagedPolicy, *schema.Grant, *Target) {}, ""},
		{"assurance above minimum", func(_ *ManagedPolicy, g *schema.Grant, _ *Target) {
			g.AuthenticationAssurance = schema.AssuranceManaged
		}, ""},
		{"assurance one below minimum", func(_ *ManagedPolicy, g *schema.Grant, _ *Target) {
			g.AuthenticationAssurance = schema.AssuranceSession
		}, schema.CodeAuthenticationTooWeak},
		{"no assurance", func(_ *ManagedPolicy, g *schema.Grant, _ *Target) {
			g.AuthenticationAssurance = schema.AssuranceNone
		}, schema.CodeAuthenticationTooWeak},
		{"minimum outside the scale fails closed", func(p *ManagedPolicy, g *schema.Grant, _ *Target) {
			p.MinimumAuthenticationAssurance, g.AuthenticationAssurance = "retina", schema.AssuranceManaged
		}, schema.CodeAuthenticationTooWeak},
		{"assurance before spend", func(p *ManagedPolicy, g *schema.Grant, tg *Target) {
			g.AuthenticationAssurance, p.MaxExternalSpend = schema.AssuranceSession, map[string]int64{"USD": 1}
		}, schema.CodeAuthenticationTooWeak},
		{"spend equal to policy ceiling", func(p *ManagedPolicy, _ *schema.Grant, _ *Target) { p.MaxExternalSpend["USD"] = 24567 }, ""},
		{"spend one over policy ceiling", func(p *ManagedPolicy, _ *schema.Grant, _ *Target) { p.MaxExternalSpend["USD"] = 24566 }, schema.CodeExternalSpendExceedsPolicy},
		{"currency without a ceiling", func(p *ManagedPolicy, _ *schema.Grant, _ *Target) {
			p.MaxExternalSpend = map[string]int64{"EUR": 1 << 40}
		}, schema.CodeExternalSpendExceedsPolicy},
		{"empty ceiling map refuses any spend", func(p *ManagedPolicy, _ *schema.Grant, _ *Target) { p.MaxExternalSpend = map[string]int64{} }, schema.CodeExternalSpendExceedsPolicy},
		{"no spend under a ceiling map", func(p *ManagedPolicy, _ *schema.Grant, tg *Target) {
			p.MaxExternalSpend, tg.ExternalSpend = map[string]int64{}, nil
		}, ""},
		{"no ceiling map: no spend restriction", func(p *ManagedPolicy, g *schema.Grant, tg *Target) {
			p.MaxExternalSpend = nil
			tg.ExternalSpend = &schema.Spend{Currency: "JPY", AmountMinor: 1 << 50}
			g.MaxExternalSpend = tg.ExternalSpend
		}, ""},
		{"other security domain: not applied", func(p *ManagedPolicy, _ *schema.Grant, _ *Target) {
			p.Disabled, p.SecurityDomains = true, []string{"security-domain:other"}
		}, ""},
		{"listed security domain: applied", func(p *ManagedPolicy, _ *schema.Grant, _ *Target) {
			p.Disabled, p.SecurityDomains = true, []string{"security-domain:other", "security-domain:demo"}
		}, schema.CodeExternalActionsDisabled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, g, tg := seedPolicy(), grant(), flight()
			tc.edit(&p, g, &tg)
			if got := CheckManaged(&p, g, tg); Applies(&p, tg.SecurityDomain) && got != tc.want {
				t.Fatalf("CheckManaged = %q, want %q", got, tc.want)
			}
			d := Rules{Managed: []ManagedPolicy{p}}.Authorize(g, tg, now)
			if d.Code != tc.want {
				t.Fatalf("Authorize = %+v, want %q", d, tc.want)
			}
			want := []schema.PolicyEvaluation{{Layer: LayerGrant, Outcome: schema.EvalPass}}
			if Applies(&p, tg.SecurityDomain) {
				ev := schema.PolicyEvaluation{Layer: "managed_policy:org", Outcome: schema.EvalPass}
				if tc.want != "" {
					ev = schema.PolicyEvaluation{Layer: "managed_policy:org", Outcome: schema.EvalDeny, ReasonCode: tc.want}
				}
				want = append(want, ev)
			}
			if !slices.Equal(d.Evaluations, want) {
				t.Errorf("evaluations = %+v, want %+v", d.Evaluations, want)
			}
		})
	}
}

func TestGrantChecksComeFirst(t *testing.T) {
	p := seedPolicy()
	p.Disabled = true
	g := grant()
	g.IntentFingerprint = other
	d := Rules{Managed: []ManagedPolicy{p}}.Authorize(g, flight(), now)
	want := []schema.PolicyEvaluation{{Layer: LayerGrant, Outcome: schema.EvalDeny, ReasonCode: schema.CodeGrantBindingMismatch}}
	if d.Code != schema.CodeGrantBindingMismatch || !slices.Equal(d.Evaluations, want) {
		t.Fatalf("Authorize = %+v", d)
	}
}

func TestManyPolicies(t *testing.T) {
	open := ManagedPolicy{Name: "open"}
	spend := ManagedPolicy{Name: "spend", MaxExternalSpend: map[string]int64{"USD": 100}}
	providers := ManagedPolicy{Name: "providers", AllowedProviders: []string{"amadeus"}}
	elsewhere := ManagedPolicy{Name: "elsewhere", Disabled: true, SecurityDomains: []string{"security-domain:other"}}
	weak := ManagedPolicy{Name: "weak", MinimumAuthenticationAssurance: schema.AssuranceManaged}
	pass := func(name string) schema.PolicyEvaluation {
		return schema.PolicyEvaluation{Layer: "managed_policy:" + name, Outcome: schema.EvalPass}
	}
	deny := func(name string, code schema.Code) schema.PolicyEvaluation {
		return schema.PolicyEvaluation{Layer: "managed_policy:" + name, Outcome: schema.EvalDeny, ReasonCode: code}
	}
	grantPass := schema.PolicyEvaluation{Layer: LayerGrant, Outcome: schema.EvalPass}

	// The earliest rule wins whatever the block order; every applicable
	// policy is evaluated; a policy of another domain is not listed.
	for _, order := range [][]ManagedPolicy{{open, spend, elsewhere, providers}, {providers, elsewhere, spend, open}} {
		d := Rules{Managed: order}.Authorize(grant(), flight(), now)
		if d.Code != schema.CodeProviderNotAllowed {
			t.Errorf("order %v: code = %q", names(order), d.Code)
		}
		var want []schema.PolicyEvaluation
		want = append(want, grantPass)
		for _, p := range order {
			switch p.Name {
			case "open":
				want = append(want, pass("open"))
			case "spend":
				want = append(want, deny("spend", schema.CodeExternalSpendExceedsPolicy))
			case "providers":
				want = append(want, deny("providers", schema.CodeProviderNotAllowed))
			}
		}
		if !slices.Equal(d.Evaluations, want) {
			t.Errorf("order %v: evaluations = %+v, want %+v", names(order), d.Evaluations, want)
		}
	}
	// Stricter policies intersect: each one's ceiling applies.
	loose := ManagedPolicy{Name: "loose", MaxExternalSpend: map[string]int64{"USD": 1 << 40}}
	if d := (Rules{Managed: []ManagedPolicy{loose, spend}}).Authorize(grant(), flight(), now); d.Code != schema.CodeExternalSpendExceedsPolicy {
		t.Errorf("intersection: %+v", d)
	}
	// A managed policy never grants: the most permissive one adds nothing
	// to a grant that fails.
	g := grant()
	g.ExpiresAtMs = now
	if d := (Rules{Managed: []ManagedPolicy{open}}).Authorize(g, flight(), now); d.Code != schema.CodeGrantMalformed {
		t.Errorf("a policy rescued a malformed grant: %+v", d)
	}

	// Screen skips the grant's own rules (method, assurance) and applies the rest.
	s := Rules{Managed: []ManagedPolicy{weak, {Name: "auto", AutomaticApprovalForbidden: true}, open}}.Screen(flight())
	if !s.Permitted() || !slices.Equal(s.Evaluations, []schema.PolicyEvaluation{pass("weak"), pass("auto"), pass("open")}) {
		t.Errorf("Screen = %+v", s)
	}
	if s := (Rules{Managed: []ManagedPolicy{open, spend}}).Screen(flight()); s.Code != schema.CodeExternalSpendExceedsPolicy {
		t.Errorf("Screen = %+v", s)
	}
	if s := (Rules{}).Screen(flight()); !s.Permitted() || len(s.Evaluations) != 0 {
		t.Errorf("Screen(nil) = %+v", s)
	}
}

func names(ps []ManagedPolicy) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func TestTargetOf(t *testing.T) {
	env := &schema.Envelope{Proposal: schema.Proposal{
		ProposalID: "prop-9",
		Context:    schema.Context{Tenant: schema.TenantContext{TenantRef: "tenant:demo", SecurityDomainRef: "security-domain:demo"}},
		Intent: schema.Intent{Provider: "demo", Capability: "inventory.adjust", Operation: "adjust_stock", Environment: "live",
			ExternalSpend: &schema.Spend{Currency: "EUR", AmountMinor: 5}},
	}, Grounded: &schema.Grounded{Referent: "sku-1", Fingerprint: fp}}
	got := TargetOf(env)
	want := Target{ProposalID: "prop-9", Fingerprint: fp, SecurityDomain: "security-domain:demo", Provider: "demo",
		Capability: "inventory.adjust", Environment: "live", ExternalSpend: env.Proposal.Intent.ExternalSpend}
	if got != want {
		t.Errorf("TargetOf = %+v", got)
	}
}
