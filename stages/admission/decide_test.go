package admission

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/trust"
)

const lumber = `{"schema":"actions.proposal.v1","proposal_id":"prop-1",
"context":{"tenant":{"tenant_ref":"tenant:demo","security_domain_ref":"security-domain:demo"},
"actor":{"actor_ref":"actor:demo","assurance":"host-session"},
"authorization":{"scope_ref":"policy-scope:inventory","policy_revision":"policy:7"},
"provider":{"account_ref":"inventory:fixture"},"delivery":{"delivery_id":"delivery:42","source":"voice"},
"host_invocation":{"invocation_id":"invocation:42"}},
"intent":{"provider":" Demo ","capability":"inventory.adjust","operation":"adjust_stock","environment":"TEST",
"payload":{"quantity":20},"external_spend":null,"protected_disclosure":null,"display":{"summary":"Add 20"}},
"grounding":{"subject":"lumber: cedar-8ft-gradea","scope":"security-domain:demo","observation_ref":"catalog:12",
"candidates":[{"referent":"sku-1001","source":"authoritative","attributes":{"resource":"Lumber: Cedar-8ft-GradeA"},"evidence_refs":["catalog:12#sku-1001"]}]},
"grant":null}`

// edit decodes the lumber body, applies f and re-encodes it.
func edit(f func(m map[string]any)) []byte {
	var m map[string]any
	if err := json.Unmarshal([]byte(lumber), &m); err != nil {
		panic(err)
	}
	f(m)
	b, _ := json.Marshal(m)
	return b
}

func obj(m map[string]any, path ...string) map[string]any {
	for _, p := range path {
		m = m[p].(map[string]any)
	}
	return m
}

func TestDecide(t *testing.T) {
	host, _ := nkeys.CreateUser()
	other, _ := nkeys.CreateUser()
	stranger, _ := nkeys.CreateUser()
	hostKey, _ := host.PublicKey()
	otherKey, _ := other.PublicKey()
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
	pol := Policy{MaxPayloadBytes: 4096, Trust: tr, Providers: []string{"demo"}}
	dev := pol
	tr.AllowUnsigned = true
	dev.Trust = tr
	sign := func(kp nkeys.KeyPair, body []byte) nats.Header {
		h, err := trust.Sign(kp, body)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	signed := func(body []byte) nats.Header { return sign(host, body) }
	const malformed, noID = schema.CodeAdmissionMalformed, ""

	// The body, its intent and its payload are three levels: 61 arrays
	// inside the payload make 64, 62 make one too many.
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	cases := []struct {
		name   string
		policy Policy
		body   []byte
		hdr    func([]byte) nats.Header
		code   schema.Code // "" admitted
		id     string      // proposal id the verdict can name
		dedupe bool
		host   string // the subject's <h>; "" means frontdesk
	}{
		{"signed", pol, []byte(lumber), signed, "", "prop-1", true, ""},
		{"unsigned in dev", dev, []byte(lumber), nil, "", "prop-1", true, ""},
		{"not json", pol, []byte(`{"proposal_id":"prop-1",`), signed, malformed, noID, false, ""},
		{"not an object", pol, []byte(`["prop-1"]`), signed, malformed, noID, false, ""},
		{"empty", pol, nil, signed, malformed, noID, false, ""},
		{"trailing data", pol, []byte(lumber + ` {}`), signed, malformed, noID, false, ""},
		{"duplicate top-level key", pol, []byte(strings.Replace(lumber, `"grant":null`, `"grant":null,"grant":null`, 1)), signed, malformed, "prop-1", false, ""},
		{"duplicate proposal_id", pol, []byte(strings.Replace(lumber, `"grant":null`, `"grant":null,"proposal_id":"prop-2"`, 1)), signed, malformed, noID, false, ""},
		{"duplicate key in attributes", pol, []byte(strings.Replace(lumber, `{"resource":"Lumber: Cedar-8ft-GradeA"}`, `{"resource":"a","resource":"b"}`, 1)), signed, malformed, "prop-1", false, ""},
		{"duplicate key in payload", pol, []byte(strings.Replace(lumber, `{"quantity":20}`, `{"quantity":20,"quantity":2}`, 1)), signed, malformed, "prop-1", false, ""},
		{"unknown top-level field", pol, edit(func(m map[string]any) { m["priority"] = "high" }), signed, malformed, "prop-1", false, ""},
		{"unknown nested field", pol, edit(func(m map[string]any) { obj(m, "context", "tenant")["region"] = "eu" }), signed, malformed, "prop-1", false, ""},
		{"case-folded field name", pol, []byte(strings.Replace(lumber, `"schema"`, `"SCHEMA"`, 1)), signed, malformed, "prop-1", false, ""},
		{"wrong type", pol, edit(func(m map[string]any) { obj(m, "intent")["environment"] = 3 }), signed, malformed, "prop-1", false, ""},
		{"fractional amount", pol, edit(func(m map[string]any) {
			obj(m, "intent")["external_spend"] = map[string]any{"currency": "USD", "amount_minor": 1.5}
		}), signed, malformed, "prop-1", false, ""},
		{"amount over 2^53", pol, edit(func(m map[string]any) {
			obj(m, "intent")["external_spend"] = map[string]any{"currency": "USD", "amount_minor": json.Number("9007199254740992")}
		}), signed, malformed, "prop-1", false, ""},
		{"payload integer beyond 2^53", pol, []byte(strings.Replace(lumber, `{"quantity":20}`, `{"quantity":9007199254740993}`, 1)), signed, malformed, "prop-1", false, ""},
		{"payload fraction beyond a double", pol, []byte(strings.Replace(lumber, `{"quantity":20}`, `{"quantity":20.000000000000001}`, 1)), signed, malformed, "prop-1", false, ""},
		{"payload overflow", pol, []byte(strings.Replace(lumber, `{"quantity":20}`, `{"q":[1,{"r":1e400}]}`, 1)), signed, malformed, "prop-1", false, ""},
		{"payload exact forms", pol, []byte(strings.Replace(lumber, `{"quantity":20}`, `{"quantity":20.0,"big":9007199254740992,"e":1e21,"f":0.1,"z":-0}`, 1)), signed, "", "prop-1", true, ""},
		{"bad currency", pol, edit(func(m map[string]any) {
			obj(m, "intent")["external_spend"] = map[string]any{"currency": "usd", "amount_minor": 1}
		}), signed, malformed, "prop-1", false, ""},
		{"too large", pol, edit(func(m map[string]any) { obj(m, "intent", "display")["summary"] = strings.Repeat("x", 5000) }), signed, malformed, "prop-1", false, ""},
		{"bad proposal id", pol, edit(func(m map[string]any) { m["proposal_id"] = "a b" }), signed, malformed, noID, false, ""},
		{"long proposal id", pol, edit(func(m map[string]any) { m["proposal_id"] = strings.Repeat("a", 129) }), signed, malformed, noID, false, ""},
		{"wrong schema", pol, edit(func(m map[string]any) { m["schema"] = "actions.proposal.v2" }), signed, malformed, "prop-1", false, ""},
		{"bad environment", pol, edit(func(m map[string]any) { obj(m, "intent")["environment"] = "prod" }), signed, malformed, "prop-1", false, ""},
		{"empty capability", pol, edit(func(m map[string]any) { obj(m, "intent")["capability"] = " " }), signed, malformed, "prop-1", false, ""},
		{"candidates and source", pol, edit(func(m map[string]any) { obj(m, "grounding")["candidate_source"] = "catalog" }), signed, malformed, "prop-1", false, ""},
		{"bad disclosure plan", pol, edit(func(m map[string]any) {
			obj(m, "intent")["protected_disclosure"] = map[string]any{"field_classes": []string{"shoe_size"}, "recipient": "r", "purpose": "p", "source": "user_profile", "require_reauthentication": false}
		}), signed, malformed, "prop-1", false, ""},
		// Authentication comes first: nothing of an unauthenticated body is
		// read, not even its proposal id (it gets no outcome, SPEC §2.7).
		{"unsigned", pol, []byte(lumber), nil, schema.CodeAdmissionUnauthenticated, noID, false, ""},
		{"unsigned junk", pol, []byte(`{"proposal_id":"prop-1","schema":5}`), nil, schema.CodeAdmissionUnauthenticated, noID, false, ""},
		{"signature of another body", pol, []byte(lumber), func([]byte) nats.Header { return signed([]byte("{}")) }, schema.CodeAdmissionUnauthenticated, noID, false, ""},
		{"unknown host key", pol, []byte(lumber), func(b []byte) nats.Header { return sign(stranger, b) }, schema.CodeAdmissionUnauthenticated, noID, false, ""},
		{"key of another host", pol, []byte(lumber), func(b []byte) nats.Header { return sign(other, b) }, schema.CodeAdmissionUnauthenticated, noID, false, ""},
		{"own key on another host's subject", pol, []byte(lumber), signed, schema.CodeAdmissionUnauthenticated, noID, false, "elsewhere"},
		{"bad signature in dev", dev, []byte(lumber), func([]byte) nats.Header { return signed([]byte("x")) }, schema.CodeAdmissionUnauthenticated, noID, false, ""},
		{"garbled signature", pol, []byte(lumber), func(b []byte) nats.Header {
			h := signed(b)
			h.Set(trust.HeaderSignature, "!!")
			return h
		}, schema.CodeAdmissionUnauthenticated, noID, false, ""},
		{"key without signature", pol, []byte(lumber), func(b []byte) nats.Header {
			h := signed(b)
			h.Del(trust.HeaderSignature)
			return h
		}, schema.CodeAdmissionUnauthenticated, noID, false, ""},
		{"nested too deep", pol, []byte(strings.Replace(lumber, `{"quantity":20}`, `{"q":`+nest(62)+`}`, 1)), signed, malformed, "prop-1", false, ""},
		{"nested 64 deep in all", pol, []byte(strings.Replace(lumber, `{"quantity":20}`, `{"q":`+nest(61)+`}`, 1)), signed, "", "prop-1", true, ""},
		{"security domain of no tenant of the host", pol, edit(func(m map[string]any) {
			obj(m, "context", "tenant")["security_domain_ref"] = "security-domain:not-demo"
			obj(m, "grounding")["scope"] = "security-domain:not-demo"
		}), signed, schema.CodeAdmissionTenantNotPermitted, "prop-1", false, ""},
		{"another tenant's security domain", pol, edit(func(m map[string]any) {
			obj(m, "context", "tenant")["security_domain_ref"] = "security-domain:other"
		}), signed, schema.CodeAdmissionTenantNotPermitted, "prop-1", false, ""},
		{"unsigned in dev names any tenant", dev, edit(func(m map[string]any) {
			obj(m, "context", "tenant")["tenant_ref"] = "tenant:nobody"
		}), nil, "", "prop-1", true, ""},
		{"incomplete context", pol, edit(func(m map[string]any) { obj(m, "context", "actor")["actor_ref"] = "" }), signed, schema.CodeAdmissionContextIncomplete, "prop-1", false, ""},
		{"missing context block", pol, edit(func(m map[string]any) { delete(obj(m, "context"), "delivery") }), signed, schema.CodeAdmissionContextIncomplete, "prop-1", false, ""},
		{"null context", pol, edit(func(m map[string]any) { m["context"] = nil }), signed, schema.CodeAdmissionContextIncomplete, "prop-1", false, ""},
		{"tenant of another host", pol, []byte(lumber), func(b []byte) nats.Header { return sign(other, b) }, schema.CodeAdmissionTenantNotPermitted, "prop-1", false, "elsewhere"},
		{"unknown provider", pol, edit(func(m map[string]any) { obj(m, "intent")["provider"] = "acme" }), signed, schema.CodeAdmissionProviderUnknown, "prop-1", true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var hdr nats.Header
			if tc.hdr != nil {
				hdr = tc.hdr(tc.body)
			}
			h := tc.host
			if h == "" {
				h = "frontdesk"
			}
			v := Decide(tc.policy, h, tc.body, hdr)
			var got schema.Code
			if v.Incident != nil {
				got = v.Incident.Code
				if v.Incident.Phase != schema.PhaseAdmission || v.Incident.DispatchBoundary != schema.BoundaryNotInvoked {
					t.Errorf("incident %+v", *v.Incident)
				}
			}
			if got != tc.code {
				t.Fatalf("code = %q, want %q", got, tc.code)
			}
			if v.ProposalID != tc.id {
				t.Errorf("proposal id = %q, want %q", v.ProposalID, tc.id)
			}
			if v.Dedupe != tc.dedupe {
				t.Errorf("dedupe = %v, want %v", v.Dedupe, tc.dedupe)
			}
			// Every refusal after authentication says what earned it.
			if got != "" && got != schema.CodeAdmissionUnauthenticated &&
				!slices.ContainsFunc(v.Problems, func(p schema.Problem) bool { return p.Code == got && p.Rule != "" }) {
				t.Errorf("problems %v do not explain %s", v.Problems, got)
			}
			if (got == "" || got == schema.CodeAdmissionUnauthenticated) && len(v.Problems) != 0 {
				t.Errorf("problems %v without a refusal to explain", v.Problems)
			}
			if tc.code == "" {
				in := v.Proposal.Intent
				if in.Provider != "demo" || in.Environment != "test" {
					t.Errorf("intent not normalized: %+v", in)
				}
			}
		})
	}
}

// The verdict names the field and rule of each refusal, never the value.
func TestDecideNamesTheField(t *testing.T) {
	host, _ := nkeys.CreateUser()
	hostKey, _ := host.PublicKey()
	pol := Policy{
		MaxPayloadBytes: 4096,
		Trust: trust.Policy{
			Hosts:   []trust.Host{{Name: "frontdesk", PublicKey: hostKey, Tenants: []string{"tenant:demo", "tenant:unconfigured"}}},
			Tenants: []trust.Tenant{{Ref: "tenant:demo", SecurityDomains: []string{"security-domain:demo"}}},
		},
		Providers: []string{"demo"},
	}
	cases := []struct {
		name string
		body []byte
		want schema.Problem
	}{
		{"environment", edit(func(m map[string]any) { obj(m, "intent")["environment"] = "prod" }),
			schema.Problem{Path: "/intent/environment", Rule: schema.RuleEnvironment, Code: schema.CodeAdmissionMalformed}},
		{"schema missing", edit(func(m map[string]any) { delete(m, "schema") }),
			schema.Problem{Path: "/schema", Rule: schema.RuleRequired, Code: schema.CodeAdmissionMalformed}},
		{"amount a string", edit(func(m map[string]any) {
			obj(m, "intent")["external_spend"] = map[string]any{"currency": "USD", "amount_minor": "12"}
		}), schema.Problem{Path: "/intent/external_spend/amount_minor", Rule: schema.RuleInteger, Code: schema.CodeAdmissionMalformed}},
		{"incomplete", edit(func(m map[string]any) { obj(m, "context", "delivery")["source"] = "" }),
			schema.Problem{Path: "/context/delivery/source", Rule: schema.RuleRequired, Code: schema.CodeAdmissionContextIncomplete}},
		{"foreign tenant", edit(func(m map[string]any) { obj(m, "context", "tenant")["tenant_ref"] = "tenant:other" }),
			schema.Problem{Path: "/context/tenant/tenant_ref", Rule: RuleTenantForeign, Code: schema.CodeAdmissionTenantNotPermitted}},
		{"tenant without a block", edit(func(m map[string]any) { obj(m, "context", "tenant")["tenant_ref"] = "tenant:unconfigured" }),
			schema.Problem{Path: "/context/tenant/tenant_ref", Rule: RuleTenantForeign, Code: schema.CodeAdmissionTenantNotPermitted}},
		{"foreign domain", edit(func(m map[string]any) { obj(m, "context", "tenant")["security_domain_ref"] = "security-domain:other" }),
			schema.Problem{Path: "/context/tenant/security_domain_ref", Rule: RuleDomainForeign, Code: schema.CodeAdmissionTenantNotPermitted}},
		{"provider", edit(func(m map[string]any) { obj(m, "intent")["provider"] = "acme" }),
			schema.Problem{Path: "/intent/provider", Rule: RuleProviderUnknown, Code: schema.CodeAdmissionProviderUnknown}},
	}
	for _, tc := range cases {
		hdr, err := trust.Sign(host, tc.body)
		if err != nil {
			t.Fatal(err)
		}
		v := Decide(pol, "frontdesk", tc.body, hdr)
		for i := range v.Problems {
			v.Problems[i].Offset = 0 // where the decoder stopped: not compared
		}
		if v.Incident == nil || v.Incident.Code != tc.want.Code || len(v.Problems) != 1 || v.Problems[0] != tc.want {
			t.Errorf("%s: incident %v, problems %+v; want %+v", tc.name, v.Incident, v.Problems, tc.want)
		}
	}
}

func TestPeekProposalID(t *testing.T) {
	cases := map[string]string{
		`{"proposal_id":"p-1","x":{"a":1,"a":2}}`:   "p-1",
		`{"x":1,"proposal_id":"p:2"}`:               "p:2",
		`{"proposal_id":"p-1","proposal_id":"p-1"}`: "",
		`{"proposal_id":"p-1"`:                      "",
		`{"proposal_id":"p-1"} {}`:                  "",
		`{"proposal_id":"bad id"}`:                  "",
		`{"proposal_id":7}`:                         "",
		`{"a":{"proposal_id":"p-1"}}`:               "",
		`["proposal_id","p-1"]`:                     "",
		"{\"proposal_id\":\"p-1\",\"x\":\"\xff\"}":  "",
	}
	for in, want := range cases {
		got, ok := schema.PeekProposalID([]byte(in))
		if got != want || ok != (want != "") {
			t.Errorf("PeekProposalID(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func FuzzDecide(f *testing.F) {
	f.Add([]byte(lumber))
	f.Add([]byte(lumber[:len(lumber)/2]))
	f.Add([]byte(lumber[len(lumber)/2:]))
	f.Add([]byte(`{"proposal_id":"p","proposal_id":"q"}`))
	pol := Policy{Trust: trust.Policy{AllowUnsigned: true}, MaxPayloadBytes: 65536, Providers: []string{"demo"}}
	f.Fuzz(func(t *testing.T, body []byte) {
		v := Decide(pol, "h", body, nil)
		if v.Incident == nil {
			if v.Proposal == nil || !v.Proposal.Validate() || !v.Proposal.Context.ContextComplete() {
				t.Fatal("admitted an invalid proposal")
			}
			return
		}
		if _, ok := schema.LookupCode(schema.PhaseAdmission, v.Incident.Code); !ok {
			t.Fatalf("code %q outside the closed set", v.Incident.Code)
		}
		if v.ProposalID != "" && !schema.ValidProposalID(v.ProposalID) {
			t.Fatalf("invalid proposal id %q would name an outcome subject", v.ProposalID)
		}
	})
}

func TestOffline(t *testing.T) {
	cases := []struct {
		name string
		body []byte
		code schema.Code
		id   string
	}{
		{"well formed, unsigned, unknown provider", []byte(lumber), "", "prop-1"},
		{"malformed", []byte(`{"proposal_id":"prop-1"`), schema.CodeAdmissionMalformed, ""},
		{"inexact payload number", []byte(strings.Replace(lumber, `{"quantity":20}`, `{"quantity":12345678901234567890}`, 1)), schema.CodeAdmissionMalformed, "prop-1"},
		{"incomplete context", edit(func(m map[string]any) { obj(m, "context", "tenant")["security_domain_ref"] = " " }), schema.CodeAdmissionContextIncomplete, "prop-1"},
		{"too large", edit(func(m map[string]any) { obj(m, "intent", "display")["summary"] = strings.Repeat("x", 5000) }), schema.CodeAdmissionMalformed, "prop-1"},
	}
	for _, tc := range cases {
		v := Offline(tc.body, 4096)
		var got schema.Code
		if v.Incident != nil {
			got = v.Incident.Code
		}
		if got != tc.code || v.ProposalID != tc.id {
			t.Errorf("%s: code %q id %q, want %q %q", tc.name, got, v.ProposalID, tc.code, tc.id)
		}
		if got == "" && v.Proposal == nil {
			t.Errorf("%s: no proposal", tc.name)
		}
	}
}
