package schema_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/schema"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// good is a valid proposal; edits plant a secret where they break a rule.
const good = `{"schema":"actions.proposal.v1","proposal_id":"p-1",
"context":{"tenant":{"tenant_ref":"tenant:demo","security_domain_ref":"security-domain:demo"},
"actor":{"actor_ref":"actor:demo","assurance":"host-session"},
"authorization":{"scope_ref":"policy-scope:inventory","policy_revision":"policy:7"},
"provider":{"account_ref":"inventory:fixture"},"delivery":{"delivery_id":"delivery:1","source":"voice"},
"host_invocation":{"invocation_id":"invocation:1"}},
"intent":{"provider":"demo","capability":"inventory.adjust","operation":"adjust_stock","environment":"test",
"payload":{"quantity":20},"external_spend":{"currency":"EUR","amount_minor":100},"protected_disclosure":null,"display":{"summary":"s"}},
"grounding":{"subject":"lumber","scope":"security-domain:demo","observation_ref":"catalog:12",
"candidates":[{"referent":"sku-1001","source":"authoritative","attributes":{"resource":"lumber"},"evidence_refs":["catalog:12#sku-1001"]}]},
"grant":null}`

const secret = "SECRET-7f3a-VALUE"

// set edits the good proposal at a dotted path (nil deletes).
func set(path string, v any) []byte {
	var m map[string]any
	if err := json.Unmarshal([]byte(good), &m); err != nil {
		panic(err)
	}
	keys := strings.Split(path, ".")
	cur := m
	for _, k := range keys[:len(keys)-1] {
		cur = cur[k].(map[string]any)
	}
	if v == nil {
		delete(cur, keys[len(keys)-1])
	} else {
		cur[keys[len(keys)-1]] = v
	}
	b, _ := json.Marshal(m)
	return b
}

func replace(old, new string) []byte {
	if !strings.Contains(good, old) {
		panic("no " + old)
	}
	return []byte(strings.Replace(good, old, new, 1))
}

func TestCheckProposalProblems(t *testing.T) {
	type pr struct {
		path string
		rule schema.Rule
	}
	malformed, incomplete := schema.CodeAdmissionMalformed, schema.CodeAdmissionContextIncomplete
	cases := []struct {
		name string
		body []byte
		code schema.Code
		want []pr
	}{
		{"valid", []byte(good), "", nil},
		{"schema missing", set("schema", nil), malformed, []pr{{"/schema", schema.RuleRequired}}},
		{"schema other", set("schema", secret), malformed, []pr{{"/schema", schema.RuleSchemaProposal}}},
		{"schema not a string", set("schema", 5), malformed, []pr{{"/schema", schema.RuleString}}},
		{"bad proposal id", set("proposal_id", secret+" x"), malformed, []pr{{"/proposal_id", schema.RuleProposalID}}},
		{"environment prod", set("intent.environment", secret), malformed, []pr{{"/intent/environment", schema.RuleEnvironment}}},
		{"environment missing", set("intent.environment", nil), malformed, []pr{{"/intent/environment", schema.RuleRequired}}},
		{"amount a string", set("intent.external_spend.amount_minor", secret), malformed, []pr{{"/intent/external_spend/amount_minor", schema.RuleInteger}}},
		{"amount a fraction", replace(`"amount_minor":100`, `"amount_minor":1.5`), malformed, []pr{{"/intent/external_spend/amount_minor", schema.RuleInteger}}},
		{"amount too big", replace(`"amount_minor":100`, `"amount_minor":9007199254740992`), malformed, []pr{{"/intent/external_spend/amount_minor", schema.RuleAmount}}},
		{"amount beyond int64", replace(`"amount_minor":100`, `"amount_minor":99999999999999999999`), malformed, []pr{{"/intent/external_spend/amount_minor", schema.RuleIntegerRange}}},
		{"currency", set("intent.external_spend.currency", "eur"), malformed, []pr{{"/intent/external_spend/currency", schema.RuleCurrency}}},
		{"provider", set("intent.provider", secret+"!"), malformed, []pr{{"/intent/provider", schema.RuleName}}},
		{"unknown member", set("intent."+secret, 1), malformed, []pr{{"/intent", schema.RuleUnknownMember}}},
		{"case-folded member", replace(`"schema"`, `"Schema"`), malformed, []pr{{"", schema.RuleUnknownMember}}},
		{"duplicate member", replace(`"grant":null`, `"grant":null,"grant":null`), malformed, []pr{{"/grant", schema.RuleDuplicate}}},
		{"duplicate in payload", replace(`{"quantity":20}`, `{"`+secret+`":1,"`+secret+`":2}`), malformed, []pr{{"/intent/payload", schema.RuleDuplicateIn}}},
		{"duplicate in attributes", replace(`{"resource":"lumber"}`, `{"resource":"a","resource":"`+secret+`"}`), malformed, []pr{{"/grounding/candidates/0/attributes", schema.RuleDuplicateIn}}},
		{"inexact payload number", replace(`{"quantity":20}`, `{"quantity":9007199254740993}`), malformed, []pr{{"/intent/payload", schema.RuleExactNumbers}}},
		{"too deep", replace(`{"quantity":20}`, strings.Repeat("[", 70)+strings.Repeat("]", 70)), malformed, []pr{{"", schema.RuleTooDeep}}},
		{"trailing data", []byte(good + ` {"` + secret + `":1}`), malformed, []pr{{"", schema.RuleTrailing}}},
		{"truncated", []byte(good[:len(good)-2]), malformed, []pr{{"/grant", schema.RuleTruncated}}},
		{"not JSON", []byte(`{"schema":` + secret + `}`), malformed, []pr{{"/schema", schema.RuleSyntax}}},
		{"invalid UTF-8", replace(`"s"}`, "\"\xff"+secret+"\"}"), malformed, []pr{{"/intent/display/summary", schema.RuleUTF8}}},
		{"array body", []byte(`["` + secret + `"]`), malformed, []pr{{"", schema.RuleObject}}},
		{"candidates an object", set("grounding.candidates", map[string]any{}), malformed, []pr{{"/grounding/candidates", schema.RuleArray}}},
		{"evidence ref a number", replace(`["catalog:12#sku-1001"]`, `[1]`), malformed, []pr{{"/grounding/candidates/0/evidence_refs/0", schema.RuleString}}},
		{"referent two lines", replace(`"sku-1001"`, `"sku\n`+secret+`"`), malformed, []pr{{"/grounding/candidates/0/referent", schema.RuleSingleLine}}},
		{"source and candidates", set("grounding.candidate_source", "catalog"), malformed, []pr{{"/grounding/candidate_source", schema.RuleSourceExclusive}}},
		{"disclosure", set("intent.protected_disclosure", map[string]any{"field_classes": []string{"birth_date", "birth_date", secret}, "recipient": "", "purpose": "p", "source": secret}), malformed, []pr{
			{"/intent/protected_disclosure/field_classes", schema.RuleClassKnown},
			{"/intent/protected_disclosure/field_classes", schema.RuleClassRepeated},
			{"/intent/protected_disclosure/recipient", schema.RuleRecipient},
			{"/intent/protected_disclosure/source", schema.RuleDisclosureFrom},
		}},
		{"actor missing", set("context.actor.actor_ref", ""), incomplete, []pr{{"/context/actor/actor_ref", schema.RuleRequired}}},
		{"actor blank", set("context.actor.actor_ref", "  "), incomplete, []pr{{"/context/actor/actor_ref", schema.RuleBlank}}},
		{"context too long", set("context.actor.actor_ref", strings.Repeat(secret, 40)), malformed, []pr{{"/context/actor/actor_ref", schema.RuleRefLen}}},
		{"malformed beats incomplete", set("context.actor", map[string]any{"actor_ref": "", "assurance": "host-session", "x": 1}), malformed, []pr{{"/context/actor", schema.RuleUnknownMember}}},
		{"every problem of a decoded proposal", set("intent", map[string]any{"provider": "demo", "environment": "prod"}), malformed, []pr{
			{"/intent/capability", schema.RuleRequired},
			{"/intent/operation", schema.RuleRequired},
			{"/intent/environment", schema.RuleEnvironment},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := schema.CheckProposal(tc.body, 65536)
			if tc.code == "" {
				if err != nil || p == nil {
					t.Fatalf("CheckProposal = %v", err)
				}
				return
			}
			var ve *schema.ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, schema.ErrMalformed) {
				t.Fatalf("err = %v, want a *ValidationError wrapping ErrMalformed", err)
			}
			if ve.Code() != tc.code {
				t.Errorf("Code() = %s, want %s", ve.Code(), tc.code)
			}
			var got []pr
			for _, p := range ve.Problems {
				got = append(got, pr{p.Path, p.Rule})
				if p.Code == "" {
					t.Errorf("problem %v without a code", p)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems = %v\nwant       %v", got, tc.want)
			}
			// Admission's verdict and Validate agree with the problems.
			if p != nil && p.Validate() != (tc.code != malformed) {
				t.Errorf("Validate() = %v with code %s", p.Validate(), tc.code)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "SECRET") {
				t.Errorf("the error quotes the input: %v", err)
			}
		})
	}
}

func TestTooLargeIsAProblem(t *testing.T) {
	_, err := schema.CheckProposal([]byte(good), 100)
	var ve *schema.ValidationError
	if !errors.Is(err, schema.ErrTooLarge) || !errors.As(err, &ve) || ve.Problems[0].Rule != schema.RuleTooLarge || ve.Code() != schema.CodeAdmissionMalformed {
		t.Fatalf("err = %v", err)
	}
}

// The offset of a decoding problem points into the body, where the
// decoder stopped; the problems of a decoded proposal have none.
func TestProblemOffsets(t *testing.T) {
	body := replace(`"grant":null`, `"grant":null,"grant":null`)
	_, err := schema.CheckProposal(body, 0)
	var ve *schema.ValidationError
	if !errors.As(err, &ve) {
		t.Fatal(err)
	}
	at := ve.Problems[0].Offset
	if at < 0 || at >= int64(len(body)) || !strings.HasPrefix(string(body[at:]), `"grant"`) {
		t.Errorf("offset %d: %q", at, body[max(at, 0):])
	}
	_, err = schema.CheckProposal(set("intent.environment", "prod"), 0)
	if !errors.As(err, &ve) || ve.Problems[0].Offset != -1 {
		t.Errorf("a decoded proposal's problem has offset %d", ve.Problems[0].Offset)
	}
}

// No path ever holds a name the sender chose, whatever the body.
func FuzzProblemPaths(f *testing.F) {
	f.Add([]byte(good))
	f.Add(set("intent."+secret, 1))
	f.Add(replace(`{"quantity":20}`, `{"a":{"b":1,"b":2}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		_, err := schema.CheckProposal(body, 0)
		var ve *schema.ValidationError
		if err == nil {
			return
		}
		if !errors.As(err, &ve) || len(ve.Problems) == 0 {
			t.Fatalf("err = %v", err)
		}
		for _, p := range ve.Problems {
			if p.Rule == "" || p.Code == "" {
				t.Fatalf("problem %+v", p)
			}
			for tok := range strings.SplitSeq(strings.TrimPrefix(p.Path, "/"), "/") {
				if tok != "" && !strings.ContainsAny(tok[:1], "0123456789") && !strings.Contains(good, `"`+tok+`"`) && !knownName(tok) {
					t.Fatalf("path %q holds a name the schema does not define", p.Path)
				}
			}
		}
	})
}

func knownName(s string) bool {
	return slices.Contains([]string{"candidate_source", "requester", "agent_id", "model_provider", "model_id", "session_id", "run_id",
		"field_classes", "recipient", "purpose", "source", "require_reauthentication", "proposal_id", "intent_fingerprint",
		"authorized_by", "authorization_method", "authentication_assurance", "issued_at_ms", "expires_at_ms", "max_external_spend", "schema", "currency", "amount_minor"}, s)
}
