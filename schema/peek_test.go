package schema_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/portcullis/portcullis/schema"
)

// jsontextPeek is the jsontext-based PeekProposalID that the iterative
// scanner replaced, kept as the reference: on every input the decoder can
// read (nesting at most jsontextMaxDepth) both must agree exactly.
func jsontextPeek(data []byte) (string, bool) {
	dec := jsontext.NewDecoder(bytes.NewReader(data), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(false))
	tok, err := dec.ReadToken()
	if err != nil || tok.Kind() != '{' {
		return "", false
	}
	id, found := "", 0
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return "", false
		}
		name := tok.String() // a token is voided by the next read
		val, err := dec.ReadValue()
		if err != nil {
			return "", false
		}
		if name == "proposal_id" {
			found++
			if val.Kind() != '"' {
				return "", false
			}
			var s string
			if err := json.Unmarshal(val, &s); err != nil {
				return "", false
			}
			id = s
		}
	}
	if _, err := dec.ReadToken(); err != nil { // closing brace
		return "", false
	}
	if _, err := dec.ReadToken(); err != io.EOF { // trailing data
		return "", false
	}
	if found != 1 || !schema.ValidProposalID(id) {
		return "", false
	}
	return id, true
}

// jsontextMaxDepth is the jsontext decoder's nesting limit.
const jsontextMaxDepth = 10_000

func objects(depth int) string {
	return strings.Repeat(`{"a":`, depth-1) + `{}` + strings.Repeat(`}`, depth-1)
}

func TestPeekProposalID(t *testing.T) {
	cases := map[string]string{
		`{"proposal_id":"p-1"}`:                          "p-1",
		` {"proposal_id" : "p-1" } ` + "\n\t\r":          "p-1",
		`{"proposal_id":"p-1","x":{"a":1,"a":2}}`:        "p-1",
		`{"x":1,"proposal_id":"p:2"}`:                    "p:2",
		`{"x":1,"x":2,"proposal_id":"p_3"}`:              "p_3",
		`{"proposal\u005fid":"p-4"}`:                     "p-4",
		`{"proposal_id":"p\u002d5"}`:                     "p-5",
		`{"proposal_id":"p-1","proposal_id":"p-1"}`:      "",
		`{"proposal_id":"p-1","proposal\u005fid":"p-1"}`: "",
		`{"proposal_id":"p-1"`:                           "",
		`{"proposal_id":"p-1",}`:                         "",
		`{"proposal_id":"p-1"} {}`:                       "",
		`{"proposal_id":"p-1"}x`:                         "",
		`{"proposal_id":"bad id"}`:                       "",
		`{"proposal_id":""}`:                             "",
		`{"proposal_id":7}`:                              "",
		`{"proposal_id":null}`:                           "",
		`{"proposal_id":["p-1"]}`:                        "",
		`{"a":{"proposal_id":"p-1"}}`:                    "",
		`{}`:                                             "",
		``:                                               "",
		`["proposal_id","p-1"]`:                          "",
		"{\"proposal_id\":\"p-1\",\"x\":\"\xff\"}":       "",
		"{\"proposal_id\":\"p-1\",\"x\":\"\x01\"}":       "",
		"\xef\xbb\xbf{\"proposal_id\":\"p-1\"}":          "", // a BOM
		`{"proposal_id":"p-1","x":"\ud800"}`:             "",
		`{"proposal_id":"p-1","x":"\udc00\ud800"}`:       "",
		`{"proposal_id":"p-1","x":"\ud83d\ude00 \u00e9 \/ \b\f\n\r\t"}`: "p-1",
		`{"proposal_id":"p-1","x":"\x"}`:                                "",
		`{"proposal_id":"p-1","x":[1,-0,0.5,1e9,-2.5E-3,1E+2]}`:         "p-1",
		`{"proposal_id":"p-1","x":01}`:                                  "",
		`{"proposal_id":"p-1","x":1.}`:                                  "",
		`{"proposal_id":"p-1","x":-}`:                                   "",
		`{"proposal_id":"p-1","x":.5}`:                                  "",
		`{"proposal_id":"p-1","x":1e}`:                                  "",
		`{"proposal_id":"p-1","x":[true,false,null]}`:                   "p-1",
		`{"proposal_id":"p-1","x":tru}`:                                 "",
		`{"proposal_id":"p-1","x":[1,]}`:                                "",
		`{"proposal_id":"p-1","x":[,1]}`:                                "",
		`{"proposal_id":"p-1","x":{"a"}}`:                               "",
		`{"proposal_id":"p-1","x":{1:2}}`:                               "",
		`{"proposal_id":"p-1","x":[}`:                                   "",
		`{"proposal_id":"p-1","x":{]}`:                                  "",
		`{"proposal_id":"p-1","x":[[[]]]]}`:                             "",
		`{"proposal_id":"p-1" "x":1}`:                                   "",
		`{"proposal_id":"` + strings.Repeat("a", 128) + `"}`:            strings.Repeat("a", 128),
		`{"proposal_id":"` + strings.Repeat("a", 129) + `"}`:            "",
	}
	for in, want := range cases {
		got, ok := schema.PeekProposalID([]byte(in))
		if got != want || ok != (want != "") {
			t.Errorf("PeekProposalID(%q) = %q, %v; want %q", in, got, ok, want)
		}
		if rgot, rok := jsontextPeek([]byte(in)); rgot != got || rok != ok {
			t.Errorf("%q: scanner %q, %v; jsontext %q, %v", in, got, ok, rgot, rok)
		}
	}
}

// TestPeekProposalIDDeep: the id is read however deep the rest nests — where
// the jsontext reader stopped at 10,000 levels — and deep garbage is still
// refused.
func TestPeekProposalIDDeep(t *testing.T) {
	wrap := func(v string) []byte { return []byte(`{"x":` + v + `,"proposal_id":"p-deep"}`) }
	cases := []struct {
		name string
		body []byte
		want bool
		// jsontext reads it too (its answer must then agree)
		reference bool
	}{
		{"arrays, 10,000 levels in all", wrap(arrays(jsontextMaxDepth - 1)), true, true},
		{"objects, 10,000 levels in all", wrap(objects(jsontextMaxDepth - 1)), true, true},
		{"arrays, 10,001 levels", wrap(arrays(jsontextMaxDepth)), true, false},
		{"objects, 10,001 levels", wrap(objects(jsontextMaxDepth)), true, false},
		{"arrays, 1,000,000 levels", wrap(arrays(1_000_000)), true, false},
		{"mixed, 100,000 levels", wrap(strings.Repeat(`[{"a":`, 50_000) + `"\ud83d\ude00"` + strings.Repeat(`}]`, 50_000)), true, false},
		{"id first", []byte(`{"proposal_id":"p-deep","x":` + arrays(50_000) + `}`), true, false},
		{"wrong closer at the bottom", wrap(arrays(50_000)[:50_000] + "}" + arrays(50_000)[50_001:]), false, false},
		{"one closer missing", wrap(arrays(50_000)[:99_999]), false, false},
		{"one closer too many", wrap(arrays(50_000) + "]"), false, false},
		{"invalid UTF-8 at the bottom", wrap(strings.Repeat("[", 50_000) + "\"\xff\"" + strings.Repeat("]", 50_000)), false, false},
		{"lone surrogate at the bottom", wrap(strings.Repeat("[", 50_000) + `"\udc00"` + strings.Repeat("]", 50_000)), false, false},
		{"trailing comma at the bottom", wrap(strings.Repeat("[", 50_000) + "1," + strings.Repeat("]", 50_000)), false, false},
		{"unterminated", []byte(`{"proposal_id":"p-deep","x":` + strings.Repeat("[", 100_000)), false, false},
		{"the id nested deep", []byte(strings.Repeat(`{"a":`, 20_000) + `{"proposal_id":"p-deep"}` + strings.Repeat("}", 20_000)), false, false},
	}
	for _, c := range cases {
		id, ok := schema.PeekProposalID(c.body)
		if ok != c.want || (ok && id != "p-deep") {
			t.Errorf("%s: %q, %v; want %v", c.name, id, ok, c.want)
		}
		if c.reference != schema.WithinDepth(c.body, jsontextMaxDepth) {
			t.Fatalf("%s: the case's depth is not what it says", c.name)
		}
		if c.reference {
			if rid, rok := jsontextPeek(c.body); rid != id || rok != ok {
				t.Errorf("%s: scanner %q, %v; jsontext %q, %v", c.name, id, ok, rid, rok)
			}
		} else if _, rok := jsontextPeek(c.body); rok {
			t.Errorf("%s: jsontext reads it: the case is not beyond its limit", c.name)
		}
	}
}

// gen writes random JSON-ish bodies: mostly valid objects with and without
// a top-level proposal_id, with rare defects of every kind the scanner must
// refuse exactly as the decoder does.
type gen struct {
	r   *rand.Rand
	buf bytes.Buffer
	// deep, when set, makes one nested value the placeholder "@DEEP@".
	deep, placed bool
}

func (g *gen) rare() bool { return g.r.IntN(150) == 0 }

func (g *gen) pick(s ...string) string { return s[g.r.IntN(len(s))] }

func (g *gen) ws() {
	if g.rare() && !g.deep {
		g.buf.WriteString(g.pick("\v", "\u00a0", "\x00", "/**/"))
		return
	}
	g.buf.WriteString(g.pick("", "", "", " ", "\n", "\t", "\r\n  "))
}

func (g *gen) str() {
	g.buf.WriteByte('"')
	for range g.r.IntN(6) {
		if g.rare() && !g.deep {
			g.buf.WriteString(g.pick(`\ud83d`, `\ude00`, `\ud83dx`, `\ud83d\u0041`, `\x`, `\u12g4`, `\u12`, "\xff", "\xed\xa0\x80", "\xc3", "\x01", "\n", `\`))
			continue
		}
		g.buf.WriteString(g.pick("a", "Z", "proposal_id", " ", "é", "😀", "\x7f", "\u2028", `\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`, `\u0000`, `\u00e9`, `\u00E9`, `\ud83d\ude00`, `\uD83D\uDE00`, `\u005f`))
	}
	g.buf.WriteByte('"')
}

func (g *gen) id() {
	switch g.r.IntN(12) {
	case 0:
		g.buf.WriteString(g.pick(`7`, `null`, `true`, `["p-1"]`, `{"id":"p-1"}`))
	case 1:
		g.buf.WriteString(g.pick(`""`, `"bad id"`, `"p/1"`, `"`+strings.Repeat("x", 129)+`"`, `"p\u00e9"`))
	case 2:
		g.buf.WriteString(g.pick(`"p\u002d1"`, `"\u0070-1"`, `"`+strings.Repeat("x", 128)+`"`))
	default:
		g.buf.WriteString(`"` + g.pick("p-1", "prop-7f3a", "a:b_c-D", "0", "Z") + `"`)
	}
}

func (g *gen) number() {
	if g.rare() && !g.deep {
		g.buf.WriteString(g.pick("01", "1.", "-", ".5", "1e", "1e+", "+1", "0x1", "NaN", "Infinity", "--1", "1.2.3"))
		return
	}
	g.buf.WriteString(g.pick("0", "-0", "7", "12", "-345", "1.5", "0.001", "1e10", "-1E-2", "1.5e+3", "123456789012345678901234567890", "1e999"))
}

func (g *gen) value(depth int) {
	if g.deep && !g.placed && depth > 1 && g.r.IntN(4) == 0 {
		g.buf.WriteString("@DEEP@")
		g.placed = true
		return
	}
	n := 6
	if depth >= 6 {
		n = 3
	}
	switch g.r.IntN(n) {
	case 0:
		g.str()
	case 1:
		g.number()
	case 2:
		if g.rare() && !g.deep {
			g.buf.WriteString(g.pick("tru", "nul", "True", "falsey", "nulll"))
		} else {
			g.buf.WriteString(g.pick("true", "false", "null"))
		}
	case 3, 4:
		g.container(depth, '[', ']', false)
	default:
		g.container(depth, '{', '}', false)
	}
}

// container writes an array or object; top is the body's own object.
func (g *gen) container(depth int, open, closer byte, top bool) {
	g.buf.WriteByte(open)
	n := g.r.IntN(5)
	idAt := -1 // where the body's own object has its proposal_id member
	if top && g.r.IntN(5) != 0 {
		n++
		idAt = g.r.IntN(n)
	}
	for i := range n {
		if i > 0 {
			g.ws()
			g.buf.WriteByte(',')
		}
		g.ws()
		if open == '{' {
			isID := i == idAt || (top && g.r.IntN(10) == 0)
			if isID {
				g.buf.WriteString(g.pick(`"proposal_id"`, `"proposal_id"`, `"proposal_id"`, `"proposal\u005fid"`, `"proposal_Id"`))
			} else {
				g.str()
			}
			g.ws()
			g.buf.WriteByte(':')
			g.ws()
			if isID {
				g.id()
			} else {
				g.value(depth + 1)
			}
		} else {
			g.value(depth + 1)
		}
		g.ws()
	}
	if g.rare() && !g.deep {
		g.buf.WriteString(g.pick(",", ",,", ":1", `"x"`))
	}
	g.buf.WriteByte(closer)
}

func (g *gen) body() []byte {
	g.buf.Reset()
	g.placed = false
	g.ws()
	if g.rare() && !g.deep {
		g.value(0)
	} else {
		g.container(0, '{', '}', true)
	}
	g.ws()
	if g.rare() && !g.deep {
		g.buf.WriteString(g.pick("x", "{}", "\x00", `"`, "]"))
	}
	return bytes.Clone(g.buf.Bytes())
}

// mutate damages a body at random: a byte dropped, inserted or replaced,
// or the tail cut off.
func mutate(r *rand.Rand, b []byte) []byte {
	if len(b) == 0 {
		return b
	}
	i := r.IntN(len(b))
	alphabet := []byte(`{}[]",:\ 0-e.tnu` + "\x00\x1f\x7f\xc3\xff")
	c := alphabet[r.IntN(len(alphabet))]
	switch r.IntN(4) {
	case 0:
		return append(b[:i:i], b[i+1:]...)
	case 1:
		return append(append(b[:i:i], c), b[i:]...)
	case 2:
		out := bytes.Clone(b)
		out[i] = c
		return out
	}
	return b[:i]
}

// TestPeekProposalIDAgreesWithJSONText compares the scanner with the
// jsontext reader on random bodies within the reader's depth.
func TestPeekProposalIDAgreesWithJSONText(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	g := &gen{r: r}
	n := 30_000
	if testing.Short() {
		n = 3_000
	}
	var read, refused int
	for i := range n {
		b := g.body()
		if i%4 == 0 {
			b = mutate(r, b)
		}
		id, ok := schema.PeekProposalID(b)
		rid, rok := jsontextPeek(b)
		if id != rid || ok != rok {
			t.Fatalf("case %d %q: scanner %q, %v; jsontext %q, %v", i, b, id, ok, rid, rok)
		}
		if ok {
			read++
		} else {
			refused++
		}
	}
	t.Logf("%d bodies: %d ids read, %d refused", n, read, refused)
	if read < n/10 || refused < n/10 {
		t.Errorf("the generator is lopsided: %d read, %d refused", read, refused)
	}
}

// TestPeekProposalIDIgnoresDepth: replacing a nested value of a valid body
// with a valid value of any depth never changes the answer; with a broken
// deep value, it is always refused.
func TestPeekProposalIDIgnoresDepth(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	g := &gen{r: r, deep: true}
	deepValues := []string{arrays(jsontextMaxDepth), objects(jsontextMaxDepth), arrays(25_000),
		strings.Repeat(`[{"proposal_id":`, 6_000) + `"p-1"` + strings.Repeat(`}]`, 6_000)}
	broken := []string{arrays(12_000)[:23_999], arrays(12_000) + "]", strings.Repeat("[", 12_000) + "}" + strings.Repeat("]", 11_999),
		strings.Repeat(`{"a":`, 12_000) + strings.Repeat("}", 12_000)}
	n := 500
	if testing.Short() {
		n = 50
	}
	checked := 0
	for i := 0; checked < n && i < 100*n; i++ {
		b := g.body()
		if !g.placed {
			continue
		}
		checked++
		shallow := bytes.Replace(b, []byte("@DEEP@"), []byte(g.pick("[]", "{}", "0", `"s"`)), 1)
		id, ok := schema.PeekProposalID(shallow)
		if rid, rok := jsontextPeek(shallow); rid != id || rok != ok {
			t.Fatalf("%q: scanner %q, %v; jsontext %q, %v", shallow, id, ok, rid, rok)
		}
		dv := deepValues[r.IntN(len(deepValues))]
		deep := bytes.Replace(b, []byte("@DEEP@"), []byte(dv), 1)
		if did, dok := schema.PeekProposalID(deep); did != id || dok != ok {
			t.Fatalf("%q with a value %d bytes deep: %q, %v; shallow: %q, %v", b, len(dv), did, dok, id, ok)
		}
		bad := bytes.Replace(b, []byte("@DEEP@"), []byte(broken[r.IntN(len(broken))]), 1)
		if bid, bok := schema.PeekProposalID(bad); bok {
			t.Fatalf("%q with a broken deep value: read %q", b, bid)
		}
	}
	if checked < n {
		t.Fatalf("only %d bodies with a nested value", checked)
	}
}

// FuzzPeekProposalID: within the jsontext reader's depth the scanner agrees
// with it exactly; beyond it, an id the scanner reads is valid and the
// body's shape is a JSON object.
func FuzzPeekProposalID(f *testing.F) {
	for _, s := range []string{
		`{"proposal_id":"p-1"}`, `{"proposal_id":"p-1","x":{"a":1,"a":2}}`, `{"x":[1,2,{"y":null}],"proposal_id":"a:b"}`,
		`{"proposal\u005fid":"p\u002d1"}`, `{"proposal_id":"p-1","x":"\ud83d\ude00"}`, `{"proposal_id":"p-1","x":"\ud800"}`,
		`{"proposal_id":"p-1"} x`, `{"proposal_id":7}`, `[]`, `{}`, `{"proposal_id":"p-1","x":-0.5e+7}`,
		`{"x":` + arrays(100) + `,"proposal_id":"p-1"}`, "{\"proposal_id\":\"p-1\",\"x\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		id, ok := schema.PeekProposalID(b)
		if ok && !schema.ValidProposalID(id) {
			t.Fatalf("%q: read the invalid id %q", b, id)
		}
		if !schema.WithinDepth(b, jsontextMaxDepth) {
			return
		}
		rid, rok := jsontextPeek(b)
		if id != rid || ok != rok {
			t.Fatalf("%q: scanner %q, %v; jsontext %q, %v", b, id, ok, rid, rok)
		}
	})
}

// BenchmarkPeekProposalID: the scanner against the reader it replaced.
func BenchmarkPeekProposalID(b *testing.B) {
	body := proposalWithPayload(`{"note":"` + strings.Repeat("x", 4000) + `","n":[1,2,3]}`)
	body = bytes.Replace(body, []byte(`"grant":null`), []byte(`"grant":null,"extra":1`), 1) // malformed: an unknown member
	for _, impl := range []struct {
		name string
		fn   func([]byte) (string, bool)
	}{{"scanner", schema.PeekProposalID}, {"jsontext", jsontextPeek}} {
		b.Run(impl.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, ok := impl.fn(body); !ok {
					b.Fatal("no id")
				}
			}
		})
	}
}
