package grounding

import (
	"reflect"
	"testing"

	"github.com/portcullis/portcullis/schema"
)

// TestStep walks the checkpoint: each row is what one step knows and what
// it must ask or decide, so a change that asks a source twice for one input,
// publishes a source's answer before checkpointing it, or trusts a corrupt
// checkpoint fails.
func TestStep(t *testing.T) {
	subject := `"payments-api (production)"`
	sourced := func(scope string) *schema.Proposal {
		p := proposal(subject, scope)
		p.Grounding.CandidateSource = "catalog"
		return p
	}
	one := &SourceReply{Candidates: []schema.Candidate{res("svc-1", "payments-api (production)")}, ObservationRef: "obs:1"}
	none := &SourceReply{ObservationRef: "obs:2"}
	inline := proposal(subject, domain, res("svc-1", "payments-api (production)"))
	inline.Grounding.ObservationRef = "obs:inline"
	failed := func(code schema.Code) Binding { return fail(code) }
	cases := []struct {
		name string
		f    Facts
		want Decision
	}{
		{"a foreign scope asks nothing", Facts{Proposal: sourced("security-domain:other")},
			Decision{Binding: failed(schema.CodeGroundingScopeMismatch)}},
		{"inline candidates are decided at once, never checkpointed", Facts{Proposal: inline, MaxCandidates: 4},
			Decision{Binding: Binding{Referent: "svc-1"}, ObservationRef: "obs:inline"}},
		{"a source: the checkpoint is read first", Facts{Proposal: sourced(domain)}, Decision{Call: ReadCheckpoint}},
		{"no checkpoint: the source is asked", Facts{Proposal: sourced(domain), Read: true}, Decision{Call: AskSource}},
		{"an answer is checkpointed with what it bound", Facts{Proposal: sourced(domain), MaxCandidates: 4, Now: 9, Read: true, Asked: true, Reply: one},
			Decision{Checkpoint: &Checkpoint{Referent: "svc-1", ObservationRef: "obs:1", AtMs: 9}, Binding: Binding{Referent: "svc-1"}, ObservationRef: "obs:1"}},
		{"an answer that binds nothing is checkpointed with its code", Facts{Proposal: sourced(domain), MaxCandidates: 4, Now: 9, Read: true, Asked: true, Reply: none},
			Decision{Checkpoint: &Checkpoint{Code: schema.CodeDiscriminatorMismatch, AtMs: 9}, Binding: failed(schema.CodeDiscriminatorMismatch)}},
		{"a source to blame: GROUNDING_SOURCE_UNAVAILABLE, checkpointed", Facts{Proposal: sourced(domain), Now: 9, Read: true, Asked: true, SourceFailed: true},
			Decision{Checkpoint: &Checkpoint{Code: schema.CodeGroundingSourceUnavailable, AtMs: 9}, Binding: failed(schema.CodeGroundingSourceUnavailable)}},
		{"a checkpoint is the answer: the source is not asked again", Facts{Proposal: sourced(domain), Read: true, Checkpoint: &Checkpoint{Referent: "svc-1", ObservationRef: "obs:1"}},
			Decision{Binding: Binding{Referent: "svc-1"}, ObservationRef: "obs:1"}},
		{"a checkpointed failure is the answer", Facts{Proposal: sourced(domain), Read: true, Checkpoint: &Checkpoint{Code: schema.CodeGroundingSourceUnavailable}},
			Decision{Binding: failed(schema.CodeGroundingSourceUnavailable)}},
		{"a checkpoint with a code of another phase is corrupt", Facts{Proposal: sourced(domain), Read: true, Checkpoint: &Checkpoint{Code: schema.CodeDispatchInterrupted}},
			Decision{Err: ErrCorruptCheckpoint}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Step(c.f); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("Step = %+v, want %+v", got, c.want)
			}
		})
	}
}
