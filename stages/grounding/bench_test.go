package grounding

import (
	"fmt"
	"testing"

	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/schema"
)

func BenchmarkNormalize(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Normalize("  ＬＵＭＢＥＲ:\u00a0Cedar-8ft-GradeA  ΟΔΟΣ ")
	}
}

// BenchmarkDecide grounds a proposal among 32 candidates (the default bound)
// and fingerprints the result, as the stage does per proposal.
func BenchmarkDecide(b *testing.B) {
	p := &schema.Proposal{
		Schema: schema.SchemaProposal, ProposalID: "p-1",
		Context:   schema.Context{Tenant: schema.TenantContext{TenantRef: "t", SecurityDomainRef: "sd"}, Actor: schema.ActorContext{ActorRef: "a"}},
		Intent:    schema.Intent{Provider: "demo", Capability: "c", Operation: "o", Environment: "test", Payload: []byte(`{"quantity":20,"note":"x"}`)},
		Grounding: schema.Grounding{Subject: []byte(`"lumber: cedar-8ft-gradea-17"`), Scope: "sd"},
	}
	var cands []schema.Candidate
	for i := range 32 {
		cands = append(cands, schema.Candidate{Referent: fmt.Sprintf("sku-%d", i), Source: "authoritative",
			Attributes: []byte(fmt.Sprintf(`{"resource":"Lumber: Cedar-8ft-GradeA-%d"}`, i))})
	}
	b.ReportAllocs()
	for b.Loop() {
		v := Decide(p, cands, 32)
		if v.Incident != nil {
			b.Fatal(v.Incident.Code)
		}
		if _, err := fingerprint.Of(p, v.Referent); err != nil {
			b.Fatal(err)
		}
	}
}
