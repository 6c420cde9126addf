package main

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/trust"
	"github.com/portcullis/portcullis/stages/admission"
)

func runCheck(t *testing.T, stdin []byte, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"check"}, args...), bytes.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// edited is the SPEC §2.1 proposal (examples/proposal.json) with f applied.
func edited(t *testing.T, f func(m map[string]any)) []byte {
	t.Helper()
	m := lumber(t)
	f(m)
	return body(t, m)
}

func sub(m map[string]any, path ...string) map[string]any {
	for _, p := range path {
		m = m[p].(map[string]any)
	}
	return m
}

const secretValue = "SECRET-VALUE-9q8"

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	example, err := os.ReadFile("../../examples/proposal.json")
	if err != nil {
		t.Fatal(err)
	}
	hostKP, _ := nkeys.CreateUser()
	hostKey, _ := hostKP.PublicKey()
	cfg := write(t, dir, "p.hcl", []byte(`
host "frontdesk" {
  public_key = "`+hostKey+`"
  tenants    = ["tenant:demo"]
}
tenant "tenant:demo" {
  security_domains = ["security-domain:demo"]
}
provider "inventory" {
  adapter = "nats"
}
grounding {
  max_candidates = 1
}
`))
	cases := []struct {
		name  string
		stdin []byte
		args  []string
		exit  int
		lines []string // stdout, exactly
	}{
		{"the SPEC example", example, nil, 0, []string{
			"admissible as far as offline checks go",
			"referent         sku-1001",
			"fingerprint      sha256:5a6883578c195c2db4563345d2872d693c6dfabca09b1ae4918d1cd00103e446",
			"idempotency_key  5a6883578c195c2db4563345d2872d693c6dfabca09b1ae4918d1cd00103e446",
		}},
		{"the SPEC example on --dev", example, []string{"--dev", "-"}, 0, nil},
		{"schema missing", edited(t, func(m map[string]any) { delete(m, "schema") }), nil, 1, []string{
			"/schema: required [ADMISSION_MALFORMED]"}},
		{"environment prod and more", edited(t, func(m map[string]any) {
			sub(m, "intent")["environment"] = secretValue
			sub(m, "intent")["capability"] = ""
			sub(m, "context", "actor")["actor_ref"] = ""
		}), nil, 1, []string{
			"/context/actor/actor_ref: required [ADMISSION_CONTEXT_INCOMPLETE]",
			"/intent/capability: required [ADMISSION_MALFORMED]",
			"/intent/environment: must be one of mock, test, live [ADMISSION_MALFORMED]",
		}},
		{"amount a string", []byte(strings.Replace(string(example), `"external_spend": null`, `"external_spend": {"currency": "EUR",
      "amount_minor": "`+secretValue+`"}`, 1)), nil, 1, []string{
			"/intent/external_spend/amount_minor: must be an integer [ADMISSION_MALFORMED, line 19 column 23]"}},
		{"unknown member", []byte(strings.Replace(string(example), `"grant": null`, `"grant": null, "grnat": 1`, 1)), nil, 1, []string{
			"/grnat: unknown member (names are exact and case-sensitive) [ADMISSION_MALFORMED, line 31 column 18]"}},
		{"too deep", []byte(strings.Replace(string(example), `{"quantity": 20}`, strings.Repeat("[", 70)+strings.Repeat("]", 70), 1)), nil, 1, []string{
			"(body): nesting deeper than 64 levels [ADMISSION_MALFORMED, line 17 column 78]"}},
		{"ambiguous", edited(t, func(m map[string]any) {
			g := sub(m, "grounding")
			c := g["candidates"].([]any)[0].(map[string]any)
			other := map[string]any{"referent": "sku-2", "source": "s", "attributes": map[string]any{"resource": "LUMBER: cedar-8ft-gradea"}, "evidence_refs": []any{}}
			g["candidates"] = []any{c, map[string]any{"referent": "sku-3", "source": "s", "attributes": map[string]any{}, "evidence_refs": []any{}}, other}
		}), nil, 1, []string{
			`/grounding/candidates/1/attributes: must be an object with a non-blank string member "resource" [GROUNDING_RESOURCE_DISCRIMINATOR_MISSING]`}},
		{"two match", edited(t, func(m map[string]any) {
			g := sub(m, "grounding")
			c := g["candidates"].([]any)[0].(map[string]any)
			g["candidates"] = []any{c, map[string]any{"referent": "sku-2", "source": "s", "attributes": map[string]any{"resource": "LUMBER: cedar-8ft-gradea"}, "evidence_refs": []any{}}}
		}), nil, 1, []string{
			"/grounding/candidates/0/attributes/resource: matches the subject, and so does another candidate's [GROUNDING_RESOURCE_DISCRIMINATION_AMBIGUOUS]",
			"/grounding/candidates/1/attributes/resource: matches the subject, and so does another candidate's [GROUNDING_RESOURCE_DISCRIMINATION_AMBIGUOUS]",
		}},
		{"scope", edited(t, func(m map[string]any) { sub(m, "grounding")["scope"] = secretValue }), nil, 1, []string{
			"/grounding/scope: must equal /context/tenant/security_domain_ref exactly [GROUNDING_SCOPE_MISMATCH]"}},
		{"unbounded by config", edited(t, func(m map[string]any) {
			g := sub(m, "grounding")
			c := g["candidates"].([]any)[0]
			g["candidates"] = []any{c, c}
		}), []string{"--config", cfg}, 1, []string{"/grounding/candidates: more candidates than grounding.max_candidates [GROUNDING_CANDIDATES_UNBOUNDED]"}},
		{"provider unknown on --dev", edited(t, func(m map[string]any) { sub(m, "intent")["provider"] = "acme" }), []string{"--dev"}, 1, []string{
			"/intent/provider: not a configured provider [ADMISSION_PROVIDER_UNKNOWN]"}},
		{"provider unknown without config is not judged", edited(t, func(m map[string]any) { sub(m, "intent")["provider"] = "acme" }), nil, 0, nil},
		{"tenant of another host", edited(t, func(m map[string]any) { sub(m, "context", "tenant")["tenant_ref"] = secretValue }), []string{"--config", cfg, "--host", "frontdesk"}, 1, []string{
			"/context/tenant/tenant_ref: not a tenant this host may speak for [ADMISSION_TENANT_NOT_PERMITTED]"}},
		{"domain of another tenant", edited(t, func(m map[string]any) {
			sub(m, "context", "tenant")["security_domain_ref"] = secretValue
			sub(m, "grounding")["scope"] = secretValue
		}), []string{"--config", cfg, "--host", "frontdesk"}, 1, []string{
			"/context/tenant/security_domain_ref: not a security domain of this tenant [ADMISSION_TENANT_NOT_PERMITTED]"}},
		{"candidate source", edited(t, func(m map[string]any) {
			g := sub(m, "grounding")
			delete(g, "candidates")
			g["candidate_source"] = "catalog"
		}), nil, 0, []string{"admissible as far as offline checks go",
			"it names a candidate_source: give --referent R for the fingerprint of the target R"}},
		{"candidate source with referent", edited(t, func(m map[string]any) {
			g := sub(m, "grounding")
			delete(g, "candidates")
			g["candidate_source"] = "catalog"
		}), []string{"--referent", "sku-1001"}, 0, []string{"admissible as far as offline checks go",
			"referent         sku-1001",
			"fingerprint      sha256:5a6883578c195c2db4563345d2872d693c6dfabca09b1ae4918d1cd00103e446",
			"idempotency_key  5a6883578c195c2db4563345d2872d693c6dfabca09b1ae4918d1cd00103e446",
		}},
		{"--host without --config", example, []string{"--host", "frontdesk"}, 2, nil},
		{"unknown --host", example, []string{"--config", cfg, "--host", "nobody"}, 2, nil},
		{"--dev and --config", example, []string{"--dev", "--config", cfg}, 2, nil},
		{"bad -o", example, []string{"-o", "yaml"}, 2, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runCheck(t, c.stdin, c.args...)
			if code != c.exit {
				t.Fatalf("exit %d, want %d\n%s%s", code, c.exit, out, errs)
			}
			if c.exit == 2 {
				if out != "" || !strings.Contains(errs, "usage: processor check") {
					t.Errorf("usage error: stdout %q stderr %q", out, errs)
				}
				return
			}
			if c.lines != nil && out != strings.Join(c.lines, "\n")+"\n" {
				t.Errorf("stdout:\n%s\nwant:\n%s", out, strings.Join(c.lines, "\n"))
			}
			if strings.Contains(out+errs, "SECRET") {
				t.Errorf("output quotes the input:\n%s%s", out, errs)
			}
			// -o json says the same.
			code, js, _ := runCheck(t, c.stdin, append(c.args, "-o", "json")...)
			var got checkOutput
			if err := json.Unmarshal([]byte(js), &got, json.RejectUnknownMembers(true)); err != nil || code != c.exit {
				t.Fatalf("-o json: exit %d, %q: %v", code, js, err)
			}
			if got.Admissible != (c.exit == 0) || (c.exit == 1) != (len(got.Problems) > 0 && got.Kind != "" && got.Outcome != nil) {
				t.Errorf("-o json: %+v", got)
			}
			if c.exit == 1 && c.lines != nil {
				var lines []string
				for _, p := range got.Problems {
					lines = append(lines, p.String())
				}
				if !slices.Equal(lines, c.lines) {
					t.Errorf("-o json problems %q", lines)
				}
			}
		})
	}
}

func TestCheckWithoutProposalIDSaysNoOutcome(t *testing.T) {
	code, out, errs := runCheck(t, []byte(`{"proposal_id":"a","proposal_id":"b"}`))
	if code != 1 || !strings.HasPrefix(out, "/proposal_id: duplicate member [ADMISSION_MALFORMED, line 1 column 20]\n/schema: required") || !strings.Contains(errs, "only the incident event") {
		t.Errorf("exit %d\n%s%s", code, out, errs)
	}
	code, js, _ := runCheck(t, []byte(`{"proposal_id":"a","proposal_id":"b"}`), "-o", "json")
	var got checkOutput
	if err := json.Unmarshal([]byte(js), &got); err != nil || code != 1 || got.Outcome == nil || *got.Outcome || got.Kind != schema.KindIntegrationFailure {
		t.Errorf("-o json: %s %v", js, err)
	}
}

// `check` is admission: on every body, whenever admission refuses, check
// refuses with the same code and the same problems; whenever admission
// admits, check finds no admission problem.
func TestCheckAgreesWithAdmission(t *testing.T) {
	dev := config.Dev(t.TempDir())
	var providers []string
	for _, p := range dev.Providers {
		providers = append(providers, p.Name)
	}
	pol := admission.Policy{Trust: trust.Policy{AllowUnsigned: true}, MaxPayloadBytes: dev.Admission.MaxPayloadBytes, Providers: providers}
	o := judgeOptions{maxBytes: dev.Admission.MaxPayloadBytes, maxCandidates: dev.Grounding.MaxCandidates, providers: providers}
	var bodies [][]byte
	for _, v := range vectors(t) {
		bodies = append(bodies, v.Proposal)
		// Every member in turn replaced by a wrong type, emptied, or dropped.
		var m map[string]any
		if err := json.Unmarshal(v.Proposal, &m); err != nil {
			t.Fatal(err)
		}
		var walk func(obj map[string]any)
		walk = func(obj map[string]any) {
			for k, val := range obj {
				for _, repl := range []any{7, "", nil, "PROD", []any{}, "drop"} {
					obj[k] = repl
					if repl == "drop" {
						delete(obj, k)
					}
					bodies = append(bodies, body(t, m))
					obj[k] = val
				}
				if sub, ok := val.(map[string]any); ok {
					walk(sub)
				}
			}
		}
		walk(m)
	}
	bodies = append(bodies, []byte(`{`), []byte(`[]`), []byte(`{"proposal_id":"p"} x`), bytes.Repeat([]byte("["), 100))
	refused := 0
	for _, b := range bodies {
		v := admission.Decide(pol, "h", b, nil)
		j := judge(b, o)
		if v.Incident == nil {
			if j.Incident != nil && j.Incident.Phase == schema.PhaseAdmission {
				t.Errorf("admission admits, check refuses with %s: %s", j.Incident.Code, b)
			}
			continue
		}
		refused++
		if j.Incident == nil || j.Incident.Code != v.Incident.Code || !sameProblems(v.Proposal == nil, v.Problems, j.Problems) || j.ProposalID != v.ProposalID {
			t.Errorf("admission %s %v, check %v %v: %s", v.Incident.Code, v.Problems, j.Incident, j.Problems, b)
		}
	}
	if refused < 100 {
		t.Errorf("only %d of %d bodies refused", refused, len(bodies))
	}
}

// sameProblems: check says what admission says. For a body that decoded,
// the same problems; for one that did not (admission stops at the first
// member and names only the object holding an unknown or duplicate one),
// check's list has that problem, with the member's own path under the
// holder's.
func sameProblems(undecoded bool, adm, chk []schema.Problem) bool {
	if !undecoded {
		return slices.Equal(adm, chk)
	}
	if len(adm) != 1 {
		return false
	}
	a := adm[0]
	return slices.ContainsFunc(chk, func(c schema.Problem) bool {
		switch {
		case c == a:
			return true
		case a.Rule == schema.RuleUnknownMember && c.Rule == ruleUnknownNamed,
			a.Rule == schema.RuleDuplicateIn && c.Rule == schema.RuleDuplicate:
			return strings.HasPrefix(c.Path, a.Path+"/") && c.Offset == a.Offset
		}
		return false
	})
}

// TestCheckListsEveryProblem: a body with several members that do not
// decode, and rules broken elsewhere, gets every problem in one run, each
// member named and located (issue 23: check stopped at the first decoding
// error and named the object holding an unknown member).
func TestCheckListsEveryProblem(t *testing.T) {
	example, err := os.ReadFile("../../examples/proposal.json")
	if err != nil {
		t.Fatal(err)
	}
	b := string(example)
	for _, r := range [][2]string{
		{`"actor_ref": "actor:demo"`, `"actor_ref": "actor:demo", "actor_name": "x"`},
		{`"environment": "test"`, `"environment": "prod"`},
		{`"external_spend": null`, `"external_spend": {"currency": "usd", "amount_minor": "12"}`},
		{`"payload": {"quantity": 20}`, `"payload": {"quantity": 20, "quantity": 21}`},
		{`"referent": "sku-1001"`, `"referent": 1001`},
		{`"grant": null`, `"grant": null, "Requester": {}`},
		{`"run_id": "r-1"`, `"run_id": 1`},
	} {
		if !strings.Contains(b, r[0]) {
			t.Fatalf("example lacks %s", r[0])
		}
		b = strings.Replace(b, r[0], r[1], 1)
	}
	code, out, _ := runCheck(t, []byte(b))
	want := []string{
		"/intent/payload/quantity: duplicate member [ADMISSION_MALFORMED, line 17 column 33]",
		"/context/actor/actor_name: unknown member (names are exact and case-sensitive) [ADMISSION_MALFORMED, line 6 column 42]",
		"/intent/external_spend/amount_minor: must be an integer [ADMISSION_MALFORMED, line 18 column 59]",
		"/grounding/candidates/0/referent: must be a string [ADMISSION_MALFORMED, line 27 column 20]",
		"/Requester: unknown member (names are exact and case-sensitive) [ADMISSION_MALFORMED, line 31 column 18]",
		"/requester/run_id: must be a string [ADMISSION_MALFORMED, line 32 column 119]",
		"/intent/environment: must be one of mock, test, live [ADMISSION_MALFORMED]",
		"/intent/external_spend/currency: must match ^[A-Z]{3}$ [ADMISSION_MALFORMED]",
	}
	if code != 1 || out != strings.Join(want, "\n")+"\n" {
		t.Errorf("exit %d, stdout:\n%s\nwant:\n%s", code, out, strings.Join(want, "\n"))
	}
	// The processor itself (admission, and its log) names the first only,
	// by the object that holds it.
	v := admission.Offline([]byte(b), 0)
	if len(v.Problems) != 1 || v.Problems[0].Path != "/context/actor" {
		t.Errorf("admission: %v", v.Problems)
	}
}

func TestFingerprintExplainsRefusals(t *testing.T) {
	b := edited(t, func(m map[string]any) { sub(m, "intent")["environment"] = "prod" })
	code, out, errs := runCmd(t, b)
	if code != 1 || !strings.Contains(out, `"code":"ADMISSION_MALFORMED"`) ||
		errs != "processor fingerprint: /intent/environment: must be one of mock, test, live [ADMISSION_MALFORMED]\n" {
		t.Errorf("exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
	b = edited(t, func(m map[string]any) { sub(m, "grounding")["scope"] = "policy-scope:inventory" })
	code, _, errs = runCmd(t, b)
	if code != 1 || !strings.Contains(errs, "/grounding/scope: must equal /context/tenant/security_domain_ref exactly [GROUNDING_SCOPE_MISMATCH]") {
		t.Errorf("exit %d, stderr %s", code, errs)
	}
}

// FuzzEveryProblem: on any body that admission refuses, listing every
// problem ends, never panics, and lists at least admission's.
func FuzzEveryProblem(f *testing.F) {
	example, err := os.ReadFile("../../examples/proposal.json")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{string(example), `{"a":`, `[1]`, `{"schema":1,"schema":2}`, `{"context":[],"x":{"y":1,"y":2}}`,
		`{"grounding":{"candidates":[1,{"referent":2,"z":3}]}}`, `"x"`, `{"intent":{"payload":{"a":1,"a":1}}}`, " 0"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v := admission.Offline(b, 0)
		if v.Proposal != nil || len(v.Problems) != 1 {
			return
		}
		got := everyProblem(b, 0, v.Problems[0])
		if !sameProblems(true, v.Problems, got) {
			t.Fatalf("admission %v, check %v", v.Problems, got)
		}
	})
}
