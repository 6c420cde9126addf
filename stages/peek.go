package stages

import (
	"bytes"

	"github.com/go-json-experiment/json/jsontext"
)

// PeekString reads the string member at path (object member names, from
// the top) of the JSON document data without decoding the rest: routing
// decisions made before a handler validates its input (Bulkheads). ok is
// false when data is not such a document as far as it was read, or the
// member is absent or not a string. It validates nothing else.
func PeekString(data []byte, path ...string) (string, bool) {
	if len(path) == 0 {
		return "", false
	}
	d := jsontext.NewDecoder(bytes.NewReader(data))
	for i, want := range path {
		if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
			return "", false
		}
		for {
			tok, err := d.ReadToken()
			if err != nil || tok.Kind() != '"' {
				return "", false // '}' (absent) or malformed
			}
			if tok.String() != want {
				if d.SkipValue() != nil {
					return "", false
				}
				continue
			}
			if i < len(path)-1 {
				break // descend
			}
			v, err := d.ReadToken()
			if err != nil || v.Kind() != '"' {
				return "", false
			}
			return v.String(), true
		}
	}
	return "", false
}
