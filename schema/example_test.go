package schema_test

import (
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
	// schema: malformed input: syntax error
	// schema: malformed input: semantic error
	// p-1 true
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
