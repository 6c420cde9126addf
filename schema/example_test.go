package schema_test

import (
	"errors"
	"fmt"

	"github.com/portcullis/portcullis/schema"
)

// Decoding is strict: duplicate names at any depth, unknown members, wrong
// types and nesting deeper than 64 levels are malformed.
func ExampleDecodeProposal() {
	for _, body := range []string{
		`{"schema":"actions.proposal.v1","proposal_id":"p-1","proposal_id":"p-2"}`,
		`{"schema":"actions.proposal.v1","proposal_id":"p-1","colour":"red"}`,
	} {
		_, err := schema.DecodeProposal([]byte(body), 65536)
		fmt.Println(err)
	}
	// A malformed proposal still gets an outcome when its id is unambiguous.
	id, ok := schema.PeekProposalID([]byte(`{"proposal_id":"p-1","colour":"red"}`))
	fmt.Println(id, ok)
	// Output:
	// schema: malformed input: /proposal_id: duplicate member
	// schema: malformed input: (body): has an unknown member (names are exact and case-sensitive)
	// p-1 true
}

// CheckProposal says which field breaks which rule, never the value, in the
// terms admission answers with.
func ExampleCheckProposal() {
	body := `{"schema":"actions.proposal.v1","proposal_id":"p-1",
	 "intent":{"provider":"demo","capability":"c","operation":"o","environment":"prod",
	 "external_spend":{"currency":"eur","amount_minor":100}}}`
	_, err := schema.CheckProposal([]byte(body), 65536)
	var ve *schema.ValidationError
	if errors.As(err, &ve) {
		fmt.Println(ve.Code())
		incomplete := 0
		for _, p := range ve.Problems {
			if p.Code == schema.CodeAdmissionContextIncomplete {
				incomplete++ // every context field is missing
				continue
			}
			fmt.Println(p)
		}
		fmt.Println(incomplete, "context fields missing")
	}
	_, err = schema.CheckProposal([]byte(`{"intent":{"external_spend":{"amount_minor":"100"}}}`), 65536)
	fmt.Println(err)
	// Output:
	// ADMISSION_MALFORMED
	// /intent/environment: must be one of mock, test, live
	// /intent/external_spend/currency: must match ^[A-Z]{3}$
	// 10 context fields missing
	// schema: malformed input: /intent/external_spend/amount_minor: must be an integer
}

// Every outcome kind has a fixed effect truth and terminality, and every
// code a phase, a kind and a dispatch boundary.
func ExampleFailureOutcome() {
	inc := schema.NewIncident(schema.PhaseGrounding, schema.CodeDiscriminationAmbiguous)
	o := schema.FailureOutcome(schema.ProposalRef{Host: "frontdesk", ProposalID: "prop-7f3a"}, inc, 1764424800123)
	fmt.Println(o.Kind, o.EffectTruth, o.Terminal, o.Incidents[0].DispatchBoundary)
	fmt.Println(string(schema.MustMarshal(o)))
	// Output:
	// NEEDS_CLARIFICATION NOT_DISPATCHED true not_invoked
	// {"schema":"actions.outcome.v1","proposal_id":"prop-7f3a","kind":"NEEDS_CLARIFICATION","terminal":true,"effect_truth":"NOT_DISPATCHED","incidents":[{"phase":"grounding","code":"GROUNDING_RESOURCE_DISCRIMINATION_AMBIGUOUS","dispatch_boundary":"not_invoked"}],"fingerprint":null,"referent":null,"receipt":null,"approval":null,"at_ms":1764424800123}
}
