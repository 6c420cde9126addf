package demo

import (
	"time"

	"github.com/portcullis/portcullis/internal/fixtures"
	"github.com/portcullis/portcullis/schema"
)

// lumberProposal is seed 000's lumber proposal (fixtures.Lumber) for the
// demo's provider "inventory", with a grounding case: its scope and
// candidates.
func lumberProposal(pid, scope string, candidates []any) map[string]any {
	p := fixtures.Lumber(pid)
	fixtures.Set(p, "intent.provider", "inventory")
	fixtures.Set(p, "grounding.scope", scope)
	return fixtures.Set(p, "grounding.candidates", candidates)
}

func candidate(referent string, attrs map[string]any) map[string]any {
	return map[string]any{"referent": referent, "source": "authoritative", "attributes": attrs, "evidence_refs": []string{}}
}

// paymentsProposal is seed 000's "restart the payments API" (the
// fingerprint test vector's proposal) with a subject.
func paymentsProposal(pid, subject string) map[string]any {
	return map[string]any{
		"schema": schema.SchemaProposal, "proposal_id": pid,
		"context": map[string]any{
			"tenant":          map[string]any{"tenant_ref": "tenant:acme", "security_domain_ref": "security-domain:acme-infra"},
			"actor":           map[string]any{"actor_ref": "actor:oncall-7", "assurance": "host-session"},
			"authorization":   map[string]any{"scope_ref": "policy-scope:ops", "policy_revision": "policy:7"},
			"provider":        map[string]any{"account_ref": "inventory:fixture"},
			"delivery":        map[string]any{"delivery_id": "delivery:" + pid, "source": "voice"},
			"host_invocation": map[string]any{"invocation_id": "invocation:42"},
		},
		"intent": map[string]any{
			"provider": "infra", "capability": "service.restart", "operation": "restart", "environment": "live",
			"payload": map[string]any{"service": "payments-api", "drain_seconds": 30}, "external_spend": nil, "protected_disclosure": nil,
			"display": map[string]any{"summary": "Restart the payments API (production)"},
		},
		"grounding": map[string]any{
			"subject": subject, "scope": "security-domain:acme-infra", "observation_ref": "catalog:svc@r981",
			"candidates": []any{
				map[string]any{"referent": "svc:payments-prod", "source": "service-catalog",
					"attributes":    map[string]any{"resource": "payments-api (production)", "environment": "production"},
					"evidence_refs": []string{"catalog:svc@r981#payments-prod"}},
				map[string]any{"referent": "svc:payments-staging", "source": "service-catalog",
					"attributes":    map[string]any{"resource": "payments-api (staging)", "environment": "staging"},
					"evidence_refs": []string{"catalog:svc@r981#payments-staging"}},
			},
		},
		"grant": nil,
	}
}

// grantFor is fixtures.Grant (manual, valid from now for five minutes)
// given by the demo's approver at an assurance, for proposal pid when it is
// a standalone grant ("" for an inline one).
func grantFor(fp, pid string, assurance string, spend map[string]any) map[string]any {
	g := fixtures.Grant(fp, time.Now(), spend)
	g["authorized_by"] = "actor:demo-approver"
	g["authentication_assurance"] = assurance
	if pid != "" {
		g["proposal_id"] = pid
	}
	return g
}

func flightProposal(pid string) map[string]any {
	return map[string]any{
		"schema": schema.SchemaProposal, "proposal_id": pid,
		"context": map[string]any{
			"tenant":          map[string]any{"tenant_ref": "tenant:traveler", "security_domain_ref": "security-domain:traveler"},
			"actor":           map[string]any{"actor_ref": "actor:traveler-1", "assurance": "host-session"},
			"authorization":   map[string]any{"scope_ref": "policy-scope:travel", "policy_revision": "policy:3"},
			"provider":        map[string]any{"account_ref": "duffel:test-account"},
			"delivery":        map[string]any{"delivery_id": "delivery:" + pid, "source": "chat"},
			"host_invocation": map[string]any{"invocation_id": "invocation:book-1"},
		},
		"intent": map[string]any{
			"provider": "duffel", "capability": "flights.book", "operation": "create_order", "environment": "test",
			"payload":        map[string]any{"offer_id": "off_0000SEAJFK0805", "passengers": 1},
			"external_spend": map[string]any{"currency": "USD", "amount_minor": 24567},
			"protected_disclosure": map[string]any{
				"field_classes": []string{"legal_identity", "birth_date", "contact_details"},
				"recipient":     "Duffel", "purpose": "Create the exact approved order.",
				"source": schema.SourceFictionalTestFixture, "require_reauthentication": true,
			},
			"display": map[string]any{"summary": "Book SEA→JFK for $245.67?"},
		},
		"grounding": map[string]any{
			"subject": "offer: sea-jfk 08:05", "scope": "security-domain:traveler", "observation_ref": "offers:search-7",
			"candidates": []any{map[string]any{"referent": "offer:sea-jfk-0805", "source": "authoritative",
				"attributes": map[string]any{"resource": "Offer: SEA-JFK 08:05"}, "evidence_refs": []string{"offers:search-7#0"}}},
		},
		"grant":     nil,
		"requester": map[string]any{"agent_id": "agent:travel-assistant", "model_provider": "example", "model_id": "m-1", "session_id": "s-1", "run_id": "r-1"},
	}
}
