package grounding

import (
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
)

// Bulkhead puts each input that names a candidate source in that source's
// bulkhead (stages.Bulkheads): at most SourceMaxInFlight requests to one
// source at once, the rest waiting without holding the stage, so that a
// source that does not answer delays only the proposals that use it (SPEC
// §3, Isolation). Proposals with inline candidates have no bulkhead.
func (s *Stage) Bulkhead(in *stages.Input) (string, int) {
	if s.SourceMaxInFlight < 1 {
		return "", 0
	}
	name, ok := schema.EnvelopeCandidateSource(in.Data)
	if !ok || name == "" {
		return "", 0
	}
	return "source/" + name, s.SourceMaxInFlight
}
