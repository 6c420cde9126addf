package stages_test

import (
	"bytes"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
)

// peekJSONText is the jsontext-decoder PeekString that the scanner
// replaced, kept as the reference.
func peekJSONText(data []byte, path ...string) (string, bool) {
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
				return "", false
			}
			if tok.String() != want {
				if d.SkipValue() != nil {
					return "", false
				}
				continue
			}
			if i < len(path)-1 {
				break
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

var peekPaths = [][]string{{"a"}, {"a", "b"}, {"proposal", "intent", "provider"}, {"proposal", "grounding", "candidate_source"}}

var peekSeeds = []string{
	`{"a":"x"}`, `{"b":1,"a":"x"}`, `{"a":{"b":"y"}}`, `{"a":{"c":[1,{"b":"n"}],"b":"y"}}`, `{"a":1}`, `{"a":null}`,
	`{"\u0061":"esc"}`, `{"a":"\ud83d\ude00"}`, `{"a":"\ud83d"}`, `{"b":"\xff","a":"x"}`, `{"b":[1,2,,],"a":"x"}`,
	`{"a":"x"`, `{"a":{"b":"y"`, `{}`, `[]`, `"a"`, ``, `{"a":"x"} trailing`, `{"b":1,"b":2,"a":"x"}`,
	`{"c":{"d":{"e":[[[[{"f":-1.5e3}]]]]},"g":true,"h":false},"a":{"b":"deep"}}`,
}

// TestPeekStringAgrees: on every seed (valid, malformed, escaped, deep),
// the scanner finds what the jsontext decoder found wherever that found
// something, and the same as it on every valid document.
func TestPeekStringAgrees(t *testing.T) {
	for _, s := range peekSeeds {
		checkPeek(t, []byte(s))
	}
	env := schema.MustMarshal(*envelopeSeed(t, true, true))
	checkPeek(t, env)
}

func FuzzPeekString(f *testing.F) {
	for _, s := range peekSeeds {
		f.Add([]byte(s))
	}
	f.Add(schema.MustMarshal(*envelopeSeed(f, true, true)))
	f.Fuzz(func(t *testing.T, data []byte) { checkPeek(t, data) })
}

func checkPeek(t *testing.T, data []byte) {
	t.Helper()
	valid := jsontext.Value(data).IsValid() // one value, no duplicate names
	for _, path := range peekPaths {
		got, ok := stages.PeekString(data, path...)
		want, wantOK := peekJSONText(data, path...)
		if (wantOK || valid) && (ok != wantOK || got != want) {
			t.Fatalf("%q %v: %q %v, reference %q %v", data, path, got, ok, want, wantOK)
		}
	}
}
