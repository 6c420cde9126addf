package reconciliation_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/trust"
	"github.com/portcullis/portcullis/stages/policy"
)

// Planted values: none may appear in anything Portcullis stores or emits
// (the activity record above all).
const (
	secretTenant     = "tenant:zq-secret-tenant"
	secretDomain     = "security-domain:zq-secret-domain"
	secretActor      = "actor:zq-secret-actor"
	secretScope      = "policy-scope:zq-secret-scope"
	secretAccount    = "duffel:zq-secret-account"
	secretDelivery   = "delivery:zq-secret-delivery"
	secretInvocation = "invocation:zq-secret-invocation"
	secretOffer      = "off_zqSECRETOFFER"
	secretFare       = "zq-secret-fare-basis"
	secretEvidence   = "offers:zq-secret-evidence"
	secretApprover   = "actor:zq-secret-approver"
	secretGiven      = "Zqxwvgiven"
	secretFamily     = "Zqxwvfamily"
	secretBirth      = "1971-03-14"
	secretEmail      = "zq-secret@example.invalid"
	secretPhone      = "+1 555 0199 7311"
	secretStreet     = "1 Zqxwv Secret Lane"
)

var secrets = []string{
	secretTenant, secretDomain, secretActor, secretScope, secretAccount, secretDelivery, secretInvocation,
	secretOffer, secretFare, secretEvidence, secretApprover, secretGiven, secretFamily, secretBirth,
	secretEmail, secretPhone, secretStreet,
}

// flightProposal is seed 003's booking: spend, a protected disclosure that
// needs reauthentication, and no grant yet.
func flightProposal(pid string) map[string]any {
	return map[string]any{
		"schema":      schema.SchemaProposal,
		"proposal_id": pid,
		"context": map[string]any{
			"tenant":          map[string]any{"tenant_ref": secretTenant, "security_domain_ref": secretDomain},
			"actor":           map[string]any{"actor_ref": secretActor, "assurance": "host-session"},
			"authorization":   map[string]any{"scope_ref": secretScope, "policy_revision": "policy:7"},
			"provider":        map[string]any{"account_ref": secretAccount},
			"delivery":        map[string]any{"delivery_id": secretDelivery, "source": "chat"},
			"host_invocation": map[string]any{"invocation_id": secretInvocation},
		},
		"intent": map[string]any{
			"provider": "duffel", "capability": "flights.book", "operation": "create_order", "environment": "test",
			"payload":        map[string]any{"offer_id": secretOffer, "passengers": 1},
			"external_spend": map[string]any{"currency": "USD", "amount_minor": 24567},
			"protected_disclosure": map[string]any{
				"field_classes": []string{"legal_identity", "birth_date", "contact_details"},
				"recipient":     "Duffel", "purpose": "Create the exact approved order.",
				"source": "user_profile", "require_reauthentication": true,
			},
			"display": map[string]any{"summary": "Book SEA→JFK for $245.67?"},
		},
		"grounding": map[string]any{
			"subject": "offer: sea-jfk 08:05", "scope": secretDomain, "observation_ref": "offers:search-1",
			"candidates": []any{map[string]any{
				"referent": "offer:sea-jfk-0805", "source": "authoritative",
				"attributes":    map[string]any{"resource": "Offer: SEA-JFK 08:05", "fare_basis": secretFare},
				"evidence_refs": []string{secretEvidence},
			}},
		},
		"grant":     nil,
		"requester": map[string]any{"agent_id": "agent:travel", "model_provider": "example", "model_id": "m-1", "session_id": "s-9", "run_id": "r-9"},
	}
}

// withFlight configures the duffel provider, lets the test host speak for
// the booking's tenant, and applies seed 003's managed policy to its domain.
func withFlight(c *config.Config) {
	c.Hosts[0].Tenants = append(c.Hosts[0].Tenants, secretTenant)
	c.Tenants = append(c.Tenants, trust.Tenant{Ref: secretTenant, SecurityDomains: []string{secretDomain}})
	c.Providers = append(c.Providers, config.Provider{Name: "duffel", Adapter: adapters.KindFake, Timeout: c.Providers[0].Timeout, UnavailableRetry: c.Providers[0].UnavailableRetry, MaxInFlight: 16})
	c.Policies = []policy.ManagedPolicy{{
		Name: "travel", SecurityDomains: []string{secretDomain},
		AutomaticApprovalForbidden: true, LiveActionsForbidden: true,
		AllowedProviders: []string{"duffel"}, AllowedCapabilities: []string{"flights.book"}, AllowedEnvironments: []string{"test"},
		MinimumAuthenticationAssurance: schema.AssuranceBiometric, MaxExternalSpend: map[string]int64{"USD": 50000},
	}}
}

// serveResolver answers disclosure requests with the planted values at
// biometric assurance.
func serveResolver(t *testing.T, env *testenv.Env) *atomic.Int32 {
	t.Helper()
	var asked atomic.Int32
	values := map[string]jsontext.Value{
		"legal_identity":  jsontext.Value(`{"given_name":"` + secretGiven + `","family_name":"` + secretFamily + `","gender":"f"}`),
		"birth_date":      jsontext.Value(`"` + secretBirth + `"`),
		"contact_details": jsontext.Value(`{"email":"` + secretEmail + `","phone":"` + secretPhone + `","address":{"line1":"` + secretStreet + `","city":"Seattle","postal_code":"98101","country_code":"US"}}`),
	}
	sub, err := env.NC.Subscribe(env.Subjects.DisclosureResolve(), func(m *nats.Msg) {
		asked.Add(1)
		var req schema.DisclosureRequest
		if err := schema.Decode(m.Data, &req); err != nil {
			t.Errorf("disclosure request: %v", err)
			return
		}
		reauth := req.RequireReauthentication
		_ = m.Respond(schema.MustMarshal(schema.DisclosureReply{
			Schema: req.Schema, Fingerprint: req.Fingerprint, Provider: req.Provider, Operation: req.Operation,
			Environment: req.Environment, Recipient: req.Recipient, Purpose: req.Purpose, FieldClasses: req.FieldClasses,
			Source: req.Source, RequireReauthentication: &reauth, AuthorizationMethod: req.AuthorizationMethod,
			GrantAuthenticationAssurance: req.GrantAuthenticationAssurance,
			AuthenticationAssurance:      schema.AssuranceBiometric, ProtectedValues: values,
		}))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := env.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	return &asked
}

// TestFlightBookingActivityIsValueFree runs seed 003's booking end to end —
// spend, approval by a standalone grant, protected disclosure with
// reauthentication, a provider timeout that reconciliation settles — and
// checks the activity record tells the story without any planted value.
func TestFlightBookingActivityIsValueFree(t *testing.T) {
	env, clock := start(t, testenv.WithConfig(withFlight))
	duffel := env.Fakes["duffel"]
	resolver := serveResolver(t, env)
	var sawValues atomic.Bool
	duffel.OnDispatch(func(_ context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
		d := req.ProtectedDisclosure
		sawValues.Store(d != nil && len(d.Values) == 3 && strings.Contains(string(d.Values["legal_identity"]), secretGiven) &&
			strings.Contains(string(req.Payload), secretOffer))
		return schema.AdapterReply{}, adapters.ErrTimeout // booked, but the answer is lost
	})
	script(duffel, func() (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "ord_0000demo", EvidenceRefs: []string{"duffel:orders/ord_0000demo"}}, nil
	})

	env.PublishSigned(t, flightProposal("book-1"), env.Host)
	park := env.Recorder.Wait(t, "book-1", last(schema.KindNeedsApproval))
	ap := park.Approval
	if ap == nil || ap.Summary != "Book SEA→JFK for $245.67?" || ap.ExternalSpend == nil || ap.ExternalSpend.AmountMinor != 24567 {
		t.Fatalf("approval = %+v", ap)
	}
	now := clock.Now().UnixMilli()
	env.PublishGrant(t, map[string]any{
		"schema": schema.SchemaGrant, "proposal_id": "book-1", "intent_fingerprint": ap.Fingerprint,
		"authorized_by": secretApprover, "authorization_method": "manual", "authentication_assurance": "biometric",
		"issued_at_ms": now, "expires_at_ms": now + 300_000,
		"max_external_spend": map[string]any{"currency": "USD", "amount_minor": 24567},
	}, env.Host)

	rr := env.Recorder.Wait(t, "book-1", last(schema.KindReconciliationRequired))
	if !sameStrings(incidents(rr), "dispatch/ADAPTER_TIMEOUT") || rr.Receipt.Disclosure == nil ||
		rr.Receipt.Disclosure.AuthenticationAssurance != schema.AssuranceBiometric ||
		!slices.Equal(rr.Receipt.Disclosure.FieldClasses, []string{"birth_date", "contact_details", "legal_identity"}) {
		t.Fatalf("timeout outcome = %+v", rr)
	}
	if !sawValues.Load() || resolver.Load() != 1 {
		t.Fatalf("the provider did not get the values (%v) or the resolver was asked %d times", sawValues.Load(), resolver.Load())
	}
	clock.Advance(interval)
	ok := env.Recorder.Wait(t, "book-1", last(schema.KindConfirmed))
	if ok.Receipt.ProviderActionID != "ord_0000demo" || ok.Receipt.Disclosure == nil || duffel.Dispatches() != 1 || resolver.Load() != 1 {
		t.Fatalf("confirmation = %+v, %d dispatches", ok.Receipt, duffel.Dispatches())
	}

	a := activityOf(t, env, ap.Fingerprint, func(a *schema.Activity) bool { return a.Status == string(schema.StatusConfirmed) })
	if a.Summary != ap.Summary || a.ExternalSpend == nil || a.ExternalSpend.AmountMinor != 24567 || a.Referent != "offer:sea-jfk-0805" ||
		a.Provider != "duffel" || a.Capability != "flights.book" || a.Operation != "create_order" || a.Environment != "test" ||
		a.Requester == nil || a.Requester.AgentID != "agent:travel" || !sameStrings(testenv.IDs(a.Proposals), "book-1") {
		t.Errorf("activity intent = %+v", a)
	}
	if len(a.PolicyEvaluations) != 2 || a.PolicyEvaluations[1].Layer != "managed_policy:travel" || a.PolicyEvaluations[1].Outcome != schema.EvalPass ||
		a.Decision == nil || a.Decision.Outcome != "permit" {
		t.Errorf("activity decision = %+v %+v", a.PolicyEvaluations, a.Decision)
	}
	if au := a.Authorization; au == nil || au.Method != "manual" || au.Assurance != "biometric" || au.IssuedAtMs != now || au.ExpiresAtMs != now+300_000 || au.ApprovalExpiresAtMs == 0 {
		t.Errorf("activity authorization = %+v", a.Authorization)
	}
	if d := a.Disclosure; d == nil || d.Recipient != "Duffel" || d.AuthenticationAssurance != "biometric" || len(d.FieldClasses) != 3 {
		t.Errorf("activity disclosure = %+v", a.Disclosure)
	}
	if a.Dispatch == nil || a.Dispatch.ErrorCode != string(schema.CodeAdapterTimeout) || a.Reconciliation == nil || a.Reconciliation.Attempts != 1 ||
		a.Reconciliation.Resolution != "provider" || a.Receipt == nil || a.Receipt.ReceiptID != ok.Receipt.ReceiptID {
		t.Errorf("activity dispatch/reconciliation/receipt = %+v %+v %+v", a.Dispatch, a.Reconciliation, a.Receipt)
	}
	raw, err := env.Processor().Activity().KV.Get(context.Background(), strings.TrimPrefix(ap.Fingerprint, "sha256:"))
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"payload", "protected_values", "values", "authorized_by", "signature", "tenant_ref", "actor_ref"} {
		if strings.Contains(string(raw.Value()), `"`+field+`"`) {
			t.Errorf("the activity record has a %q member", field)
		}
	}
	env.AssertNowhere(t, secrets...)
}
