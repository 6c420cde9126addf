package grounding_test

import (
	"fmt"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/grounding"
)

// Step is the stage's decision, free of I/O: the shell makes the call a
// decision asks for and steps again with what it learned. A candidate
// source is asked once per input; its answer is checkpointed before it is
// published, and a redelivered input is answered from the checkpoint.
func ExampleStep() {
	p := &schema.Proposal{}
	p.Context.Tenant.SecurityDomainRef = "security-domain:demo"
	p.Grounding.Scope = "security-domain:demo"
	p.Grounding.Subject = jsontext.Value(`"payments-api (production)"`)
	p.Grounding.CandidateSource = "catalog"
	f := grounding.Facts{Proposal: p, MaxCandidates: 4, Now: 1000}

	d := grounding.Step(f)
	fmt.Println("read the checkpoint:", d.Call == grounding.ReadCheckpoint)

	f.Read = true // none: this input was never decided
	d = grounding.Step(f)
	fmt.Println("ask the source:", d.Call == grounding.AskSource)

	f.Asked, f.Reply = true, &grounding.SourceReply{
		Candidates: []schema.Candidate{{
			Referent: "svc-1", Source: "authoritative",
			Attributes: jsontext.Value(`{"resource":"payments-api (production)"}`),
		}},
		ObservationRef: "obs:1",
	}
	d = grounding.Step(f)
	fmt.Printf("checkpoint %+v, then bind %s\n", *d.Checkpoint, d.Binding.Referent)

	redelivered := grounding.Facts{Proposal: p, MaxCandidates: 4, Read: true, Checkpoint: d.Checkpoint}
	d = grounding.Step(redelivered)
	fmt.Println("redelivered: bind", d.Binding.Referent, "with no call:", d.Call == grounding.NoCall)
	// Output:
	// read the checkpoint: true
	// ask the source: true
	// checkpoint {Code: Referent:svc-1 ObservationRef:obs:1 AtMs:1000}, then bind svc-1
	// redelivered: bind svc-1 with no call: true
}
