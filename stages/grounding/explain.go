package grounding

import (
	"strconv"

	"github.com/portcullis/portcullis/schema"
)

// Rules of the grounding refusals, value-free.
const (
	RuleSubject      schema.Rule = "must be a string, not blank once normalized, of at most 1024 characters, without control characters"
	RuleScope        schema.Rule = "must equal /context/tenant/security_domain_ref exactly"
	RuleUnbounded    schema.Rule = "more candidates than grounding.max_candidates"
	RuleResource     schema.Rule = `must be an object with a non-blank string member "resource"`
	RuleNoMatch      schema.Rule = "no candidate's attributes.resource matches the subject once normalized"
	RuleNoCandidates schema.Rule = "no candidates: nothing can match the subject"
	RuleAmbiguous    schema.Rule = "matches the subject, and so does another candidate's"
	RuleRefused      schema.Rule = "refused by grounding"
)

// Explain says which fields earned a grounding verdict's code, for a
// proposal and the candidates Decide judged: one problem per field, in
// the terms of schema.Problem (a path, a rule, the code), never a value.
// A grounded verdict (code "") has none.
func Explain(p *schema.Proposal, candidates []schema.Candidate, code schema.Code) []schema.Problem {
	var out []schema.Problem
	add := func(path string, rule schema.Rule) {
		out = append(out, schema.Problem{Path: path, Rule: rule, Code: code, Offset: -1})
	}
	candidate := func(i int, rest string) string { return "/grounding/candidates/" + strconv.Itoa(i) + rest }
	switch code {
	case "":
	case schema.CodeProjectionUnavailable:
		add("/grounding/subject", RuleSubject)
	case schema.CodeGroundingScopeMismatch:
		add("/grounding/scope", RuleScope)
	case schema.CodeCandidatesUnbounded:
		add("/grounding/candidates", RuleUnbounded)
	case schema.CodeDiscriminatorMissing:
		for i := range candidates {
			if _, ok := Resource(candidates[i].Attributes); !ok {
				add(candidate(i, "/attributes"), RuleResource)
			}
		}
	case schema.CodeDiscriminatorMismatch:
		if len(candidates) == 0 {
			add("/grounding/candidates", RuleNoCandidates)
		} else {
			add("/grounding/subject", RuleNoMatch)
		}
	case schema.CodeDiscriminationAmbiguous:
		subject, _ := Subject(p.Grounding.Subject)
		for i := range candidates {
			if r, ok := Resource(candidates[i].Attributes); ok && r == subject {
				add(candidate(i, "/attributes/resource"), RuleAmbiguous)
			}
		}
	}
	if len(out) == 0 && code != "" {
		add("", RuleRefused) // a code Explain does not know: still one line
	}
	return out
}
