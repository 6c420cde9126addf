package schema

import (
	"strings"
	"testing"
)

// tooDeepAtBytewise is the byte-at-a-time scanner tooDeepAt replaced, kept
// as the reference: both must give the same offset on every input.
func tooDeepAtBytewise(data []byte, max int) int {
	depth, inString, escaped := 0, false, false
	for i, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > max {
				return i
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return -1
}

var depthSeeds = []string{
	`{"a":[1,{"b":"[[[["}]}`,
	`["\"[[[", "\\", [["\\\"[" ]]]`,
	`"\\\\\\"[[[[[`,
	`[[[[[[`,
	`{"a":"unterminated [[[[`,
	`"\`,
	`{"a":"x\\"}[[[[`,
	``,
}

// TestTooDeepAtAgrees: the string-skipping scanner finds the same offset as
// the byte-at-a-time one on escapes, runs of backslashes, brackets inside
// strings and unterminated strings.
func TestTooDeepAtAgrees(t *testing.T) {
	for _, s := range depthSeeds {
		for max := range 6 {
			if got, want := tooDeepAt([]byte(s), max), tooDeepAtBytewise([]byte(s), max); got != want {
				t.Errorf("%q max %d: %d, want %d", s, max, got, want)
			}
		}
	}
}

func FuzzTooDeepAt(f *testing.F) {
	for _, s := range depthSeeds {
		f.Add([]byte(s), 2)
	}
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		max = max%8 + 1
		if max < 1 {
			max += 8
		}
		if got, want := tooDeepAt(data, max), tooDeepAtBytewise(data, max); got != want {
			t.Fatalf("%q max %d: %d, want %d", data, max, got, want)
		}
	})
}

// BenchmarkTooDeepAt scans a proposal-sized body (mostly strings, as the
// bench's proposal), as every decode did before reading it, and one of
// escaped quotes every three bytes (the skipping scanner's worst case).
func BenchmarkTooDeepAt(b *testing.B) {
	body := func(note string) []byte {
		return []byte(`{"schema":"actions.proposal.v1","proposal_id":"bench-1","context":{"tenant":{"tenant_ref":"tenant:bench",` +
			`"security_domain_ref":"security-domain:bench"},"actor":{"actor_ref":"actor:bench","assurance":"host-session"}},` +
			`"intent":{"provider":"inventory","capability":"inventory.adjust","payload":{"quantity":20,"note":"` + note + `"}},` +
			`"grounding":{"subject":"lumber: cedar-8ft-gradea","candidates":[{"referent":"sku-1001","attributes":{"resource":"Lumber"}}]}}`)
	}
	for _, in := range []struct {
		name string
		body []byte
	}{{"proposal", body(strings.Repeat("x", 600))}, {"escapes", body(strings.Repeat(`x\"`, 200))}} {
		for _, c := range []struct {
			name string
			scan func([]byte, int) int
		}{{"bytewise", tooDeepAtBytewise}, {"skipping", tooDeepAt}} {
			b.Run(in.name+"/"+c.name, func(b *testing.B) {
				b.SetBytes(int64(len(in.body)))
				for b.Loop() {
					if c.scan(in.body, MaxDepth) >= 0 {
						b.Fatal("too deep")
					}
				}
			})
		}
	}
}
