package dispatch

import (
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
)

// Bulkhead puts each input in its provider's bulkhead (stages.Bulkheads):
// at most the provider's max_in_flight of its proposals are handled at
// once, and the rest wait without holding the stage, so that a provider
// that hangs delays only its own proposals (SPEC §3, Isolation). The
// provider is read from the envelope without decoding it; an input whose
// provider cannot be read or is not configured has no bulkhead (Handle
// refuses or ends it without calling anything).
func (s *Stage) Bulkhead(in *stages.Input) (string, int) {
	name, ok := schema.EnvelopeProvider(in.Data)
	if !ok {
		return "", 0
	}
	for _, p := range s.Providers {
		if p.Name == name {
			return "provider/" + name, p.MaxInFlight
		}
	}
	return "", 0
}
