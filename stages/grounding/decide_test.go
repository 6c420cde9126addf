package grounding

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/portcullis/portcullis/schema"
)

const (
	domain = "security-domain:demo"
	scope  = "policy-scope:inventory"
)

func proposal(subject string, scope string, cands ...schema.Candidate) *schema.Proposal {
	p := &schema.Proposal{}
	p.Context.Tenant.SecurityDomainRef = domain
	p.Context.Authorization.ScopeRef = "policy-scope:inventory"
	p.Grounding.Subject = jsontext.Value(subject)
	p.Grounding.Scope = scope
	p.Grounding.Candidates = cands
	return p
}

func cand(referent, attrs string) schema.Candidate {
	return schema.Candidate{Referent: referent, Source: "authoritative", Attributes: jsontext.Value(attrs)}
}

func res(referent, resource string) schema.Candidate {
	return cand(referent, `{"resource":`+string(mustJSON(resource))+`}`)
}

func mustJSON(s string) []byte {
	v, err := schema.Marshal(s)
	if err != nil {
		panic(err)
	}
	return v
}

const seedSubject = `"lumber: cedar-8ft-gradea"`

func TestDecide(t *testing.T) {
	const (
		projection = schema.CodeProjectionUnavailable
		scopeMis   = schema.CodeGroundingScopeMismatch
		unbounded  = schema.CodeCandidatesUnbounded
		missing    = schema.CodeDiscriminatorMissing
		mismatch   = schema.CodeDiscriminatorMismatch
		ambiguous  = schema.CodeDiscriminationAmbiguous
	)
	one := res("sku-1001", "Lumber: Cedar-8ft-GradeA")
	many := make([]schema.Candidate, 4)
	for i := range many {
		many[i] = res("r", "x")
	}
	cases := []struct {
		name     string
		p        *schema.Proposal
		code     schema.Code // "" grounded
		referent string
	}{
		// The seed's four-case failure matrix.
		{"seed wrongScope", proposal(seedSubject, scope, res("one", "lumber: cedar-8ft-gradea")), scopeMis, ""},
		{"seed missing", proposal(seedSubject, domain, cand("one", `{}`)), missing, ""},
		{"seed mismatch", proposal(seedSubject, domain, res("one", "lumber:pine")), mismatch, ""},
		{"seed ambiguous", proposal(seedSubject, domain, res("one", " LUMBER:\tCEDAR-8FT-GRADEA "), res("two", "lumber: cedar-8ft-gradea")), ambiguous, ""},
		{"seed grounded", proposal(seedSubject, domain, one), "", "sku-1001"},

		// Rule 1: a malformed subject, whatever else is wrong.
		{"subject absent (null)", proposal(`null`, domain, one), projection, ""},
		{"subject empty raw", proposal(``, domain, one), projection, ""},
		{"subject empty string", proposal(`""`, domain, one), projection, ""},
		{"subject white space only", proposal(`" \t\u00a0\u3000"`, domain, one), projection, ""},
		{"subject number", proposal(`42`, domain, one), projection, ""},
		{"subject bool", proposal(`true`, domain, one), projection, ""},
		{"subject object", proposal(`{"resource":"lumber: cedar-8ft-gradea"}`, domain, one), projection, ""},
		{"subject array", proposal(`["lumber: cedar-8ft-gradea"]`, domain, one), projection, ""},
		{"subject control character", proposal(`"lumber\u0000"`, domain, one), projection, ""},
		{"subject escape character", proposal(`"lumber\u001b[31m"`, domain, one), projection, ""},
		{"subject too long", proposal(`"`+strings.Repeat("a", MaxSubjectLen+1)+`"`, domain, res("a", strings.Repeat("a", MaxSubjectLen+1))), projection, ""},
		{"subject at the limit", proposal(`"`+strings.Repeat("a", MaxSubjectLen)+`"`, domain, res("a", strings.Repeat("a", MaxSubjectLen))), "", "a"},
		{"malformed subject before wrong scope", proposal(`7`, scope, one), projection, ""},
		{"malformed subject before unbounded", proposal(`null`, domain, many...), projection, ""},

		// Rule 2: the security domain exactly, not the policy scope.
		{"scope is the authorization scope", proposal(seedSubject, scope, one), scopeMis, ""},
		{"scope differs in case", proposal(seedSubject, "Security-Domain:demo", one), scopeMis, ""},
		{"scope has white space", proposal(seedSubject, domain+" ", one), scopeMis, ""},
		{"scope empty", proposal(seedSubject, "", one), scopeMis, ""},
		{"wrong scope before unbounded", proposal(seedSubject, scope, many...), scopeMis, ""},
		{"wrong scope before missing", proposal(seedSubject, scope, cand("one", `{}`)), scopeMis, ""},

		// Rule 3: the bound (3 in these tests).
		{"unbounded", proposal(seedSubject, domain, many...), unbounded, ""},
		{"unbounded before missing", proposal(seedSubject, domain, cand("a", `{}`), one, one, one), unbounded, ""},
		{"at the bound", proposal(seedSubject, domain, res("a", "x"), res("b", "y"), one), "", "sku-1001"},

		// Rule 4: every candidate its own resource.
		{"attributes null", proposal(seedSubject, domain, cand("one", `null`)), missing, ""},
		{"attributes absent", proposal(seedSubject, domain, cand("one", ``)), missing, ""},
		{"attributes array", proposal(seedSubject, domain, cand("one", `[{"resource":"lumber: cedar-8ft-gradea"}]`)), missing, ""},
		{"attributes string", proposal(seedSubject, domain, cand("one", `"lumber: cedar-8ft-gradea"`)), missing, ""},
		{"resource null", proposal(seedSubject, domain, cand("one", `{"resource":null}`)), missing, ""},
		{"resource number", proposal(seedSubject, domain, cand("one", `{"resource":1001}`)), missing, ""},
		{"resource object", proposal(seedSubject, domain, cand("one", `{"resource":{"name":"lumber: cedar-8ft-gradea"}}`)), missing, ""},
		{"resource array", proposal(seedSubject, domain, cand("one", `{"resource":["lumber: cedar-8ft-gradea"]}`)), missing, ""},
		{"resource empty", proposal(seedSubject, domain, cand("one", `{"resource":""}`)), missing, ""},
		{"resource white space", proposal(seedSubject, domain, cand("one", `{"resource":" \t "}`)), missing, ""},
		{"other attribute does not substitute", proposal(seedSubject, domain, cand("one", `{"name":"lumber: cedar-8ft-gradea","title":"lumber: cedar-8ft-gradea"}`)), missing, ""},
		{"resource key case", proposal(seedSubject, domain, cand("one", `{"Resource":"lumber: cedar-8ft-gradea"}`)), missing, ""},
		{"resource key nested", proposal(seedSubject, domain, cand("one", `{"meta":{"resource":"lumber: cedar-8ft-gradea"}}`)), missing, ""},
		{"resource key with space", proposal(seedSubject, domain, cand("one", `{"resource ":"lumber: cedar-8ft-gradea"}`)), missing, ""},
		{"prototype-like key", proposal(seedSubject, domain, cand("one", `{"__proto__":{"resource":"lumber: cedar-8ft-gradea"}}`)), missing, ""},
		{"duplicate resource", proposal(seedSubject, domain, cand("one", `{"resource":"lumber: cedar-8ft-gradea","resource":"x"}`)), missing, ""},
		{"one missing spoils a match", proposal(seedSubject, domain, one, cand("two", `{}`)), missing, ""},
		{"missing before ambiguous", proposal(seedSubject, domain, one, one, cand("c", `{"resource":7}`)), missing, ""},
		{"resource among other attributes", proposal(seedSubject, domain, cand("one", `{"env":"prod","resource":"Lumber: Cedar-8ft-GradeA","n":[1,{"resource":"x"}]}`)), "", "one"},

		// Rules 5–6: normalization and exactly one match.
		{"zero candidates", proposal(seedSubject, domain), mismatch, ""},
		{"different grade", proposal(seedSubject, domain, res("b", "lumber: cedar-8ft-gradeb")), mismatch, ""},
		{"two different referents both match", proposal(seedSubject, domain, res("a", "LUMBER: CEDAR-8FT-GRADEA"), res("b", "lumber:  cedar-8ft-gradea")), ambiguous, ""},
		{"one of several", proposal(seedSubject, domain, res("a", "lumber: pine"), one, res("c", "lumber: cedar-8ft-gradeb")), "", "sku-1001"},
		{"fullwidth resource", proposal(seedSubject, domain, res("fw", "ｌｕｍｂｅｒ： ｃｅｄａｒ－８ｆｔ－ｇｒａｄｅａ")), "", "fw"},
		{"nbsp subject", proposal(`"lumber:\u00a0cedar-8ft-gradea"`, domain, one), "", "sku-1001"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if len(c.p.Grounding.Subject) == 0 && c.name != "subject empty raw" {
				t.Fatal("bad fixture")
			}
			v := Decide(c.p, c.p.Grounding.Candidates, 3)
			var got schema.Code
			if v.Incident != nil {
				got = v.Incident.Code
				want := schema.NewIncident(schema.PhaseGrounding, c.code)
				if *v.Incident != want {
					t.Errorf("incident = %+v, want %+v", *v.Incident, want)
				}
				if v.Referent != "" {
					t.Errorf("failed verdict names a referent")
				}
			}
			if got != c.code || v.Referent != c.referent || v.Grounded() != (c.code == "") {
				t.Errorf("verdict = %q %q, want %q %q", got, v.Referent, c.code, c.referent)
			}
			// Precheck agrees with Decide on rules 1–2.
			pre := Precheck(c.p)
			if (pre != nil) != (c.code == projection || c.code == scopeMis) {
				t.Errorf("Precheck = %v", pre)
			}
		})
	}
}

// TestFailureKinds pins the outcome kind of every grounding code (SPEC §2.5).
func TestFailureKinds(t *testing.T) {
	want := map[schema.Code]schema.Kind{
		schema.CodeProjectionUnavailable:      schema.KindIntegrationFailure,
		schema.CodeGroundingScopeMismatch:     schema.KindDenied,
		schema.CodeCandidatesUnbounded:        schema.KindNeedsClarification,
		schema.CodeDiscriminatorMissing:       schema.KindNeedsClarification,
		schema.CodeDiscriminatorMismatch:      schema.KindNeedsClarification,
		schema.CodeDiscriminationAmbiguous:    schema.KindNeedsClarification,
		schema.CodeGroundingSourceUnavailable: schema.KindIntegrationFailure,
	}
	for code, kind := range want {
		o := schema.FailureOutcome(schema.ProposalRef{Host: "h", ProposalID: "p"}, schema.NewIncident(schema.PhaseGrounding, code), 1)
		if o.Kind != kind || o.EffectTruth != schema.TruthNotDispatched || !o.Terminal || o.Incidents[0].DispatchBoundary != schema.BoundaryNotInvoked {
			t.Errorf("%s: %+v", code, o)
		}
	}
}

// TestPaymentsExample is seed 000's example as a pure decision: an exact
// subject grounds to production; vague ones ask for clarification.
func TestPaymentsExample(t *testing.T) {
	prod := cand("svc:payments-prod", `{"resource":"payments-api (production)","environment":"production","tenant":"acme"}`)
	staging := cand("svc:payments-staging", `{"resource":"payments-api (staging)","environment":"staging","tenant":"acme"}`)
	for subject, want := range map[string]string{
		`"payments-api (production)"`:     "svc:payments-prod",
		`"  Payments-API  (PRODUCTION) "`: "svc:payments-prod",
		`"payments-api (staging)"`:        "svc:payments-staging",
		`"the payments API"`:              string(schema.CodeDiscriminatorMismatch),
		`"payments-api"`:                  string(schema.CodeDiscriminatorMismatch),
		`"payments-api (prod)"`:           string(schema.CodeDiscriminatorMismatch),
		`"production"`:                    string(schema.CodeDiscriminatorMismatch),
	} {
		v := Decide(proposal(subject, domain, prod, staging), []schema.Candidate{prod, staging}, 32)
		got := v.Referent
		if !v.Grounded() {
			got = string(v.Incident.Code)
		}
		if got != want {
			t.Errorf("subject %s: %s, want %s", subject, got, want)
		}
	}
	// Two catalog records that carry the same resource name: ambiguous,
	// never "pick production".
	dupProd := cand("svc:payments-prod", `{"resource":"payments-api","environment":"production"}`)
	dupStaging := cand("svc:payments-staging", `{"resource":"payments-api","environment":"staging"}`)
	v := Decide(proposal(`"payments-api"`, domain), []schema.Candidate{dupProd, dupStaging}, 32)
	if v.Grounded() || v.Incident.Code != schema.CodeDiscriminationAmbiguous {
		t.Errorf("same-named records: %+v", v)
	}
}

func TestDecodeSourceReply(t *testing.T) {
	ok := []string{
		`{"candidates":[],"observation_ref":"catalog:1"}`,
		`{"observation_ref":"","candidates":[{"referent":"a","source":"s","attributes":{"resource":"x"},"evidence_refs":["e:1"]}]}`,
		`{"candidates":[{"referent":"a","source":"s","evidence_refs":[]}],"observation_ref":"c"}`,
		`{"candidates":[{"referent":"a","source":"s","attributes":{"resource":7},"evidence_refs":[]}],"observation_ref":"c"}`,
	}
	for _, s := range ok {
		r, err := DecodeSourceReply([]byte(s))
		if err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		for _, c := range r.Candidates {
			if len(c.Attributes) == 0 {
				t.Errorf("%s: attributes not filled", s)
			}
		}
	}
	bad := []string{
		``, `null`, `[]`, `"x"`, `{}`, `{`,
		`{"candidates":[]}`,
		`{"observation_ref":"c"}`,
		`{"candidates":null,"observation_ref":"c"}`,
		`{"candidates":{},"observation_ref":"c"}`,
		`{"candidates":[],"observation_ref":null}`,
		`{"candidates":[],"observation_ref":7}`,
		`{"candidates":[],"observation_ref":"` + strings.Repeat("x", schema.MaxRefLen+1) + `"}`,
		`{"candidates":[],"observation_ref":"c","extra":1}`,
		`{"candidates":[],"candidates":[],"observation_ref":"c"}`,
		`{"candidates":[],"observation_ref":"c"} {}`,
		`{"candidates":[null],"observation_ref":"c"}`,
		`{"candidates":[{"referent":"","source":"s"}],"observation_ref":"c"}`,
		`{"candidates":[{"referent":"a\nb","source":"s"}],"observation_ref":"c"}`,
		`{"candidates":[{"referent":"a","source":"s","colour":"red"}],"observation_ref":"c"}`,
		`{"candidates":[{"referent":"a","source":"s","attributes":{"resource":"x","resource":"y"}}],"observation_ref":"c"}`,
		`{"candidates":[{"referent":"a","source":"s","evidence_refs":"e:1"}],"observation_ref":"c"}`,
		"{\"candidates\":[],\"observation_ref\":\"\xff\"}",
	}
	for _, s := range bad {
		if _, err := DecodeSourceReply([]byte(s)); !errors.Is(err, ErrSourceMalformed) {
			t.Errorf("%q: err = %v, want ErrSourceMalformed", s, err)
		}
	}
}

// FuzzDecodeSourceReply: never panics; whatever decodes satisfies the
// candidate rules and can be decided.
func FuzzDecodeSourceReply(f *testing.F) {
	for _, s := range []string{
		`{"candidates":[{"referent":"svc:payments-prod","source":"catalog","attributes":{"resource":"payments-api (production)"},"evidence_refs":["c:1"]}],"observation_ref":"catalog:9"}`,
		`{"candidates":[],"observation_ref":""}`,
	} {
		f.Add([]byte(s))
		f.Add([]byte(s[:len(s)/2]))
		f.Add([]byte(s[len(s)/2:]))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeSourceReply(data)
		if err != nil {
			if !errors.Is(err, ErrSourceMalformed) {
				t.Fatalf("error %v is not ErrSourceMalformed", err)
			}
			return
		}
		for i := range r.Candidates {
			if !r.Candidates[i].Valid() || len(r.Candidates[i].Attributes) == 0 {
				t.Fatalf("invalid candidate accepted: %+v", r.Candidates[i])
			}
		}
		v := Decide(proposal(`"payments-api (production)"`, domain), r.Candidates, 32)
		if v.Grounded() == (v.Incident != nil) {
			t.Fatal("inconsistent verdict")
		}
	})
}

// FuzzDecide: any subject and attributes yield a closed grounding code or
// a referent of a matching candidate; never a panic.
func FuzzDecide(f *testing.F) {
	f.Add([]byte(seedSubject), []byte(`{"resource":"Lumber: Cedar-8ft-GradeA"}`), []byte(`{"resource":" LUMBER:\tCEDAR-8FT-GRADEA "}`))
	f.Add([]byte(`null`), []byte(`{}`), []byte(`[]`))
	f.Add([]byte(`"a`), []byte(`{"resource":`), []byte(`"b"}`))
	f.Fuzz(func(t *testing.T, subject, a1, a2 []byte) {
		c1, c2 := cand("one", string(a1)), cand("two", string(a2))
		p := proposal(string(subject), domain, c1, c2)
		v := Decide(p, p.Grounding.Candidates, 32)
		if v.Incident != nil {
			if _, ok := schema.LookupCode(schema.PhaseGrounding, v.Incident.Code); !ok {
				t.Fatalf("code %q outside the closed set", v.Incident.Code)
			}
			return
		}
		s, _ := Subject(p.Grounding.Subject)
		var c schema.Candidate
		switch v.Referent {
		case "one":
			c = c1
		case "two":
			c = c2
		default:
			t.Fatalf("referent %q is no candidate's", v.Referent)
		}
		if r, ok := Resource(c.Attributes); !ok || r != s {
			t.Fatalf("grounded to a candidate that does not match")
		}
	})
}
