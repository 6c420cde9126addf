package stages

import "github.com/portcullis/portcullis/schema"

// PeekString reads the string member at path (object member names, from
// the top) of the JSON document data without decoding the rest: routing
// decisions made before a handler validates its input (Bulkheads). ok is
// false when data is not such a document as far as it was read, or the
// member is absent or not a string. It validates nothing else: it is
// schema.PeekString (a scanner, not a decoder: the jsontext decoder it
// replaced cost as much as decoding the whole envelope). The bulkheads
// read envelopes with schema.EnvelopeProvider and EnvelopeCandidateSource,
// which read the binary form and use this on JSON ones.
func PeekString(data []byte, path ...string) (string, bool) {
	return schema.PeekString(data, path...)
}
