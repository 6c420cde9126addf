package grounding

import (
	"strings"
	"unicode"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
	"golang.org/x/text/unicode/norm"
)

// Normalize puts a subject or a resource in the form grounding compares
// (SPEC §3 Grounding, rule 5):
//
//  1. Unicode NFKC (fullwidth "Ｐ" → "P", the ligature "ﬁ" → "fi",
//     NBSP and ideographic space → " ", "e" + U+0301 → "é");
//  2. trim Unicode white space (the White_Space property, as
//     unicode.IsSpace) at both ends;
//  3. collapse every run of white space inside to one U+0020;
//  4. full Unicode default lowercase, cases.Lower(language.Und): "İ" → "i̇",
//     and a word-final "Σ" → "ς" (as JavaScript's toLowerCase);
//  5. NFKC once more. Lowercasing can leave a sequence that NFKC composes:
//     "Ϊ" + U+0301 is NFKC-stable, but its lowercase "ϊ" + U+0301 composes
//     to "ΐ". Without this step Normalize would not be idempotent, and the
//     lowercase "ΐ" would not match its uppercase spelling. It only ever
//     equates canonically equivalent strings.
//
// Normalization erases formatting only: "production" and "staging",
// tenants, currencies and sizes stay different.
func Normalize(s string) string {
	s = norm.NFKC.String(s)
	s = strings.Join(strings.FieldsFunc(s, unicode.IsSpace), " ")
	// A Caser is stateful: one per call.
	s = cases.Lower(language.Und).String(s)
	return norm.NFKC.String(s)
}

// Match reports whether a subject and a resource are equal after
// normalization. It is symmetric.
func Match(a, b string) bool { return Normalize(a) == Normalize(b) }
