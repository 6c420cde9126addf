package testenv

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/schema"
)

// Lumber returns the proposal of SPEC §2.1 (the lumber stock adjustment of
// seed 000), for the fake provider "demo", as a fresh map that a test may
// change freely. Its delivery id is derived from the proposal id.
func Lumber(proposalID string) map[string]any {
	return decodeFixture(`{
  "schema": "actions.proposal.v1",
  "proposal_id": "` + proposalID + `",
  "context": {
    "tenant": {"tenant_ref": "tenant:demo", "security_domain_ref": "security-domain:demo"},
    "actor": {"actor_ref": "actor:demo", "assurance": "host-session"},
    "authorization": {"scope_ref": "policy-scope:inventory", "policy_revision": "policy:7"},
    "provider": {"account_ref": "inventory:fixture"},
    "delivery": {"delivery_id": "delivery:` + proposalID + `", "source": "voice"},
    "host_invocation": {"invocation_id": "invocation:42"}
  },
  "intent": {
    "provider": "demo",
    "capability": "inventory.adjust",
    "operation": "adjust_stock",
    "environment": "test",
    "payload": {"quantity": 20},
    "external_spend": null,
    "protected_disclosure": null,
    "display": {"summary": "Add 20 boards of cedar 8ft grade A"}
  },
  "grounding": {
    "subject": "lumber: cedar-8ft-gradea",
    "scope": "security-domain:demo",
    "observation_ref": "catalog:12",
    "candidates": [
      {"referent": "sku-1001", "source": "authoritative",
       "attributes": {"resource": "Lumber: Cedar-8ft-GradeA"}, "evidence_refs": ["catalog:12#sku-1001"]}
    ]
  },
  "grant": null,
  "requester": {"agent_id": "agent:7", "model_provider": "example", "model_id": "m-1", "session_id": "s-1", "run_id": "r-1"}
}`)
}

func decodeFixture(s string) map[string]any {
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		panic("testenv: fixture: " + err.Error())
	}
	return m
}

// Set sets a value at a dotted path in a fixture map ("intent.payload"),
// creating objects on the way; it returns m.
func Set(m map[string]any, path string, v any) map[string]any {
	cur := m
	keys := splitPath(path)
	for _, k := range keys[:len(keys)-1] {
		next, ok := cur[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[k] = next
		}
		cur = next
	}
	cur[keys[len(keys)-1]] = v
	return m
}

// Delete removes the value at a dotted path; it returns m.
func Delete(m map[string]any, path string) map[string]any {
	cur := m
	keys := splitPath(path)
	for _, k := range keys[:len(keys)-1] {
		next, ok := cur[k].(map[string]any)
		if !ok {
			return m
		}
		cur = next
	}
	delete(cur, keys[len(keys)-1])
	return m
}

func splitPath(p string) []string {
	var out []string
	start := 0
	for i := 0; i < len(p); i++ {
		if p[i] == '.' {
			out = append(out, p[start:i])
			start = i + 1
		}
	}
	return append(out, p[start:])
}

// FingerprintOf returns the fingerprint a fixture has once grounded to
// referent (computed as the grounding stage does).
func FingerprintOf(t testing.TB, proposal any, referent string) string {
	t.Helper()
	p, err := schema.DecodeProposal(Body(t, proposal), 0)
	if err != nil {
		t.Fatalf("fixture does not decode: %v", err)
	}
	r, err := fingerprint.Of(p, referent)
	if err != nil {
		t.Fatal(err)
	}
	return r.Fingerprint
}

// Grant returns a grant for a fingerprint: manual, biometric, valid from
// now for five minutes, with a spend ceiling when spend is not nil.
func Grant(fp string, now time.Time, spend map[string]any) map[string]any {
	g := map[string]any{
		"schema":                   "actions.grant.v1",
		"intent_fingerprint":       fp,
		"authorized_by":            "actor:demo",
		"authorization_method":     "manual",
		"authentication_assurance": "biometric",
		"issued_at_ms":             now.UnixMilli(),
		"expires_at_ms":            now.Add(5 * time.Minute).UnixMilli(),
		"max_external_spend":       nil,
	}
	if spend != nil {
		g["max_external_spend"] = spend
	}
	return g
}

// Granted puts an inline grant into a proposal fixture, bound to the
// fingerprint it grounds to (referent), valid from now. It returns p.
func Granted(t testing.TB, p map[string]any, referent string, now time.Time) map[string]any {
	t.Helper()
	var spend map[string]any
	if s, ok := p["intent"].(map[string]any)["external_spend"].(map[string]any); ok {
		spend = s
	}
	p["grant"] = Grant(FingerprintOf(t, p, referent), now, spend)
	return p
}

// AsOtherTenant moves a fixture to OtherTenant and its security domain
// (context and grounding scope), as OtherHost may send it. It returns p.
func AsOtherTenant(p map[string]any) map[string]any {
	Set(p, "context.tenant.tenant_ref", OtherTenant)
	Set(p, "context.tenant.security_domain_ref", OtherSecurityDomain)
	return Set(p, "grounding.scope", OtherSecurityDomain)
}
