package main

import (
	"bytes"
	"errors"
	"slices"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/admission"
)

// Rules `check` words itself: a member of the checker's own file is
// named in its path, which the processor's value-free log never does.
const (
	ruleUnknownNamed schema.Rule = "unknown member (names are exact and case-sensitive)"
)

// maxRepairs bounds the decode-and-repair rounds of everyProblem (one per
// malformed member) and the duplicates it lists: a body with more gets the
// first ones.
const maxRepairs = 256

// everyProblem lists every problem of a proposal body that strict decoding
// refused, where admission (and its log) stops at the first: strict
// decoding fails at one member, so each round drops that member (an
// unknown or duplicate one) or blanks its value (one of the wrong type) in
// a copy of the body and decodes again, until the copy decodes; then the
// checks of a decoded proposal run on it, and add what they find outside
// the members already reported. Members are named by their JSON pointers,
// unknown ones included (the file is the checker's own), and located by
// line and column in body. A body that is not JSON at all, too large or
// too deep has the one problem admission gives it (first).
func everyProblem(body []byte, maxBytes int, first schema.Problem) []schema.Problem {
	if !repairable(first.Rule) {
		return []schema.Problem{first}
	}
	tree, at, problems, err := parseTree(body)
	if err != nil {
		// Not JSON after all (the decoder refused a member before it
		// reached the end): that too.
		var v any
		var ve *schema.ValidationError
		if errors.As(schema.Decode(body, &v), &ve) && len(ve.Problems) == 1 && ve.Problems[0].Rule != first.Rule {
			syntax := ve.Problems[0]
			syntax.Code = first.Code
			return []schema.Problem{first, syntax}
		}
		return []schema.Problem{first}
	}
	reported := func(path string) bool {
		return slices.ContainsFunc(problems, func(p schema.Problem) bool {
			return path == p.Path || strings.HasPrefix(path, p.Path+"/")
		})
	}
	repaired := map[jsontext.Pointer]bool{}
	for range maxRepairs {
		doc := tree.encode()
		var p schema.Proposal
		err := json.Unmarshal(doc, &p, json.RejectUnknownMembers(true))
		if err == nil {
			v := admission.Offline(doc, maxBytes)
			for _, pr := range v.Problems {
				if !reported(pr.Path) {
					problems = append(problems, pr)
				}
			}
			return problems
		}
		var se *json.SemanticError
		if !errors.As(err, &se) {
			break // not a member's problem: what was found so far
		}
		ptr := se.JSONPointer
		rule := ruleUnknownNamed
		if !errors.Is(se.Err, json.ErrUnknownName) {
			// schema's own rule for the value (it decodes the same copy
			// and stops at the same member).
			rule = schema.RuleType
			if _, derr := schema.DecodeProposal(doc, 0); derr != nil {
				var ve *schema.ValidationError
				if errors.As(derr, &ve) && len(ve.Problems) == 1 {
					rule = ve.Problems[0].Rule
				}
			}
		}
		if repaired[ptr] {
			break // repairing did not move on: stop rather than loop
		}
		repaired[ptr] = true
		// Where admission's decoder stops: at an unknown name, at a value
		// of the wrong type.
		off := at[ptr].value
		if rule == ruleUnknownNamed {
			off = at[ptr].name
		}
		problems = append(problems, schema.Problem{Path: string(ptr), Rule: rule, Code: schema.CodeAdmissionMalformed, Offset: off})
		if !tree.repair(ptr, rule == ruleUnknownNamed) {
			break // the whole body is of the wrong type
		}
	}
	if len(problems) == 0 {
		return []schema.Problem{first}
	}
	return problems
}

// repairable says whether decoding can go on past a problem: a member's
// (a duplicate, an unknown name, a value of the wrong type), not the
// body's (syntax, size, depth).
func repairable(r schema.Rule) bool {
	switch r {
	case schema.RuleDuplicate, schema.RuleDuplicateIn, schema.RuleUnknownMember, schema.RuleObject,
		schema.RuleArray, schema.RuleString, schema.RuleInteger, schema.RuleIntegerRange, schema.RuleBoolean, schema.RuleType:
		return true
	}
	return false
}

// jnode is a JSON value kept as written, member order and all, minus
// duplicate names: an object's names and values, an array's elements, or
// a scalar's raw text.
type jnode struct {
	kind  jsontext.Kind // '{', '[' or a scalar's kind
	names []string
	vals  []*jnode
	raw   jsontext.Value
}

// location is where a member's name and value start in a body (an array
// element's: its value, twice).
type location struct{ name, value int64 }

// parseTree reads body into a tree, dropping each duplicate member (the
// first one stays) with a problem for it. at locates every member and
// array element by its pointer.
func parseTree(body []byte) (*jnode, map[jsontext.Pointer]location, []schema.Problem, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(body), jsontext.AllowDuplicateNames(true))
	at := map[jsontext.Pointer]location{}
	var dups []schema.Problem
	// start is where the next token begins: after the last one and any
	// white space and separators.
	start := func() int64 {
		off := dec.InputOffset()
		for off < int64(len(body)) && strings.IndexByte(" \t\r\n,:", body[off]) >= 0 {
			off++
		}
		return off
	}
	var read func() (*jnode, error)
	read = func() (*jnode, error) {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, err
		}
		switch k := tok.Kind(); k {
		case '{':
			n := &jnode{kind: k}
			names := map[string]bool{} // linear in the members, whatever their number
			for dec.PeekKind() != '}' {
				off := start()
				tok, err := dec.ReadToken()
				if err != nil {
					return nil, err
				}
				name, ptr := tok.String(), dec.StackPointer() // before the next read voids tok
				valueAt := start()
				v, err := read()
				if err != nil {
					return nil, err
				}
				if names[name] {
					if len(dups) < maxRepairs {
						dups = append(dups, schema.Problem{Path: string(ptr), Rule: schema.RuleDuplicate, Code: schema.CodeAdmissionMalformed, Offset: off})
					}
					continue
				}
				names[name] = true
				if _, seen := at[ptr]; !seen {
					at[ptr] = location{name: off, value: valueAt}
				}
				n.names, n.vals = append(n.names, name), append(n.vals, v)
			}
			_, err := dec.ReadToken()
			return n, err
		case '[':
			n := &jnode{kind: k}
			for dec.PeekKind() != ']' {
				off := start()
				v, err := read()
				if err != nil {
					return nil, err
				}
				if ptr := dec.StackPointer(); ptr != "" {
					if _, seen := at[ptr]; !seen {
						at[ptr] = location{name: off, value: off}
					}
				}
				n.vals = append(n.vals, v)
			}
			_, err := dec.ReadToken()
			return n, err
		default:
			var v jsontext.Value
			switch k {
			case '"':
				v, err = jsontext.AppendQuote(nil, tok.String())
			default:
				v = jsontext.Value(tok.String())
			}
			return &jnode{kind: k, raw: v}, err
		}
	}
	at[""] = location{name: start(), value: start()}
	root, err := read()
	if err != nil {
		return nil, nil, nil, err
	}
	return root, at, dups, nil
}

// encode writes the tree as JSON.
func (n *jnode) encode() []byte {
	var b []byte
	var write func(*jnode)
	write = func(n *jnode) {
		switch n.kind {
		case '{':
			b = append(b, '{')
			for i, name := range n.names {
				if i > 0 {
					b = append(b, ',')
				}
				b, _ = jsontext.AppendQuote(b, name)
				b = append(b, ':')
				write(n.vals[i])
			}
			b = append(b, '}')
		case '[':
			b = append(b, '[')
			for i, v := range n.vals {
				if i > 0 {
					b = append(b, ',')
				}
				write(v)
			}
			b = append(b, ']')
		default:
			b = append(b, n.raw...)
		}
	}
	write(n)
	return b
}

// repair removes the member at ptr (drop) or makes its value null, which
// strict decoding takes for the zero value of any type. It reports false
// when ptr names nothing it can change (the root, or a path not in the
// tree).
func (n *jnode) repair(ptr jsontext.Pointer, drop bool) bool {
	if ptr == "" {
		return false
	}
	parent := n
	var tokens []string
	for tok := range ptr.Tokens() {
		tokens = append(tokens, tok)
	}
	for _, tok := range tokens[:len(tokens)-1] {
		i := parent.index(tok)
		if i < 0 {
			return false
		}
		parent = parent.vals[i]
	}
	i := parent.index(tokens[len(tokens)-1])
	switch {
	case i < 0:
		return false
	case drop && parent.kind == '{':
		parent.names = slices.Delete(parent.names, i, i+1)
		parent.vals = slices.Delete(parent.vals, i, i+1)
	default:
		parent.vals[i] = &jnode{kind: 'n', raw: jsontext.Value("null")}
	}
	return true
}

// index is the position of an object's member or an array's element.
func (n *jnode) index(tok string) int {
	switch n.kind {
	case '{':
		return slices.Index(n.names, tok)
	case '[':
		i := 0
		for _, c := range tok {
			if c < '0' || c > '9' {
				return -1
			}
			i = i*10 + int(c-'0')
			if i >= len(n.vals) {
				return -1
			}
		}
		if tok == "" {
			return -1
		}
		return i
	}
	return -1
}
