package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/go-json-experiment/json/jsontext"
)

// The schema files are hand-written but for their closed sets: the
// generator replaces the values at the JSON Pointers it owns and keeps
// every other byte. It writes them as the files are laid out (two-space
// indentation, one member or element a line, non-ASCII escaped).

// obj is a JSON object whose members keep their order.
type obj []member

type member struct {
	k string
	v any
}

// pointer is a JSON Pointer (RFC 6901) built from tokens.
func pointer(tokens ...string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteString("/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	return b.String()
}

// splice replaces the value at each pointer of with in data. Every pointer
// must name a value in data.
func splice(data []byte, with map[string]any) ([]byte, error) {
	at := map[string][2]int{}
	dec := jsontext.NewDecoder(bytes.NewReader(data))
	var walk func(ptr string) error
	walk = func(ptr string) error {
		if _, ok := with[ptr]; ok {
			v, err := dec.ReadValue()
			if err != nil {
				return err
			}
			end := int(dec.InputOffset())
			at[ptr] = [2]int{end - len(v), end}
			return nil
		}
		switch dec.PeekKind() {
		case '{':
			if _, err := dec.ReadToken(); err != nil {
				return err
			}
			for dec.PeekKind() != '}' {
				name, err := dec.ReadToken()
				if err != nil {
					return err
				}
				if err := walk(ptr + pointer(name.String())); err != nil {
					return err
				}
			}
			_, err := dec.ReadToken()
			return err
		case '[':
			if _, err := dec.ReadToken(); err != nil {
				return err
			}
			for i := 0; dec.PeekKind() != ']'; i++ {
				if err := walk(ptr + "/" + strconv.Itoa(i)); err != nil {
					return err
				}
			}
			_, err := dec.ReadToken()
			return err
		default:
			_, err := dec.ReadValue()
			return err
		}
	}
	if err := walk(""); err != nil {
		return nil, err
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return nil, fmt.Errorf("data after the top-level value")
	}
	ptrs := make([]string, 0, len(with))
	for p := range with {
		if _, ok := at[p]; !ok {
			return nil, fmt.Errorf("no value at %s to replace", p)
		}
		ptrs = append(ptrs, p)
	}
	// From the end, so that earlier offsets hold.
	slices.SortFunc(ptrs, func(a, b string) int { return at[b][0] - at[a][0] })
	out := slices.Clone(data)
	for _, p := range ptrs {
		r := at[p]
		line := bytes.LastIndexByte(out[:r[0]], '\n') + 1
		indent := len(out[line:]) - len(bytes.TrimLeft(out[line:], " "))
		var b bytes.Buffer
		emit(&b, with[p], indent/2)
		out = slices.Concat(out[:r[0]], b.Bytes(), out[r[1]:])
	}
	return out, nil
}

// emit writes v at nesting level (its first line is already indented).
func emit(b *bytes.Buffer, v any, level int) {
	pad := func(l int) { b.WriteString(strings.Repeat("  ", l)) }
	switch v := v.(type) {
	case obj:
		b.WriteString("{\n")
		for i, m := range v {
			pad(level + 1)
			quote(b, m.k)
			b.WriteString(": ")
			emit(b, m.v, level+1)
			if i < len(v)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		pad(level)
		b.WriteByte('}')
	case []any:
		b.WriteString("[\n")
		for i, e := range v {
			pad(level + 1)
			emit(b, e, level+1)
			if i < len(v)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		pad(level)
		b.WriteByte(']')
	case string:
		quote(b, v)
	case bool:
		b.WriteString(strconv.FormatBool(v))
	default:
		panic(fmt.Sprintf("gencodes: cannot emit %T", v))
	}
}

// quote writes s as a JSON string with every non-ASCII character escaped,
// as the schema files have them.
func quote(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r > 0x7e:
			for _, u := range utf16.Encode([]rune{r}) {
				fmt.Fprintf(b, `\u%04x`, u)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

func values(ns []named) []any {
	out := make([]any, len(ns))
	for i, n := range ns {
		out[i] = n.Value
	}
	return out
}

func enum(vs []any) obj { return obj{{"enum", vs}} }

// distinct are the codes of the rows keep accepts, each once, in table
// order.
func distinct(keep func(row) bool) []any {
	var out []any
	for _, r := range rows {
		if keep(r) && !slices.Contains(out, any(r.Code)) {
			out = append(out, r.Code)
		}
	}
	return out
}

// codeTable is a JSON Schema accepting exactly the (phase, code,
// dispatch_boundary) rows keep accepts: per phase, one branch per
// boundary, in table order.
func codeTable(desc string, keep func(row) bool) obj {
	var all []any
	for _, p := range phases {
		var branches []any
		var order []string
		for _, r := range rows {
			if r.Phase == p.Value && keep(r) && !slices.Contains(order, r.Boundary) {
				order = append(order, r.Boundary)
			}
		}
		for _, b := range order {
			cs := distinct(func(r row) bool { return r.Phase == p.Value && r.Boundary == b && keep(r) })
			branches = append(branches, obj{{"properties", obj{
				{"code", enum(cs)},
				{"dispatch_boundary", obj{{"const", b}}},
			}}})
		}
		if len(branches) == 0 {
			continue
		}
		all = append(all, obj{
			{"if", obj{{"properties", obj{{"phase", obj{{"const", p.Value}}}}}}},
			{"then", obj{{"anyOf", branches}}},
		})
	}
	return obj{{"description", desc}, {"allOf", all}}
}

// defsJSON replaces the closed sets of defs.json.
func defsJSON(old []byte) ([]byte, error) {
	every := func(row) bool { return true }
	outcome := func(r row) bool { return r.Kind != "" }
	// The event-only rows, named by code, or by phase and code where the
	// code has an outcome elsewhere.
	var eventOnly []string
	for _, c := range distinct(func(r row) bool { return r.Kind == "" }) {
		if len(distinct(func(r row) bool { return r.Code == c && r.Kind != "" })) == 0 {
			eventOnly = append(eventOnly, c.(string))
			continue
		}
		for _, r := range rows {
			if r.Code == c && r.Kind == "" {
				eventOnly = append(eventOnly, r.Phase+" "+r.Code)
			}
		}
	}
	d := func(name string) string { return pointer("$defs", name) }
	return splice(old, map[string]any{
		d("phase"):             enum(values(phases)),
		d("dispatch_boundary"): enum(values(boundaries)),
		d("code"): obj{
			{"description", "Every closed incident code (SPEC §2.5; generated from the code table, schema/internal/gencodes/table.go)."},
			{"enum", distinct(every)},
		},
		d("kind"):           enum(values(kindNamed())),
		d("effect_truth"):   enum(values(truths)),
		d("receipt_status"): enum(values(statuses)),
		d("incident_codes"): codeTable("The code table: which codes each phase has, and each code's dispatch_boundary there.", every),
		d("outcome_incident_codes"): codeTable("The codes an outcome's incident can have: the table less the event-only codes ("+
			strings.Join(eventOnly, ", ")+").", outcome),
	})
}

// outcomeJSON replaces, in each kind's branch of outcome.json, its effect
// truth and the codes its incidents may have.
func outcomeJSON(old []byte) ([]byte, error) {
	var doc struct {
		AllOf []struct {
			If struct {
				Properties struct {
					Kind struct {
						Const string `json:"const"`
					} `json:"kind"`
				} `json:"properties"`
			} `json:"if"`
			Then struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"then"`
		} `json:"allOf"`
	}
	if err := json.Unmarshal(old, &doc); err != nil {
		return nil, err
	}
	with := map[string]any{}
	found := map[string]bool{}
	for i, a := range doc.AllOf {
		k := a.If.Properties.Kind.Const
		idx := slices.IndexFunc(kinds, func(x kind) bool { return x.Value == k })
		if idx < 0 {
			continue
		}
		then := func(tokens ...string) string {
			return pointer(append([]string{"allOf", strconv.Itoa(i), "then", "properties"}, tokens...)...)
		}
		if _, ok := a.Then.Properties["effect_truth"]; ok {
			with[then("effect_truth", "const")] = kinds[idx].Truth
		}
		var inc struct {
			Items struct {
				Properties struct {
					Code struct {
						Enum []string `json:"enum"`
					} `json:"code"`
				} `json:"properties"`
			} `json:"items"`
		}
		if raw, ok := a.Then.Properties["incidents"]; ok && json.Unmarshal(raw, &inc) == nil && inc.Items.Properties.Code.Enum != nil {
			with[then("incidents", "items", "properties", "code", "enum")] = distinct(func(r row) bool { return r.Kind == k })
			found[k] = true
		}
	}
	// Every kind some row has must have its branch: a new one is written
	// by hand (its receipt and approval rules), then filled in here.
	for _, r := range rows {
		if r.Kind != "" && !found[r.Kind] {
			return nil, fmt.Errorf("no branch for kind %s with incidents/items/properties/code/enum: write one", r.Kind)
		}
	}
	return splice(old, with)
}
