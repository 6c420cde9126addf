package fingerprint_test

import (
	"fmt"

	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/schema"
)

// A host computes the fingerprint its user approves: the proposal as
// admitted (names trimmed and lowercased) and the referent grounding picks.
func ExampleOf() {
	body := []byte(`{"schema":"actions.proposal.v1","proposal_id":"prop-7f3a",
	  "context":{"tenant":{"tenant_ref":"tenant:demo","security_domain_ref":"security-domain:demo"},
	    "actor":{"actor_ref":"actor:demo","assurance":"host-session"},
	    "authorization":{"scope_ref":"policy-scope:inventory","policy_revision":"policy:7"},
	    "provider":{"account_ref":"inventory:fixture"},
	    "delivery":{"delivery_id":"delivery:42","source":"voice"},
	    "host_invocation":{"invocation_id":"invocation:42"}},
	  "intent":{"provider":" Inventory ","capability":"inventory.adjust","operation":"adjust_stock",
	    "environment":"TEST","payload":{"quantity":20},"external_spend":null,"protected_disclosure":null,
	    "display":{"summary":"Add 20 boards of cedar 8ft grade A"}},
	  "grounding":{"subject":"lumber: cedar-8ft-gradea","scope":"security-domain:demo","observation_ref":"catalog:12",
	    "candidates":[{"referent":"sku-1001","source":"authoritative",
	      "attributes":{"resource":"Lumber: Cedar-8ft-GradeA"},"evidence_refs":["catalog:12#sku-1001"]}]},
	  "grant":null}`)
	p, err := schema.DecodeProposal(body, 65536)
	if err != nil {
		panic(err)
	}
	canonical, _ := fingerprint.Canonical(fingerprint.FieldsOf(p, "sku-1001"))
	r, _ := fingerprint.Of(p, "sku-1001")
	fmt.Println(string(canonical))
	fmt.Println(r.Fingerprint == "sha256:"+r.IdempotencyKey, len(r.IdempotencyKey))
	// Output:
	// {"actor_ref":"actor:demo","capability":"inventory.adjust","environment":"test","external_spend":null,"operation":"adjust_stock","payload":{"quantity":20},"protected_disclosure":null,"provider":"inventory","referent":"sku-1001","schema":"actions.fingerprint.v2","security_domain_ref":"security-domain:demo","tenant_ref":"tenant:demo"}
	// true 64
}

// Payload numbers that an IEEE-754 double does not hold exactly have no
// canonical form: admission refuses them, so two amounts never share a
// fingerprint.
func ExampleCheckNumbers() {
	for _, payload := range []string{`{"amount":20.50}`, `{"amount":9007199254740993}`} {
		fmt.Println(payload, fingerprint.CheckNumbers([]byte(payload)) == nil)
	}
	// Output:
	// {"amount":20.50} true
	// {"amount":9007199254740993} false
}
