package schema_test

import (
	"strings"
	"testing"

	"github.com/portcullis/portcullis/schema"
)

// proposalWithPayload is a well-formed proposal whose payload is raw JSON.
func proposalWithPayload(payload string) []byte {
	return []byte(`{"schema":"actions.proposal.v1","proposal_id":"p-1",
"context":{"tenant":{"tenant_ref":"tenant:demo","security_domain_ref":"security-domain:demo"},
"actor":{"actor_ref":"actor:demo","assurance":"host-session"},
"authorization":{"scope_ref":"policy-scope:inventory","policy_revision":"policy:7"},
"provider":{"account_ref":"inventory:fixture"},"delivery":{"delivery_id":"delivery:1","source":"voice"},
"host_invocation":{"invocation_id":"invocation:1"}},
"intent":{"provider":"demo","capability":"inventory.adjust","operation":"adjust_stock","environment":"test",
"payload":` + payload + `,"external_spend":null,"protected_disclosure":null,"display":{"summary":"s"}},
"grounding":{"subject":"lumber","scope":"security-domain:demo","observation_ref":"catalog:12",
"candidates":[{"referent":"sku-1001","source":"authoritative","attributes":{"resource":"lumber"},"evidence_refs":["catalog:12#sku-1001"]}]},
"grant":null}`)
}

func arrays(depth int) string { return strings.Repeat("[", depth) + strings.Repeat("]", depth) }

// A proposal nested exactly MaxDepth deep is admitted; the envelope that
// carries it to later stages is one level deeper and must still decode
// (before, every later stage refused it: PROCESSING_FAILED in grounding).
func TestEnvelopeHoldsTheDeepestProposal(t *testing.T) {
	// The proposal is level 1, its intent level 2: a payload MaxDepth-2 deep.
	p, err := schema.DecodeProposal(proposalWithPayload(arrays(schema.MaxDepth-2)), 0)
	if err != nil {
		t.Fatalf("a proposal %d deep: %v", schema.MaxDepth, err)
	}
	if _, err := schema.DecodeProposal(proposalWithPayload(arrays(schema.MaxDepth-1)), 0); err == nil {
		t.Fatalf("a proposal %d deep decoded", schema.MaxDepth+1)
	}
	data := schema.MustMarshal(schema.Envelope{Schema: schema.SchemaEnvelope, Proposal: *p, Host: "h", AdmittedAtMs: 1})
	var env schema.Envelope
	if err := schema.DecodeEnvelope(data, &env); err != nil {
		t.Fatalf("the envelope of a proposal %d deep: %v", schema.MaxDepth, err)
	}
	if string(env.Proposal.Intent.Payload) != arrays(schema.MaxDepth-2) {
		t.Errorf("payload = %s", env.Proposal.Intent.Payload)
	}
	if !schema.WithinDepth(data, schema.EnvelopeDepth) || schema.WithinDepth(data, schema.MaxDepth) {
		t.Errorf("the envelope is not exactly %d deep", schema.EnvelopeDepth)
	}
	// One level more is refused, by the envelope's limit too.
	deeper := strings.Replace(string(data), arrays(schema.MaxDepth-2), arrays(schema.MaxDepth-1), 1)
	if err := schema.DecodeEnvelope([]byte(deeper), &env); err == nil {
		t.Errorf("an envelope %d deep decoded", schema.EnvelopeDepth+1)
	}
}
