// Package grounding is the second stage: it binds an admitted proposal to
// exactly one candidate target, or ends it with a bounded outcome, by the
// rules of SPEC §3 Grounding in their order. A grounded proposal travels on
// to authorization with its referent and intent fingerprint; candidate
// attributes go no further.
package grounding

import (
	"bytes"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/portcullis/portcullis/schema"
)

// MaxSubjectLen bounds grounding.subject in runes. A subject names one
// record ("payments-api (production)"); anything longer is malformed
// (PROJECTION_UNAVAILABLE), not a discriminator failure.
const MaxSubjectLen = 1024

// Binding is the grounding decision about one proposal: bound to exactly
// one target, or the incident why not.
type Binding struct {
	// Incident is the failure, or nil when grounded.
	Incident *schema.Incident
	// Referent is the one matching candidate's referent when grounded.
	Referent string
}

// Grounded reports whether the binding holds exactly one target.
func (v Binding) Grounded() bool { return v.Incident == nil }

func fail(code schema.Code) Binding {
	inc := schema.NewIncident(schema.PhaseGrounding, code)
	return Binding{Incident: &inc}
}

// Precheck applies rules 1 and 2, which need no candidates: a malformed
// subject is PROJECTION_UNAVAILABLE; a grounding scope other than the
// trusted context's security domain is GROUNDING_SCOPE_MISMATCH. The stage
// runs it before asking a candidate source, so that a proposal with a
// foreign scope never makes a source query.
func Precheck(p *schema.Proposal) *schema.Incident {
	if _, ok := Subject(p.Grounding.Subject); !ok {
		return fail(schema.CodeProjectionUnavailable).Incident
	}
	// Exactly the security domain, not authorization.scope_ref (the
	// separate policy scope), and not after any normalization.
	if p.Grounding.Scope != p.Context.Tenant.SecurityDomainRef {
		return fail(schema.CodeGroundingScopeMismatch).Incident
	}
	return nil
}

// Decide applies rules 1–6 to a proposal and its candidates (inline, or a
// candidate source's answer) with at most maxCandidates allowed. It has no
// side effects.
func Decide(p *schema.Proposal, candidates []schema.Candidate, maxCandidates int) Binding {
	// 1–2. Subject and scope.
	if inc := Precheck(p); inc != nil {
		return Binding{Incident: inc}
	}
	subject, _ := Subject(p.Grounding.Subject)
	// 3. The bound.
	if len(candidates) > maxCandidates {
		return fail(schema.CodeCandidatesUnbounded)
	}
	// 4. Every candidate its own resource: one without makes the whole set
	// unfit to discriminate, even if another candidate would match.
	resources := make([]string, len(candidates))
	for i := range candidates {
		r, ok := Resource(candidates[i].Attributes)
		if !ok {
			return fail(schema.CodeDiscriminatorMissing)
		}
		resources[i] = r
	}
	// 5–6. Normalized comparison; exactly one match grounds.
	match := -1
	for i, r := range resources {
		if r != subject {
			continue
		}
		if match >= 0 {
			return fail(schema.CodeDiscriminationAmbiguous)
		}
		match = i
	}
	if match < 0 {
		return fail(schema.CodeDiscriminatorMismatch)
	}
	return Binding{Referent: candidates[match].Referent}
}

// Subject returns grounding.subject normalized, or false when it is
// malformed: not a JSON string (absent and null included), empty after
// normalization, longer than MaxSubjectLen, or holding control characters
// other than white space.
func Subject(raw jsontext.Value) (string, bool) {
	if raw.Kind() != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	if utf8.RuneCountInString(s) > MaxSubjectLen {
		return "", false
	}
	n := Normalize(s)
	if n == "" {
		return "", false
	}
	for _, r := range n {
		if unicode.IsControl(r) {
			return "", false
		}
	}
	return n, true
}

// Resource returns a candidate's attributes.resource normalized, or false
// when the attributes are not an object, or have no member named exactly
// "resource" whose value is a string non-empty after normalization. No
// other attribute substitutes.
func Resource(attrs jsontext.Value) (string, bool) {
	// IsValid refuses duplicate names: "resource" is never ambiguous.
	if attrs.Kind() != '{' || !attrs.IsValid() {
		return "", false
	}
	dec := jsontext.NewDecoder(bytes.NewReader(attrs))
	if _, err := dec.ReadToken(); err != nil {
		return "", false
	}
	for dec.PeekKind() == '"' {
		name, err := dec.ReadToken()
		if err != nil {
			return "", false
		}
		isResource := name.String() == "resource"
		val, err := dec.ReadValue()
		if err != nil {
			return "", false
		}
		if !isResource {
			continue
		}
		if val.Kind() != '"' {
			return "", false
		}
		var s string
		if err := json.Unmarshal(val, &s); err != nil {
			return "", false
		}
		n := Normalize(s)
		return n, n != ""
	}
	return "", false
}
