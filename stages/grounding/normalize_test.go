package grounding

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

func TestNormalize(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"seed subject", "lumber: cedar-8ft-gradea", "lumber: cedar-8ft-gradea"},
		{"seed resource", "Lumber: Cedar-8ft-GradeA", "lumber: cedar-8ft-gradea"},
		{"seed ambiguous resource", " LUMBER:\tCEDAR-8FT-GRADEA ", "lumber: cedar-8ft-gradea"},
		{"fullwidth forms", "Ｐａｙｍｅｎｔｓ－ＡＰＩ（ｐｒｏｄｕｃｔｉｏｎ）", "payments-api(production)"},
		{"fullwidth digits", "ＳＫＵ １００１", "sku 1001"},
		{"NBSP", "payments\u00a0api", "payments api"},
		{"tabs and newlines", "\tpayments \t\n api\r\n", "payments api"},
		{"ideographic and thin spaces", "\u3000payments\u2009\u2009api\u202f", "payments api"},
		{"NEL and line separators", "payments\u0085\u2028\u2029api", "payments api"},
		{"only white space", " \t\u00a0\u3000\n", ""},
		{"empty", "", ""},
		{"greek final sigma", "ΟΔΟΣ", "\u03bf\u03b4\u03bf\u03c2"},
		{"greek sigma inside and final", "ΣΟΦΟΣ ΣΟΦΟΣ", "\u03c3\u03bf\u03c6\u03bf\u03c2 \u03c3\u03bf\u03c6\u03bf\u03c2"},
		{"greek lone sigma", "Σ", "\u03c3"},
		{"compatibility ligature fi", "ﬁle ﬂow", "file flow"},
		{"compatibility ligature ffl", "Wa\ufb04e", "waffle"},
		{"ohm and kelvin signs", "\u2126 \u212a", "ω k"},
		{"roman numeral", "Ⅻ", "xii"},
		{"superscript two", "m²", "m2"},
		{"combining acute composes", "Cafe\u0301", "café"},
		{"precomposed", "CAFÉ", "café"},
		{"combining after uppercase greek", "\u03aa\u0301", "\u0390"},
		{"combining ypogegrammeni", "\u1fbc", "\u1fb3"},
		{"dotted capital I", "İstanbul", "i\u0307stanbul"},
		{"long s", "\u017f", "s"},
		{"sharp s stays", "Straße", "straße"},
		{"capital sharp s", "\u1e9e", "ß"},
		{"zero width space is not white space", "pay\u200bments", "pay\u200bments"},
	}
	for _, c := range cases {
		got := Normalize(c.in)
		if got != c.want {
			t.Errorf("%s: Normalize(%q) = %q (%U), want %q (%U)", c.name, c.in, got, []rune(got), c.want, []rune(c.want))
		}
	}
	// Greek final sigma, spelled out: the last letter is U+03C2, the
	// others U+03C3.
	if got := []rune(Normalize("ΣΟΦΟΣ")); got[0] != 'σ' || got[len(got)-1] != 'ς' {
		t.Errorf("final sigma: %U", got)
	}
}

// TestMeaningStaysDistinct: normalization erases formatting, never meaning.
func TestMeaningStaysDistinct(t *testing.T) {
	distinct := [][2]string{
		{"payments-api (production)", "payments-api (staging)"},
		{"payments-api (production)", "payments-api"},
		{"payments-api", "payments api"},
		{"payments-api", "paymentsapi"},
		{"tenant:demo", "tenant:demo2"},
		{"tenant:demo", "tenant: demo"},
		{"tenant:acme/eu", "tenant:acme/us"},
		{"USD 100", "EUR 100"},
		{"$100", "€100"},
		{"100 USD", "100.00 USD"},
		{"1,000", "1.000"},
		{"size 10", "size 10.5"},
		{"cedar 8ft", "cedar 8 ft"},
		{"cedar-8ft", "cedar–8ft"}, // hyphen vs en dash
		{"sku-1001", "sku-1OO1"},
		{"09:00 Europe/Paris", "09:00 Europe/London"},
		{"straße", "strasse"}, // lowercase is not case folding
		{"i", "ı"},            // dotless i stays
		{"pay\u200bments", "payments"},
		{"ab", "a b"},
	}
	for _, d := range distinct {
		if Match(d[0], d[1]) {
			t.Errorf("%q and %q match; they mean different things", d[0], d[1])
		}
	}
	same := [][2]string{
		{"Payments-API (Production)", "payments-api (production)"},
		{"  payments-api\t(production) ", "payments-api (production)"},
		{"ＰＡＹＭＥＮＴＳ-api (production)", "payments-api (production)"},
		{"payments-api\u00a0(production)", "payments-api (production)"},
		{"\u0390", "\u03aa\u0301"},
	}
	for _, s := range same {
		if !Match(s[0], s[1]) || !Match(s[1], s[0]) {
			t.Errorf("%q and %q differ only in formatting", s[0], s[1])
		}
	}
}

// TestNormalizeIdempotentOnEveryCodePoint checks every assigned code point
// alone, and each cased one and each mark in the contexts that break naive
// pipelines (before a combining mark, next to Σ). Lowercasing is the only
// step after the first NFKC that changes characters, and it changes only
// cased ones: uncased code points cannot break idempotence in a context.
func TestNormalizeIdempotentOnEveryCodePoint(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	bad := 0
	check := func(r rune, s string) {
		n := Normalize(s)
		if Normalize(n) != n {
			bad++
			t.Errorf("not idempotent on %U in %q: %q then %q", r, s, n, Normalize(n))
		}
	}
	for r := rune(0); r <= unicode.MaxRune && bad < 10; r++ {
		// Unassigned, private-use and unified ideographs (uncased, no
		// decompositions: about 100k code points) have no mappings.
		if !utf8.ValidRune(r) || unified(r) || unicode.Is(unicode.Co, r) || !assigned(r) {
			continue
		}
		c := string(r)
		check(r, c)
		if unicode.SimpleFold(r) == r && unicode.ToLower(r) == r && !unicode.IsMark(r) {
			continue
		}
		for _, s := range []string{"A" + c, c + "\u0301", c + "\u0345", c + "\u0308\u0301", "Σ" + c, c + "Σ", c + " " + c} {
			check(r, s)
		}
	}
}

func unified(r rune) bool {
	return (r >= 0x3400 && r <= 0x4dbf) || (r >= 0x4e00 && r <= 0x9fff) || (r >= 0x20000 && r <= 0x2f7ff) ||
		(r >= 0x30000 && r <= 0x3134f) || (r >= 0x17000 && r <= 0x18aff) || (r >= 0xac00 && r <= 0xd7a3)
}

func assigned(r rune) bool {
	for _, tab := range unicode.Categories {
		if unicode.Is(tab, r) {
			return true
		}
	}
	return false
}

func checkNormalForm(t *testing.T, in, n string) {
	t.Helper()
	if Normalize(n) != n {
		t.Fatalf("Normalize not idempotent: %q -> %q -> %q", in, n, Normalize(n))
	}
	if !norm.NFKC.IsNormalString(n) {
		t.Fatalf("%q -> %q is not NFKC", in, n)
	}
	if strings.TrimFunc(n, unicode.IsSpace) != n || strings.Contains(n, "  ") {
		t.Fatalf("%q -> %q has untrimmed or uncollapsed white space", in, n)
	}
	for _, r := range n {
		if unicode.IsSpace(r) && r != ' ' {
			t.Fatalf("%q -> %q keeps white space %U", in, n, r)
		}
	}
}

// FuzzNormalize: idempotent, NFKC, trimmed and collapsed; matching is
// symmetric and agrees with comparing normal forms.
func FuzzNormalize(f *testing.F) {
	seeds := []string{"Lumber: Cedar-8ft-GradeA", " LUMBER:\tCEDAR-8FT-GRADEA ", "ΟΔΟΣ", "ﬁ", "Ｐａｙ", "a\u00a0\u3000b", "\u03aa\u0301", "İ", "e\u0301\u0301", "\xff\xfe"}
	for _, s := range seeds {
		f.Add(s, strings.ToUpper(s))
		f.Add(s[:len(s)/2], s[len(s)/2:])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		na, nb := Normalize(a), Normalize(b)
		checkNormalForm(t, a, na)
		checkNormalForm(t, b, nb)
		if Match(a, b) != Match(b, a) {
			t.Fatalf("Match not symmetric on %q, %q", a, b)
		}
		if Match(a, b) != (na == nb) {
			t.Fatalf("Match disagrees with normal forms on %q, %q", a, b)
		}
		if !Match(a, na) {
			t.Fatalf("%q does not match its own normal form %q", a, na)
		}
	})
}
