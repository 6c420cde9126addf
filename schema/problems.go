package schema

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Problem is one rule an input breaks: where, and which rule — never the
// value. It is safe to log and to show to whoever sent the input.
type Problem struct {
	// Path is an RFC 6901 JSON pointer to the offending value, "" for the
	// whole body. It is made only of member names the schema defines and
	// array indexes: where the input's own names begin (an unknown member,
	// a duplicate inside the payload or the attributes) it stops at the
	// enclosing value, so that no name chosen by the sender ever appears.
	Path string `json:"path"`
	// Rule is the rule broken, from a closed set of value-free texts.
	Rule Rule `json:"rule"`
	// Code is the admission code the problem earns on its own
	// (ADMISSION_MALFORMED, ADMISSION_CONTEXT_INCOMPLETE); empty for
	// inputs other than proposals.
	Code Code `json:"code,omitempty"`
	// Offset is the byte offset in the body where strict decoding stopped,
	// or -1 when the problem is about a decoded value.
	Offset int64 `json:"-"`
}

// Rule is a value-free description of a rule an input breaks.
type Rule string

// Rules of strict decoding (any input).
const (
	RuleTooLarge      Rule = "larger than admission.max_payload_bytes"
	RuleTooDeep       Rule = "nesting deeper than 64 levels"
	RuleSyntax        Rule = "not valid JSON"
	RuleTruncated     Rule = "JSON ends too early"
	RuleTrailing      Rule = "data after the JSON value"
	RuleUTF8          Rule = "invalid UTF-8"
	RuleDuplicate     Rule = "duplicate member"
	RuleDuplicateIn   Rule = "has a duplicate member name inside"
	RuleUnknownMember Rule = "has an unknown member (names are exact and case-sensitive)"
	RuleObject        Rule = "must be an object"
	RuleArray         Rule = "must be an array"
	RuleString        Rule = "must be a string"
	RuleInteger       Rule = "must be an integer"
	RuleIntegerRange  Rule = "integer out of range"
	RuleBoolean       Rule = "must be true or false"
	RuleType          Rule = "has the wrong JSON type"
)

// Rules of a proposal's formats (SPEC §2.1; docs/design.md, "Admission").
const (
	RuleRequired        Rule = "required"
	RuleBlank           Rule = "must not be blank"
	RuleSchemaProposal  Rule = `must be "` + SchemaProposal + `"`
	RuleProposalID      Rule = "must match ^[A-Za-z0-9_:-]{1,128}$"
	RuleName            Rule = "must match ^[a-z0-9][a-z0-9._:-]{0,127}$ once trimmed and lowercased"
	RuleEnvironment     Rule = "must be one of mock, test, live"
	RuleCurrency        Rule = "must match ^[A-Z]{3}$"
	RuleAmount          Rule = "must be an integer from 0 to 2^53-1"
	RuleExactNumbers    Rule = "holds a number no IEEE-754 double holds exactly"
	RuleRefLen          Rule = "longer than 512 bytes"
	RuleRequesterLen    Rule = "longer than 256 bytes"
	RuleSummaryLen      Rule = "longer than 2000 characters"
	RuleSummaryHidden   Rule = "holds a bidirectional control, another invisible format character or a control character other than tab and line breaks"
	RuleSingleLine      Rule = "must be one non-blank line of at most 512 characters"
	RuleEvidenceCount   Rule = "more than 64 entries"
	RuleCandidateSource Rule = "must match ^[a-z0-9_-]{1,64}$"
	RuleSourceExclusive Rule = "candidate_source and candidates exclude each other"
	RuleClassCount      Rule = "must name 1 to 6 classes"
	RuleClassKnown      Rule = "must name only legal_identity, birth_date, contact_details, accessibility_needs, loyalty_accounts, travel_documents"
	RuleClassRepeated   Rule = "names a class twice"
	RuleRecipient       Rule = "must be one non-blank line of at most 300 characters"
	RulePurpose         Rule = "must be one non-blank line of at most 500 characters"
	RuleDisclosureFrom  Rule = "must be one of user_profile, fictional_test_fixture"
)

// ValidationError is the error of strict decoding and of a proposal's
// checks: every problem found, value-free. Strict decoding stops at its
// first problem; the checks of a decoded proposal report all of theirs.
// It wraps ErrMalformed, or ErrTooLarge for a body over the limit.
type ValidationError struct {
	Problems []Problem
	err      error
}

func (e *ValidationError) Unwrap() error { return e.err }

// Error lists up to three problems (path: rule), value-free.
func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString(e.err.Error())
	for i, p := range e.Problems {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(e.Problems)-i)
			break
		}
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		b.WriteString(sep + p.String())
	}
	return b.String()
}

// Code is the admission code of the whole input: ADMISSION_MALFORMED when
// any problem is malformed (admission checks formats first), else the
// first problem's code.
func (e *ValidationError) Code() Code {
	for _, p := range e.Problems {
		if p.Code == CodeAdmissionMalformed {
			return p.Code
		}
	}
	if len(e.Problems) > 0 {
		return e.Problems[0].Code
	}
	return ""
}

// String is "path: rule", the path "(body)" when it is the whole body.
func (p Problem) String() string {
	path := p.Path
	if path == "" {
		path = "(body)"
	}
	return path + ": " + string(p.Rule)
}

// invalid makes a ValidationError of problems, each given code.
func invalid(base error, code Code, problems ...Problem) *ValidationError {
	for i := range problems {
		problems[i].Code = code
	}
	return &ValidationError{Problems: problems, err: base}
}

// decodeProblem turns the decoder's error into a value-free problem about
// a value of type t. The decoder's own message can quote the input (an
// invalid character, a member name); nothing of it is kept but its kind.
func decodeProblem(err error, t reflect.Type) Problem {
	var se *json.SemanticError
	if errors.As(err, &se) {
		p := Problem{Offset: se.ByteOffset}
		path, _ := safePointer(t, se.JSONPointer)
		p.Path = path
		switch {
		case errors.Is(se.Err, json.ErrUnknownName):
			// The path stops before the unknown name: it is the input's.
			p.Rule = RuleUnknownMember
		case errors.Is(se.Err, strconv.ErrRange):
			p.Rule = RuleIntegerRange
		default:
			p.Rule = typeRule(se.GoType)
		}
		return p
	}
	var sy *jsontext.SyntacticError
	if errors.As(err, &sy) {
		path, exact := safePointer(t, sy.JSONPointer)
		p := Problem{Path: path, Offset: sy.ByteOffset, Rule: RuleSyntax}
		msg := sy.Err.Error()
		switch {
		case errors.Is(sy.Err, jsontext.ErrDuplicateName) && exact:
			p.Rule = RuleDuplicate
		case errors.Is(sy.Err, jsontext.ErrDuplicateName):
			p.Rule = RuleDuplicateIn
		case errors.Is(sy.Err, io.ErrUnexpectedEOF):
			p.Rule = RuleTruncated
		case msg == "invalid UTF-8":
			p.Rule = RuleUTF8
		case strings.HasSuffix(msg, "after top-level value"):
			p.Rule = RuleTrailing
		}
		return p
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return Problem{Rule: RuleTruncated, Offset: -1}
	}
	return Problem{Rule: RuleSyntax, Offset: -1}
}

// typeRule says what JSON a Go type takes.
func typeRule(t reflect.Type) Rule {
	if t == nil {
		return RuleType
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return RuleString
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return RuleInteger
	case reflect.Bool:
		return RuleBoolean
	case reflect.Struct, reflect.Map:
		return RuleObject
	case reflect.Slice, reflect.Array:
		return RuleArray
	}
	return RuleType
}

var rawValueType = reflect.TypeFor[jsontext.Value]()

// safePointer keeps the longest prefix of ptr that names only members of
// t's JSON form (json tags) and array indexes, and reports whether that is
// all of ptr. Inside raw values (the payload, attributes, the subject) and
// at a name t does not define, the input's own names begin: it stops there.
func safePointer(t reflect.Type, ptr jsontext.Pointer) (string, bool) {
	var out jsontext.Pointer
	for tok := range ptr.Tokens() {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case t == nil || t == rawValueType:
			return string(out), false
		case t.Kind() == reflect.Struct:
			f, ok := jsonField(t, tok)
			if !ok {
				return string(out), false
			}
			t = f.Type
		case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
			if _, err := strconv.ParseUint(tok, 10, 31); err != nil || (len(tok) > 1 && tok[0] == '0') {
				return string(out), false
			}
			t = t.Elem()
		default:
			return string(out), false
		}
		out = out.AppendToken(tok)
	}
	return string(out), true
}

// jsonField finds the struct field whose JSON name is exactly name.
func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, ok := f.Tag.Lookup("json")
		if !ok || !f.IsExported() {
			continue
		}
		if n, _, _ := strings.Cut(tag, ","); n == name && n != "-" {
			return f, true
		}
	}
	return reflect.StructField{}, false
}
