package sim

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestSurvey (PORTCULLIS_SIM_SURVEY=n) runs seeds 1..n without stopping
// and counts the violations by kind, with the first seed of each: a long
// search that maps what the simulation finds. PORTCULLIS_SIM_BUG=n plants
// bug n (world.go's Bug); PORTCULLIS_SIM_UNBOUND=1 has the operator's
// command name the fingerprint only (finding 4, doc.go).
func TestSurvey(t *testing.T) {
	n, _ := strconv.ParseUint(os.Getenv("PORTCULLIS_SIM_SURVEY"), 10, 64)
	if n == 0 {
		t.Skip("PORTCULLIS_SIM_SURVEY=n runs seeds 1..n and counts the violations")
	}
	bug, _ := strconv.Atoi(os.Getenv("PORTCULLIS_SIM_BUG"))
	unbound := os.Getenv("PORTCULLIS_SIM_UNBOUND") != ""
	digits := regexp.MustCompile(`p-\d|\d+`)
	first, count := map[string]uint64{}, map[string]int{}
	for seed := uint64(1); seed <= n; seed++ {
		for _, v := range New(Config{Seed: seed, Bug: Bug(bug), UnboundOperator: unbound}).Run() {
			k := digits.ReplaceAllString(v, "#")
			if count[k] == 0 {
				first[k] = seed
			}
			count[k]++
		}
	}
	for k, c := range count {
		t.Logf("%6d× %s (first: seed %d)", c, k, first[k])
	}
}
