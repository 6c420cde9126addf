package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/portcullis/portcullis/schema"
)

// vector is an entry of fingerprint/testdata/fingerprints.json, computed by
// an independent JCS implementation (Node.js and the npm package
// `canonicalize`; see fingerprint/testdata/gen).
type vector struct {
	Name           string         `json:"name"`
	Description    string         `json:"description"`
	SameAs         *string        `json:"same_as"`
	Referent       string         `json:"referent"`
	Proposal       jsontext.Value `json:"proposal"`
	Canonical      string         `json:"canonical"`
	Fingerprint    string         `json:"fingerprint"`
	IdempotencyKey string         `json:"idempotency_key"`
}

func vectors(t *testing.T) []vector {
	t.Helper()
	data, err := os.ReadFile("../../fingerprint/testdata/fingerprints.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []vector
	if err := json.Unmarshal(data, &vs, json.RejectUnknownMembers(true)); err != nil {
		t.Fatal(err)
	}
	return vs
}

func runCmd(t *testing.T, stdin []byte, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"fingerprint"}, args...), bytes.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func write(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFingerprintAgreesWithIndependentJCS runs the command on every vector
// proposal, from a file and from standard input, and compares with the
// independently computed values.
func TestFingerprintAgreesWithIndependentJCS(t *testing.T) {
	dir := t.TempDir()
	vs := vectors(t)
	if len(vs) < 15 {
		t.Fatalf("only %d vectors", len(vs))
	}
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			file := write(t, dir, v.Name+".json", v.Proposal)
			var p schema.Proposal
			if err := schema.Decode(v.Proposal, &p); err != nil {
				t.Fatal(err)
			}
			invocations := [][]string{{"--canonical", "--referent", v.Referent, file}, {"--referent", v.Referent, "-", "--canonical"}}
			if p.Grounding.CandidateSource == "" {
				// Inline candidates: the command grounds them itself.
				invocations = append(invocations, []string{file, "--canonical"}, []string{"--canonical"})
			}
			for _, args := range invocations {
				code, out, errs := runCmd(t, v.Proposal, args...)
				if code != 0 {
					t.Fatalf("%v: exit %d: %s%s", args, code, out, errs)
				}
				var got fingerprintOutput
				if err := json.Unmarshal([]byte(out), &got, json.RejectUnknownMembers(true)); err != nil {
					t.Fatalf("%v: output %q: %v", args, out, err)
				}
				if got.Referent != v.Referent || got.Fingerprint != v.Fingerprint || got.IdempotencyKey != v.IdempotencyKey ||
					got.Canonical == nil || *got.Canonical != v.Canonical {
					t.Errorf("%v: got %+v\nwant %s %s %s", args, got, v.Referent, v.Fingerprint, v.Canonical)
				}
			}
			// Without --canonical: exactly the three members.
			code, out, _ := runCmd(t, v.Proposal, "--referent", v.Referent)
			if code != 0 || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, `{"referent":"`) || strings.Contains(out, "canonical") {
				t.Errorf("plain output %q (exit %d)", out, code)
			}
		})
	}
}

func lumber(t *testing.T) map[string]any {
	t.Helper()
	for _, v := range vectors(t) {
		if v.Name == "spec-lumber" {
			var m map[string]any
			if err := json.Unmarshal(v.Proposal, &m); err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	t.Fatal("no spec-lumber vector")
	return nil
}

func body(t *testing.T, m map[string]any) []byte {
	b, err := json.Marshal(m, json.Deterministic(true))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFingerprintRefusals(t *testing.T) {
	dir := t.TempDir()
	ground := func(f func(g map[string]any)) []byte {
		m := lumber(t)
		f(m["grounding"].(map[string]any))
		return body(t, m)
	}
	cand := func(ref, res string) map[string]any {
		return map[string]any{"referent": ref, "source": "s", "attributes": map[string]any{"resource": res}, "evidence_refs": []any{}}
	}
	cfg := write(t, dir, "small.hcl", []byte("grounding {\n  max_candidates = 1\n}\n"))
	cases := []struct {
		name  string
		stdin []byte
		args  []string
		exit  int
		kind  schema.Kind // outcome kind printed, "" none
		code  schema.Code // incident code printed
	}{
		{"ambiguous", ground(func(g map[string]any) {
			g["candidates"] = []any{cand("a", "Lumber: Cedar-8ft-GradeA"), cand("b", "LUMBER: CEDAR-8FT-GRADEA")}
		}), nil, 1, schema.KindNeedsClarification, schema.CodeDiscriminationAmbiguous},
		{"mismatch", ground(func(g map[string]any) { g["candidates"] = []any{cand("a", "lumber: pine")} }), nil, 1, schema.KindNeedsClarification, schema.CodeDiscriminatorMismatch},
		{"missing", ground(func(g map[string]any) {
			g["candidates"] = []any{map[string]any{"referent": "a", "source": "s", "attributes": map[string]any{}, "evidence_refs": []any{}}}
		}), nil, 1, schema.KindNeedsClarification, schema.CodeDiscriminatorMissing},
		{"wrong scope", ground(func(g map[string]any) { g["scope"] = "policy-scope:inventory" }), nil, 1, schema.KindDenied, schema.CodeGroundingScopeMismatch},
		{"wrong scope with referent", ground(func(g map[string]any) { g["scope"] = "policy-scope:inventory" }), []string{"--referent", "sku-1001"}, 1, schema.KindDenied, schema.CodeGroundingScopeMismatch},
		{"malformed subject", ground(func(g map[string]any) { g["subject"] = nil }), nil, 1, schema.KindIntegrationFailure, schema.CodeProjectionUnavailable},
		{"unbounded by config", ground(func(g map[string]any) {
			g["candidates"] = []any{cand("a", "lumber: cedar-8ft-gradea"), cand("b", "x")}
		}), []string{"--config", cfg}, 1, schema.KindNeedsClarification, schema.CodeCandidatesUnbounded},
		{"not json", []byte(`{"proposal_id":"prop-x",`), nil, 1, "", schema.CodeAdmissionMalformed},
		{"malformed with id", []byte(`{"proposal_id":"prop-x","schema":7}`), nil, 1, schema.KindIntegrationFailure, schema.CodeAdmissionMalformed},
		{"inexact payload number", bytes.Replace(body(t, lumber(t)), []byte(`{"quantity":20}`), []byte(`{"quantity":9007199254740993}`), 1), nil, 1, schema.KindIntegrationFailure, schema.CodeAdmissionMalformed},
		{"incomplete context", func() []byte {
			m := lumber(t)
			m["context"].(map[string]any)["actor"].(map[string]any)["actor_ref"] = ""
			return body(t, m)
		}(), nil, 1, schema.KindDenied, schema.CodeAdmissionContextIncomplete},
		{"source without referent", ground(func(g map[string]any) { delete(g, "candidates"); g["candidate_source"] = "catalog" }), nil, 2, "", ""},
		{"empty referent", body(t, lumber(t)), []string{"--referent", ""}, 2, "", ""},
		{"multi-line referent", body(t, lumber(t)), []string{"--referent", "a\nb"}, 2, "", ""},
		{"two files", nil, []string{"a.json", "b.json"}, 2, "", ""},
		{"no such file", nil, []string{filepath.Join(dir, "absent.json")}, 1, "", ""},
		{"bad flag", nil, []string{"--frobnicate"}, 2, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runCmd(t, c.stdin, c.args...)
			if code != c.exit {
				t.Fatalf("exit %d, want %d: %s%s", code, c.exit, out, errs)
			}
			switch {
			case c.kind != "":
				var o schema.Outcome
				if err := json.Unmarshal([]byte(out), &o, json.RejectUnknownMembers(true)); err != nil {
					t.Fatalf("output %q: %v", out, err)
				}
				if o.Kind != c.kind || len(o.Incidents) != 1 || o.Incidents[0].Code != c.code || o.EffectTruth != schema.TruthNotDispatched {
					t.Errorf("outcome = %+v", o)
				}
			case c.code != "":
				var e schema.IncidentEvent
				if err := json.Unmarshal([]byte(out), &e, json.RejectUnknownMembers(true)); err != nil || e.Code != c.code {
					t.Errorf("event %q: %v", out, err)
				}
			default:
				if out != "" || errs == "" {
					t.Errorf("usage error: stdout %q stderr %q", out, errs)
				}
			}
		})
	}
}

// TestFingerprintV2Vectors: through the command, the same intent of another
// tenant, security domain, actor or referent changes the fingerprint, and a
// restatement that changes only unfingerprinted members does not.
func TestFingerprintV2Vectors(t *testing.T) {
	got := map[string]string{}
	for _, v := range vectors(t) {
		code, out, errs := runCmd(t, v.Proposal, "--referent", v.Referent)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s%s", v.Name, code, out, errs)
		}
		var o fingerprintOutput
		if err := json.Unmarshal([]byte(out), &o, json.RejectUnknownMembers(true)); err != nil {
			t.Fatal(err)
		}
		if o.Fingerprint != v.Fingerprint {
			t.Errorf("%s: %s, want %s", v.Name, o.Fingerprint, v.Fingerprint)
		}
		got[v.Name] = o.Fingerprint
	}
	base := got["tenant-base"]
	for _, name := range []string{"tenant-other-tenant", "tenant-other-security-domain", "tenant-other-actor", "tenant-other-referent"} {
		if got[name] == "" || got[name] == base {
			t.Errorf("%s: %q, base %q", name, got[name], base)
		}
	}
	if base == "" || got["tenant-base-restated"] != base {
		t.Errorf("restated %q, base %q", got["tenant-base-restated"], base)
	}
}

func TestFingerprintUsageSaysV2(t *testing.T) {
	code, out, errs := runCmd(t, nil, "-h")
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{"fingerprint v2", `"` + schema.SchemaFingerprint + `"`, "tenant_ref", "JCS", "idempotency key"} {
		if !strings.Contains(out, want) {
			t.Errorf("usage lacks %q:\n%s", want, out)
		}
	}
}
