package grounding

import (
	"strings"
	"testing"

	"github.com/portcullis/portcullis/schema"
)

// Every verdict Decide can give is explained by at least one field, with
// the verdict's code, and never with a value.
func TestExplain(t *testing.T) {
	one := res("sku-1001", "Lumber: Cedar-8ft-GradeA")
	cases := []struct {
		p     *schema.Proposal
		paths []string
	}{
		{proposal(`42`, domain, one), []string{"/grounding/subject"}},
		{proposal(seedSubject, scope, one), []string{"/grounding/scope"}},
		{proposal(seedSubject, domain, one, one), []string{"/grounding/candidates"}}, // max 1 below
		{proposal(seedSubject, domain, one, cand("x", `{"Resource":"lumber: cedar-8ft-gradea"}`)), []string{"/grounding/candidates/1/attributes"}},
		{proposal(seedSubject, domain, res("x", "pine")), []string{"/grounding/subject"}},
		{proposal(seedSubject, domain), []string{"/grounding/candidates"}},
		{proposal(seedSubject, domain, one, res("x", "pine"), res("y", " lumber:  CEDAR-8FT-GRADEA")), []string{"/grounding/candidates/0/attributes/resource", "/grounding/candidates/2/attributes/resource"}},
		{proposal(seedSubject, domain, one), nil},
	}
	for i, c := range cases {
		max := 32
		if i == 2 {
			max = 1
		}
		v := Decide(c.p, c.p.Grounding.Candidates, max)
		var code schema.Code
		if v.Incident != nil {
			code = v.Incident.Code
		}
		var paths []string
		for _, pr := range Explain(c.p, c.p.Grounding.Candidates, code) {
			if pr.Code != code || pr.Rule == "" || strings.Contains(string(pr.Rule), "umber") {
				t.Errorf("%d: problem %+v", i, pr)
			}
			paths = append(paths, pr.Path)
		}
		if strings.Join(paths, " ") != strings.Join(c.paths, " ") {
			t.Errorf("%d (%s): paths %q, want %q", i, code, paths, c.paths)
		}
	}
}
