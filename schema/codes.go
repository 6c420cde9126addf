package schema

// The closed sets of SPEC §2.4 and §2.5 are typed strings, as
// jetstream.AckPolicy is: a phase cannot be passed where a code is
// expected, and the wire form is the string.
//
// Their values, lists and tables are generated from the one code table,
// schema/internal/gencodes/table.go, into codes_gen.go (and into the JSON
// Schemas' enums and package metrics' label sets): edit the table, then
// run `go generate ./schema/...`.

//go:generate go run ./internal/gencodes

// Phase names where an incident arose (SPEC §2.5).
type Phase string

// Boundary says whether a provider may have seen the action.
type Boundary string

// Kind is an outcome kind (SPEC §2.4).
type Kind string

// EffectTruth says what is known about an action's effect (SPEC §2.4).
type EffectTruth string

// Valid reports whether k is one of the closed kinds.
func (k Kind) Valid() bool { return k.EffectTruth() != "" }

// Code is a closed incident code (SPEC §2.5).
type Code string

// CodeInfo is one row of the closed code table: a code in a phase, the
// outcome kind it produces (empty for event-only codes) and its boundary.
type CodeInfo struct {
	Phase    Phase
	Code     Code
	Kind     Kind // "" for event-only codes
	Boundary Boundary
}

// Codes returns the closed code table of SPEC §2.5 plus the additions
// beyond it (a new slice each call). A code may appear in more than one
// phase.
func Codes() []CodeInfo { return append([]CodeInfo(nil), codes...) }

type phaseCode struct {
	phase Phase
	code  Code
}

var codeIndex = func() map[phaseCode]CodeInfo {
	m := make(map[phaseCode]CodeInfo, len(codes))
	for _, c := range codes {
		m[phaseCode{c.Phase, c.Code}] = c
	}
	return m
}()

// LookupCode returns the table row for a code in a phase.
func LookupCode(phase Phase, code Code) (CodeInfo, bool) {
	c, ok := codeIndex[phaseCode{phase, code}]
	return c, ok
}

// PhaseOf is the phase in which a code appears when that is unique among
// prefer (for a denial code: authorization or disclosure); "" if none.
func PhaseOf(code Code, prefer ...Phase) Phase {
	for _, p := range prefer {
		if _, ok := LookupCode(p, code); ok {
			return p
		}
	}
	return ""
}

// Valid reports whether p is one of the closed phases.
func (p Phase) Valid() bool {
	for _, q := range Phases() {
		if p == q {
			return true
		}
	}
	return false
}
