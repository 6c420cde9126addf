package schema_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/schema"
)

// nameFormats are the formats' regular expressions, which the byte-set
// checks replaced, each with its check.
var nameFormats = []struct {
	name  string
	re    *regexp.Regexp
	check func(string) bool
}{
	{"proposal id", regexp.MustCompile(`^[A-Za-z0-9_:-]{1,128}$`), schema.ValidProposalID},
	{"name", regexp.MustCompile(`^[a-z0-9][a-z0-9._:-]{0,127}$`), schema.ValidName},
	{"candidate source", regexp.MustCompile(`^[a-z0-9_-]{1,64}$`), schema.ValidCandidateSource},
	{"error code", regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`), schema.ValidErrorCode},
	{"currency", regexp.MustCompile(`^[A-Z]{3}$`), func(s string) bool { return schema.ValidSpend(&schema.Spend{Currency: s}) }},
}

var nameSamples = []string{"", "a", "A", "0", "-", ".", ":", "_", "abc", "ABC", "EUR", "EURO", "eur", "a.b", ".ab", "a:b-c_d",
	"inventory.adjust", "p-1", "x y", "a\n", "\na", "é", "a\xff", "\xff", strings.Repeat("a", 64), strings.Repeat("a", 65),
	strings.Repeat("a", 128), strings.Repeat("a", 129), "Z" + strings.Repeat("9", 127), "a/b", "a*b", "a>b"}

// TestNameFormats: each check accepts exactly what its regular expression
// matches.
func TestNameFormats(t *testing.T) {
	for _, f := range nameFormats {
		for _, s := range nameSamples {
			if got, want := f.check(s), f.re.MatchString(s); got != want {
				t.Errorf("%s %q: %v, want %v", f.name, s, got, want)
			}
		}
	}
}

func FuzzNameFormats(f *testing.F) {
	for _, s := range nameSamples {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, f := range nameFormats {
			if got, want := f.check(s), f.re.MatchString(s); got != want {
				t.Fatalf("%s %q: %v, want %v", f.name, s, got, want)
			}
		}
	})
}

// BenchmarkNameFormats: a name and a proposal id, as every stage checks
// them, by the regular expression and by the byte-set check.
func BenchmarkNameFormats(b *testing.B) {
	for _, f := range nameFormats[:2] {
		for _, c := range []struct {
			name  string
			check func(string) bool
		}{{"regexp", f.re.MatchString}, {"bytes", f.check}} {
			b.Run(strings.ReplaceAll(f.name, " ", "-")+"/"+c.name, func(b *testing.B) {
				for b.Loop() {
					if !c.check("inventory.adjust") && !c.check("bench-000001") {
						b.Fatal("refused")
					}
				}
			})
		}
	}
}
