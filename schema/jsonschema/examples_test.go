package jsonschema_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/disclosure"
	"github.com/portcullis/portcullis/schema/jsonschema"
	"github.com/portcullis/portcullis/stages/grounding"
)

var (
	fp  = "sha256:" + strings.Repeat("ab", 32)
	key = strings.Repeat("ab", 32)
)

// doc decodes a JSON text into a fresh value that edits may change.
func doc(t testing.TB, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("example does not decode: %v\n%s", err, s)
	}
	return m
}

// edit returns a copy of base with the member at a dotted path (array
// indexes as numbers) set to v, or deleted when v is del.
func edit(t testing.TB, base string, path string, v any) string {
	t.Helper()
	m := doc(t, base)
	var cur any = m
	keys := strings.Split(path, ".")
	for _, k := range keys[:len(keys)-1] {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[k]
		case []any:
			cur = c[atoi(t, k)]
		}
	}
	last := keys[len(keys)-1]
	switch c := cur.(type) {
	case map[string]any:
		if v == del {
			delete(c, last)
		} else {
			c[last] = v
		}
	case []any:
		c[atoi(t, last)] = v
	default:
		t.Fatalf("edit %s: no container", path)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type deletion struct{}

var del any = deletion{}

func atoi(t testing.TB, s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("bad index %q", s)
		}
		n = n*10 + int(c-'0')
	}
	return n
}

func specProposal(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/proposal.json")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const grantJSON = `{"schema": "actions.grant.v1", "proposal_id": "prop-7f3a",
 "intent_fingerprint": "sha256:abababababababababababababababababababababababababababababababab",
 "authorized_by": "actor:demo", "authorization_method": "manual", "authentication_assurance": "biometric",
 "issued_at_ms": 1764424800000, "expires_at_ms": 1764425100000, "max_external_spend": {"currency": "USD", "amount_minor": 24567}}`

const declineJSON = `{"schema": "actions.decline.v1", "proposal_id": "prop-7f3a",
 "intent_fingerprint": "sha256:abababababababababababababababababababababababababababababababab", "declined_by": "actor:demo"}`

// The outcome example of SPEC §2.4.
const clarificationJSON = `{"schema": "actions.outcome.v1", "proposal_id": "prop-7f3a", "kind": "NEEDS_CLARIFICATION",
 "terminal": true, "effect_truth": "NOT_DISPATCHED",
 "incidents": [{"phase": "grounding", "code": "GROUNDING_RESOURCE_DISCRIMINATION_AMBIGUOUS", "dispatch_boundary": "not_invoked"}],
 "fingerprint": null, "referent": null, "receipt": null, "approval": null, "at_ms": 1764424800123}`

const receiptJSON = `{"receipt_id": "rcpt_0123456789abcdef0123456789abcdef",
 "fingerprint": "sha256:abababababababababababababababababababababababababababababababab",
 "idempotency_key": "abababababababababababababababababababababababababababababababab",
 "provider": "inventory", "capability": "inventory.adjust", "operation": "adjust_stock", "environment": "test",
 "adapter": "nats", "status": "confirmed", "dispatch_attempted": true, "next_action": "none",
 "provider_action_id": "adj_1", "evidence_refs": ["inventory:adj_1"],
 "disclosure": null, "reconciliation": null, "recorded_at_ms": 1764424800100}`

func confirmedJSON(t testing.TB) string {
	o := doc(t, `{"schema": "actions.outcome.v1", "proposal_id": "prop-7f3a", "kind": "CONFIRMED", "terminal": true,
 "effect_truth": "PRESENT", "incidents": [],
 "fingerprint": "sha256:abababababababababababababababababababababababababababababababab", "referent": "sku-1001",
 "receipt": null, "approval": null, "at_ms": 1764424800123}`)
	o["receipt"] = doc(t, receiptJSON)
	b, _ := json.Marshal(o)
	return string(b)
}

const approvalJSON = `{"schema": "actions.outcome.v1", "proposal_id": "prop-7f3a", "kind": "NEEDS_APPROVAL", "terminal": false,
 "effect_truth": "NOT_DISPATCHED",
 "incidents": [{"phase": "authorization", "code": "APPROVAL_REQUIRED", "dispatch_boundary": "not_invoked"}],
 "fingerprint": "sha256:abababababababababababababababababababababababababababababababab", "referent": "sku-1001",
 "receipt": null, "approval": {"fingerprint": "sha256:abababababababababababababababababababababababababababababababab",
   "summary": "Add 20 boards", "external_spend": null, "expires_at_ms": 1764425400000}, "at_ms": 1764424800123}`

func exhaustedJSON(t testing.TB) string {
	r := doc(t, receiptJSON)
	r["status"], r["next_action"], r["error_code"] = "reconciliation_required", "none", "RECONCILE_EXHAUSTED"
	r["reconciliation"] = map[string]any{"attempt_id": "rcn_abababababababab_3", "previous_receipt_id": "rcpt_00"}
	o := doc(t, `{"schema": "actions.outcome.v1", "proposal_id": "prop-7f3a", "kind": "RECONCILIATION_REQUIRED", "terminal": true,
 "effect_truth": "INDETERMINATE",
 "incidents": [{"phase": "reconciliation", "code": "PROVIDER_INDETERMINATE", "dispatch_boundary": "invoked"},
               {"phase": "reconciliation", "code": "RECONCILE_EXHAUSTED", "dispatch_boundary": "invoked"}],
 "fingerprint": "sha256:abababababababababababababababababababababababababababababababab", "referent": "sku-1001",
 "receipt": null, "approval": null, "at_ms": 1764424800123}`)
	o["receipt"] = r
	b, _ := json.Marshal(o)
	return string(b)
}

const eventJSON = `{"phase": "admission", "code": "ADMISSION_UNAUTHENTICATED", "dispatch_boundary": "not_invoked", "at_ms": 1764424800123}`

func activityJSON(t testing.TB) string {
	a := doc(t, `{"schema": "actions.activity.v1",
 "fingerprint": "sha256:abababababababababababababababababababababababababababababababab",
 "proposals": [{"host": "frontdesk", "proposal_id": "prop-7f3a"}],
 "provider": "inventory", "capability": "inventory.adjust", "operation": "adjust_stock", "environment": "test",
 "referent": "sku-1001", "summary": "Add 20 boards", "external_spend": null, "status": "confirmed",
 "requester": {"agent_id": "agent:7"},
 "policy_evaluations": [{"layer": "grant", "outcome": "pass"}, {"layer": "managed_policy:prod", "outcome": "pass"}],
 "decision": {"outcome": "permit", "decided_at_ms": 1764424800050},
 "authorization": {"method": "manual", "assurance": "biometric", "issued_at_ms": 1764424800000, "expires_at_ms": 1764425100000},
 "disclosure": null,
 "dispatch": {"adapter": "nats", "attempted": true, "started_at_ms": 1764424800060, "finished_at_ms": 1764424800100, "status": "confirmed"},
 "reconciliation": null, "receipt": null, "updated_at_ms": 1764424800101}`)
	a["receipt"] = doc(t, receiptJSON)
	b, _ := json.Marshal(a)
	return string(b)
}

const dispatchJSON = `{"schema": "actions.dispatch.v1",
 "fingerprint": "sha256:abababababababababababababababababababababababababababababababab",
 "idempotency_key": "abababababababababababababababababababababababababababababababab",
 "provider": "inventory", "capability": "inventory.adjust", "operation": "adjust_stock", "environment": "test",
 "referent": "sku-1001", "payload": {"quantity": 20}, "external_spend": {"currency": "EUR", "amount_minor": 0},
 "protected_disclosure": {"recipient": "Duffel", "purpose": "Create the order.", "field_classes": ["birth_date", "legal_identity"],
   "values": {"birth_date": "1990-02-28", "legal_identity": {"given_name": "Ada", "family_name": "Lovelace", "gender": "f"}}},
 "not_after_ms": 1764424807000}`

const reconcileJSON = `{"schema": "actions.reconcile.v1",
 "fingerprint": "sha256:abababababababababababababababababababababababababababababababab",
 "idempotency_key": "abababababababababababababababababababababababababababababababab",
 "attempt_id": "rcn_abababababababab_1", "provider_action_id": "", "previous_receipt_id": "rcpt_0123"}`

const replyJSON = `{"outcome": "acknowledged", "provider_action_id": "ord_1", "evidence_refs": ["prov:1", "prov:2"], "error_code": "E.1:x-y_z"}`

const disclosureRequestJSON = `{"schema": "actions.disclosure.v1",
 "fingerprint": "sha256:abababababababababababababababababababababababababababababababab",
 "provider": "inventory", "operation": "adjust_stock", "environment": "test", "recipient": "Duffel",
 "purpose": "Create the order.", "field_classes": ["birth_date", "legal_identity"], "source": "fictional_test_fixture",
 "require_reauthentication": true, "authorization_method": "manual", "grant_authentication_assurance": "biometric"}`

const disclosureAnswerJSON = `{"schema": "actions.disclosure.v1",
 "fingerprint": "sha256:abababababababababababababababababababababababababababababababab",
 "provider": "inventory", "operation": "adjust_stock", "environment": "test", "recipient": "Duffel",
 "purpose": "Create the order.", "field_classes": ["legal_identity", "birth_date"], "source": "fictional_test_fixture",
 "authentication_assurance": "managed",
 "protected_values": {"birth_date": "2024-02-29", "legal_identity": {"given_name": "Ada", "family_name": "Lovelace",
   "middle_names": [], "title": "Countess", "gender": "f"}}}`

const refusalJSON = `{"refused": true, "reason_code": "user_declined"}`

const candidateRequestJSON = `{"subject": "lumber: cedar-8ft-gradea", "scope": "security-domain:demo"}`

const candidateReplyJSON = `{"candidates": [{"referent": "sku-1001", "source": "authoritative",
 "attributes": {"resource": "Lumber: Cedar-8ft-GradeA", "extra": [1, {"a": null}]}, "evidence_refs": ["catalog:12#sku-1001"]}],
 "observation_ref": "catalog:12"}`

type example struct {
	kind, name, json string
	valid            bool
}

func examples(t testing.TB) []example {
	p := specProposal(t)
	long := func(n int) string { return strings.Repeat("x", n) }
	var out []example
	good := func(kind, name, s string) { out = append(out, example{kind, name, s, true}) }
	bad := func(kind, name, s string) { out = append(out, example{kind, name, s, false}) }

	good("proposal", "SPEC §2.1", p)
	good("proposal", "candidate source", edit(t, edit(t, p, "grounding.candidates", del), "grounding.candidate_source", "catalog"))
	good("proposal", "optional members omitted", edit(t, edit(t, edit(t, edit(t, edit(t, edit(t, p,
		"grant", del), "requester", del), "intent.payload", del), "intent.display", del), "intent.external_spend", del), "grounding.observation_ref", del))
	good("proposal", "spend and plan", edit(t, edit(t, p, "intent.external_spend", map[string]any{"currency": "USD", "amount_minor": 9007199254740991}),
		"intent.protected_disclosure", map[string]any{"field_classes": []string{"birth_date", "legal_identity"}, "recipient": "Duffel", "purpose": "Book.", "source": "user_profile"}))
	good("proposal", "inline grant", edit(t, p, "grant", doc(t, edit(t, grantJSON, "proposal_id", del))))
	good("proposal", "zero candidates", edit(t, p, "grounding.candidates", []any{}))
	bad("proposal", "unknown member", edit(t, p, "extra", 1))
	bad("proposal", "unknown context member", edit(t, p, "context.tenant.extra", "x"))
	bad("proposal", "bad proposal_id", edit(t, p, "proposal_id", "prop 7f3a"))
	bad("proposal", "proposal_id too long", edit(t, p, "proposal_id", long(129)))
	bad("proposal", "wrong schema", edit(t, p, "schema", "actions.proposal.v2"))
	bad("proposal", "empty context field", edit(t, p, "context.actor.actor_ref", ""))
	bad("proposal", "blank context field", edit(t, p, "context.actor.actor_ref", " \t"))
	bad("proposal", "missing context field", edit(t, p, "context.delivery.delivery_id", del))
	bad("proposal", "environment", edit(t, p, "intent.environment", "prod"))
	bad("proposal", "provider not normalized", edit(t, p, "intent.provider", "Inventory"))
	bad("proposal", "currency", edit(t, p, "intent.external_spend", map[string]any{"currency": "usd", "amount_minor": 1}))
	bad("proposal", "negative spend", edit(t, p, "intent.external_spend", map[string]any{"currency": "USD", "amount_minor": -1}))
	bad("proposal", "spend over 2^53-1", edit(t, p, "intent.external_spend", map[string]any{"currency": "USD", "amount_minor": 9007199254740992}))
	bad("proposal", "unknown class", edit(t, p, "intent.protected_disclosure", map[string]any{"field_classes": []string{"blood_type"}, "recipient": "D", "purpose": "P", "source": "user_profile"}))
	bad("proposal", "repeated class", edit(t, p, "intent.protected_disclosure", map[string]any{"field_classes": []string{"birth_date", "birth_date"}, "recipient": "D", "purpose": "P", "source": "user_profile"}))
	bad("proposal", "two-line recipient", edit(t, p, "intent.protected_disclosure", map[string]any{"field_classes": []string{"birth_date"}, "recipient": "D\nE", "purpose": "P", "source": "user_profile"}))
	bad("proposal", "candidates and source", edit(t, p, "grounding.candidate_source", "catalog"))
	bad("proposal", "neither candidates nor source", edit(t, p, "grounding.candidates", del))
	bad("proposal", "bad source name", edit(t, edit(t, p, "grounding.candidates", del), "grounding.candidate_source", "Catalog"))
	bad("proposal", "subject not a string", edit(t, p, "grounding.subject", 7))
	bad("proposal", "attributes not an object", edit(t, p, "grounding.candidates.0.attributes", "x"))
	bad("proposal", "referent two lines", edit(t, p, "grounding.candidates.0.referent", "a\nb"))
	bad("proposal", "summary too long", edit(t, p, "intent.display.summary", long(2001)))
	bad("proposal", "requester null", edit(t, p, "requester", nil))
	bad("proposal", "inline grant malformed", edit(t, p, "grant", doc(t, edit(t, grantJSON, "authorization_method", "magic"))))

	good("grant", "SPEC §2.2", grantJSON)
	good("grant", "no ceiling", edit(t, grantJSON, "max_external_spend", nil))
	bad("grant", "standalone without proposal_id", edit(t, grantJSON, "proposal_id", del))
	bad("grant", "method", edit(t, grantJSON, "authorization_method", "auto"))
	bad("grant", "assurance", edit(t, grantJSON, "authentication_assurance", "high"))
	bad("grant", "fingerprint upper case", edit(t, grantJSON, "intent_fingerprint", strings.ToUpper(fp)))
	bad("grant", "fingerprint without prefix", edit(t, grantJSON, "intent_fingerprint", key))
	bad("grant", "unknown member", edit(t, grantJSON, "signature", "x"))
	bad("grant", "time as string", edit(t, grantJSON, "issued_at_ms", "1764424800000"))

	good("decline", "SPEC §2.2", declineJSON)
	bad("decline", "no declined_by", edit(t, declineJSON, "declined_by", del))
	bad("decline", "grant schema", edit(t, declineJSON, "schema", "actions.grant.v1"))

	good("outcome", "SPEC §2.4", clarificationJSON)
	good("outcome", "confirmed", confirmedJSON(t))
	good("outcome", "needs approval", approvalJSON)
	good("outcome", "exhausted", exhaustedJSON(t))
	bad("outcome", "unknown member", edit(t, clarificationJSON, "note", "x"))
	bad("outcome", "unknown incident member", edit(t, clarificationJSON, "incidents.0", map[string]any{"phase": "grounding", "code": "GROUNDING_RESOURCE_DISCRIMINATION_AMBIGUOUS", "dispatch_boundary": "not_invoked", "at_ms": 1}))
	bad("outcome", "bad code", edit(t, clarificationJSON, "incidents.0.code", "GROUNDING_CONFUSED"))
	bad("outcome", "code of another phase", edit(t, clarificationJSON, "incidents.0.phase", "admission"))
	bad("outcome", "wrong boundary", edit(t, clarificationJSON, "incidents.0.dispatch_boundary", "invoked"))
	bad("outcome", "code of another kind", edit(t, clarificationJSON, "incidents.0.code", "GROUNDING_SCOPE_MISMATCH"))
	bad("outcome", "event-only code", edit(t, clarificationJSON, "incidents.0", map[string]any{"phase": "admission", "code": "ADMISSION_UNAUTHENTICATED", "dispatch_boundary": "not_invoked"}))
	bad("outcome", "no incident", edit(t, clarificationJSON, "incidents", []any{}))
	bad("outcome", "effect truth of another kind", edit(t, clarificationJSON, "effect_truth", "ABSENT"))
	bad("outcome", "not terminal", edit(t, clarificationJSON, "terminal", false))
	bad("outcome", "unknown kind", edit(t, clarificationJSON, "kind", "MAYBE"))
	bad("outcome", "fingerprint without referent", edit(t, clarificationJSON, "fingerprint", fp))
	bad("outcome", "confirmed without receipt", edit(t, confirmedJSON(t), "receipt", nil))
	bad("outcome", "confirmed with a rejected receipt", edit(t, confirmedJSON(t), "receipt.status", "rejected"))
	bad("outcome", "receipt with empty error_code", edit(t, confirmedJSON(t), "receipt.error_code", ""))
	bad("outcome", "approval missing", edit(t, approvalJSON, "approval", nil))
	bad("outcome", "terminal reconciliation without exhaustion", edit(t, exhaustedJSON(t), "incidents.1", map[string]any{"phase": "reconciliation", "code": "RECONCILE_ERROR", "dispatch_boundary": "invoked"}))

	good("incident_event", "unauthenticated", eventJSON)
	good("incident_event", "operator resolved", `{"phase": "reconciliation", "code": "OPERATOR_RESOLVED", "dispatch_boundary": "invoked", "at_ms": 1}`)
	bad("incident_event", "no at_ms", edit(t, eventJSON, "at_ms", del))
	bad("incident_event", "a value", edit(t, eventJSON, "tenant_ref", "tenant:demo"))
	bad("incident_event", "code of another phase", edit(t, eventJSON, "phase", "dispatch"))
	bad("incident_event", "negative time", edit(t, eventJSON, "at_ms", -1))

	good("receipt", "confirmed", receiptJSON)
	good("receipt", "provider code on confirmed", edit(t, receiptJSON, "error_code", "OK.1"))
	good("receipt", "no provider action id", edit(t, receiptJSON, "provider_action_id", ""))
	bad("receipt", "empty error_code", edit(t, receiptJSON, "error_code", ""))
	bad("receipt", "error_code with space", edit(t, receiptJSON, "error_code", "BAD CODE"))
	bad("receipt", "rejected without error_code", edit(t, receiptJSON, "status", "rejected"))
	bad("receipt", "acknowledged without verify", edit(t, receiptJSON, "status", "acknowledged"))
	bad("receipt", "failed before dispatch but attempted", edit(t, edit(t, receiptJSON, "status", "failed_before_dispatch"), "error_code", "ADAPTER_UNAVAILABLE"))
	bad("receipt", "evidence without colon", edit(t, receiptJSON, "evidence_refs", []string{"nocolon"}))
	bad("receipt", "21 evidence refs", edit(t, receiptJSON, "evidence_refs", strings.Split(strings.Repeat("a:b,", 20)+"a:b", ",")))
	bad("receipt", "unknown adapter", edit(t, receiptJSON, "adapter", "grpc"))
	bad("receipt", "status", edit(t, receiptJSON, "status", "done"))

	good("activity", "confirmed", activityJSON(t))
	good("activity", "parked", edit(t, edit(t, edit(t, edit(t, edit(t, activityJSON(t), "receipt", nil), "dispatch", nil), "status", "awaiting_approval"),
		"decision", map[string]any{"outcome": "pending", "reason_code": "APPROVAL_REQUIRED", "decided_at_ms": 1}),
		"authorization", map[string]any{"approval_expires_at_ms": 5}))
	bad("activity", "half a grant", edit(t, activityJSON(t), "authorization", map[string]any{"method": "manual"}))
	bad("activity", "empty method", edit(t, activityJSON(t), "authorization.method", ""))
	bad("activity", "payload", edit(t, activityJSON(t), "payload", map[string]any{}))
	bad("activity", "denial without reason", edit(t, activityJSON(t), "decision.outcome", "deny"))
	bad("activity", "layer", edit(t, activityJSON(t), "policy_evaluations.0.layer", "policy"))
	bad("activity", "33 proposals", edit(t, activityJSON(t), "proposals", func() []any {
		var ps []any
		for range 33 {
			ps = append(ps, map[string]any{"host": "h", "proposal_id": "p"})
		}
		return ps
	}()))

	good("dispatch_request", "with disclosure", dispatchJSON)
	good("dispatch_request", "null payload", edit(t, edit(t, dispatchJSON, "payload", nil), "protected_disclosure", nil))
	bad("dispatch_request", "missing payload", edit(t, dispatchJSON, "payload", del))
	bad("dispatch_request", "key not the fingerprint's form", edit(t, dispatchJSON, "idempotency_key", fp))
	bad("dispatch_request", "bad value", edit(t, dispatchJSON, "protected_disclosure.values.birth_date", "1990-02-30"))
	bad("dispatch_request", "year zero", edit(t, dispatchJSON, "protected_disclosure.values.birth_date", "0000-01-01"))
	bad("dispatch_request", "unknown class value", edit(t, dispatchJSON, "protected_disclosure.values.blood_type", "A"))
	bad("dispatch_request", "no not_after_ms", edit(t, dispatchJSON, "not_after_ms", del))
	bad("dispatch_request", "not_after_ms 0", edit(t, dispatchJSON, "not_after_ms", 0))
	bad("dispatch_request", "not_after_ms a string", edit(t, dispatchJSON, "not_after_ms", "1764424807000"))
	bad("dispatch_request", "not_after_ms fractional", edit(t, dispatchJSON, "not_after_ms", 1764424807000.5))

	good("reconcile_request", "no provider action id", reconcileJSON)
	bad("reconcile_request", "missing attempt", edit(t, reconcileJSON, "attempt_id", del))

	good("adapter_reply", "full", replyJSON)
	good("adapter_reply", "outcome only", `{"outcome": "indeterminate"}`)
	good("adapter_reply", "error code 128", `{"outcome": "rejected", "error_code": "`+strings.Repeat("E", 128)+`"}`)
	bad("adapter_reply", "error code 129", `{"outcome": "rejected", "error_code": "`+strings.Repeat("E", 129)+`"}`)
	bad("adapter_reply", "empty error code", `{"outcome": "rejected", "error_code": ""}`)
	bad("adapter_reply", "null member", `{"outcome": "confirmed", "provider_action_id": null}`)
	bad("adapter_reply", "unknown outcome", `{"outcome": "done"}`)
	bad("adapter_reply", "no outcome", `{"provider_action_id": "x"}`)
	bad("adapter_reply", "unknown member", `{"outcome": "confirmed", "status": "ok"}`)
	bad("adapter_reply", "two-line action id", `{"outcome": "confirmed", "provider_action_id": "a\nb"}`)

	good("disclosure_request", "bindings", disclosureRequestJSON)
	bad("disclosure_request", "values", edit(t, disclosureRequestJSON, "protected_values", map[string]any{}))

	good("disclosure_reply", "answer", disclosureAnswerJSON)
	good("disclosure_reply", "refusal", refusalJSON)
	good("disclosure_reply", "refusal with bindings", edit(t, refusalJSON, "fingerprint", fp))
	bad("disclosure_reply", "refusal without reason", `{"refused": true}`)
	bad("disclosure_reply", "refusal with values", edit(t, refusalJSON, "protected_values", map[string]any{"birth_date": "1990-01-01"}))
	bad("disclosure_reply", "reason without refusal", edit(t, disclosureAnswerJSON, "reason_code", "x"))
	bad("disclosure_reply", "null", edit(t, disclosureAnswerJSON, "legal_identity", nil))
	bad("disclosure_reply", "null title", edit(t, disclosureAnswerJSON, "protected_values.legal_identity.title", nil))
	bad("disclosure_reply", "no assurance", edit(t, disclosureAnswerJSON, "authentication_assurance", del))
	bad("disclosure_reply", "not a date", edit(t, disclosureAnswerJSON, "protected_values.birth_date", "2023-02-29"))
	bad("disclosure_reply", "gender", edit(t, disclosureAnswerJSON, "protected_values.legal_identity.gender", "x"))
	bad("disclosure_reply", "name with a tab", edit(t, disclosureAnswerJSON, "protected_values.legal_identity.given_name", "A\tda"))
	bad("disclosure_reply", "name blank", edit(t, disclosureAnswerJSON, "protected_values.legal_identity.given_name", "\u00a0"))
	bad("disclosure_reply", "empty schema", edit(t, disclosureAnswerJSON, "schema", ""))

	good("candidate_request", "subject and scope", candidateRequestJSON)
	bad("candidate_request", "unknown member", edit(t, candidateRequestJSON, "tenant_ref", "tenant:demo"))
	good("candidate_reply", "one candidate", candidateReplyJSON)
	good("candidate_reply", "none", `{"candidates": [], "observation_ref": ""}`)
	bad("candidate_reply", "no observation_ref", `{"candidates": []}`)
	bad("candidate_reply", "null candidates", `{"candidates": null, "observation_ref": "x"}`)
	bad("candidate_reply", "candidate without referent", edit(t, candidateReplyJSON, "candidates.0.referent", del))
	return out
}

// TestSchemasCompile: every file compiles as draft 2020-12, names itself
// under Base, and is a message or a definitions file.
func TestSchemasCompile(t *testing.T) {
	if _, err := jsonschema.New(); err != nil {
		t.Fatal(err)
	}
	entries, err := jsonschema.FS.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, k := range append(jsonschema.Messages(), jsonschema.Definitions()...) {
		known[jsonschema.File(k)] = true
	}
	for _, e := range entries {
		if !known[e.Name()] {
			t.Errorf("%s is neither a message nor a definitions file", e.Name())
		}
		delete(known, e.Name())
		var s struct {
			Schema string `json:"$schema"`
			ID     string `json:"$id"`
			Title  string `json:"title"`
		}
		data, _ := jsonschema.FS.ReadFile(e.Name())
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		if s.Schema != "https://json-schema.org/draft/2020-12/schema" || s.ID != jsonschema.Base+e.Name() || s.Title == "" {
			t.Errorf("%s: $schema %q, $id %q, title %q", e.Name(), s.Schema, s.ID, s.Title)
		}
	}
	for f := range known {
		t.Errorf("%s is missing", f)
	}
}

// TestExamples validates good and bad examples of every message.
func TestExamples(t *testing.T) {
	seen := map[string][2]int{}
	for _, ex := range examples(t) {
		t.Run(ex.kind+"/"+ex.name, func(t *testing.T) {
			err := jsonschema.Validate(ex.kind, []byte(ex.json))
			if ex.valid && err != nil {
				t.Errorf("valid example refused: %v\n%s", err, ex.json)
			}
			if !ex.valid && err == nil {
				t.Errorf("invalid example accepted:\n%s", ex.json)
			}
		})
		c := seen[ex.kind]
		if ex.valid {
			c[0]++
		} else {
			c[1]++
		}
		seen[ex.kind] = c
	}
	for _, k := range jsonschema.Messages() {
		if c := seen[k]; c[0] == 0 || c[1] == 0 {
			t.Errorf("%s: %d good and %d bad examples; want both", k, c[0], c[1])
		}
	}
}

// TestValidInputsAreAccepted: every valid example of an input message is
// accepted by the processor's own decoder and checks, so that a sender
// that validates against the schema is never refused as malformed.
func TestValidInputsAreAccepted(t *testing.T) {
	var req schema.DisclosureRequest
	if err := json.Unmarshal([]byte(disclosureRequestJSON), &req); err != nil {
		t.Fatal(err)
	}
	accept := map[string]func([]byte) bool{
		"proposal": func(b []byte) bool {
			p, err := schema.DecodeProposal(b, 65536)
			return err == nil && p.Validate() && p.Context.ContextComplete() && (p.Grant == nil || p.Grant.Valid())
		},
		"grant": func(b []byte) bool {
			g, err := schema.DecodeGrant(b, 65536)
			return err == nil && g.Valid() && g.ProposalID != ""
		},
		"decline": func(b []byte) bool {
			var d schema.Decline
			return schema.Decode(b, &d) == nil && d.Valid()
		},
		"adapter_reply": func(b []byte) bool {
			_, err := adapters.DecodeReply(b, false)
			return err == nil
		},
		"candidate_reply": func(b []byte) bool {
			_, err := grounding.DecodeSourceReply(b)
			return err == nil
		},
		"disclosure_reply": func(b []byte) bool {
			_, err := disclosure.Evaluate(&req, b)
			code, _ := disclosure.Code(err)
			return err == nil || code == schema.CodeDisclosureRefused
		},
	}
	for _, ex := range examples(t) {
		f := accept[ex.kind]
		if f == nil || !ex.valid {
			continue
		}
		if !f([]byte(ex.json)) {
			t.Errorf("%s/%s: valid against the schema but refused by the processor", ex.kind, ex.name)
		}
	}
}
