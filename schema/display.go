package schema

import (
	"fmt"
	"strings"
	"unicode"
)

// A display summary is read by a person — an approver asked by elicitation,
// an operator in the console or the CLI — who decides on what it says. So
// it may hold no character that changes what the person sees without being
// seen itself: Unicode's format characters (category Cf: the bidirectional
// embeddings, overrides and isolates U+202A–U+202E and U+2066–U+2069, the
// directional marks, zero-width space, word joiner, soft hyphen, byte-order
// mark, tag characters, …) and control characters other than tab and line
// breaks (a terminal's escape sequences among them). Two format characters
// are allowed: the zero-width non-joiner and joiner (U+200C, U+200D), which
// Persian, the Indic scripts and emoji sequences need and which reorder
// nothing.
//
// Admission refuses such a summary (ADMISSION_MALFORMED) rather than
// showing it escaped: refused at the one door, it can reach no reader —
// the console, the CLI, a host's own approval screen, a log viewer — and
// none of them has to escape it right; a host that wants to show such text
// writes it visibly.

// InvisibleInDisplay reports whether r may not appear in a display summary.
func InvisibleInDisplay(r rune) bool {
	switch r {
	case '\t', '\n', '\r', '\u200c', '\u200d':
		return false
	}
	return unicode.Is(unicode.Cf, r) || unicode.IsControl(r)
}

// HasInvisibleFormat reports whether s holds a character InvisibleInDisplay
// refuses.
func HasInvisibleFormat(s string) bool { return strings.IndexFunc(s, InvisibleInDisplay) >= 0 }

// Visible writes every character InvisibleInDisplay refuses as <U+XXXX>,
// so that text from an untrusted source (a model's payload) can be shown
// to a person, and sent in a display summary, as what it is.
func Visible(s string) string {
	if !HasInvisibleFormat(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if InvisibleInDisplay(r) {
			fmt.Fprintf(&b, "<U+%04X>", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
