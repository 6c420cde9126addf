package metrics_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/metrics"
)

// gathered is what a real Gather() of the registry returns: for each
// metric family, the label sets of its series.
type gathered map[string][]map[string]string

func gather(t *testing.T, m *metrics.Metrics) gathered {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := gathered{}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			ls := map[string]string{}
			for _, lp := range s.GetLabel() {
				ls[lp.GetName()] = lp.GetValue()
			}
			out[mf.GetName()] = append(out[mf.GetName()], ls)
		}
	}
	return out
}

// family maps a series name in a query to its metric family: histogram
// series carry a suffix.
func (g gathered) family(name string) (string, bool) {
	if _, ok := g[name]; ok {
		return name, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(name, suf); ok {
			if _, ok := g[b]; ok {
				return b, true
			}
		}
	}
	return "", false
}

// Labels every scraped series has besides its own: target labels added by
// Prometheus, and a histogram bucket's bound.
var scrapeLabels = []string{"job", "instance", "le"}

var (
	metricRef   = regexp.MustCompile(`\bactions_[a-z_]+`)
	selector    = regexp.MustCompile(`\b(actions_[a-z_]+)\{([^}]*)\}`)
	matcher     = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	grouping    = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	promqlLabel = regexp.MustCompile(`[a-zA-Z_][a-zA-Z0-9_]*`)
)

// checkExpr checks one PromQL expression against the registry: every
// Portcullis metric it names exists; every
// equality matcher names a label value some pre-created series has; every
// label it groups by exists on a metric it names. It returns the metric
// families used.
func (g gathered) checkExpr(t errorer, where, expr string) []string {
	t.Helper()
	refs := metricRef.FindAllString(expr, -1)
	var used []string
	labels := slices.Clone(scrapeLabels)
	for _, r := range refs {
		fam, ok := g.family(r)
		if !ok {
			t.Errorf("%s: queries %s, which does not exist", where, r)
			continue
		}
		used = append(used, fam)
		for _, s := range g[fam] {
			for l := range s {
				labels = append(labels, l)
			}
		}
	}
	for _, sel := range selector.FindAllStringSubmatch(expr, -1) {
		fam, ok := g.family(sel[1])
		if !ok {
			continue
		}
		for _, m := range matcher.FindAllStringSubmatch(sel[2], -1) {
			label, op, value := m[1], m[2], m[3]
			if slices.Contains(scrapeLabels, label) {
				continue
			}
			found := false
			for _, s := range g[fam] {
				if v, ok := s[label]; ok && (op != "=" || v == value) {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s: %s has no series with %s%s%q", where, fam, label, op, value)
			}
		}
	}
	for _, grp := range grouping.FindAllStringSubmatch(expr, -1) {
		for _, l := range promqlLabel.FindAllString(grp[1], -1) {
			if !slices.Contains(labels, l) {
				t.Errorf("%s: groups by %s, a label of none of %v", where, l, used)
			}
		}
	}
	return used
}

// errorer is the part of testing.TB checkExpr uses.
type errorer interface {
	Helper()
	Errorf(format string, args ...any)
}

// errors collects what checkExpr reports.
type errors []string

func (*errors) Helper() {}
func (e *errors) Errorf(format string, args ...any) {
	*e = append(*e, fmt.Sprintf(format, args...))
}

// The expression checker itself catches what it is for.
func TestCheckExprCatches(t *testing.T) {
	g := gather(t, metrics.New(pipeline(), []string{"demo"}))
	for _, expr := range []string{
		`sum(actions_no_such_metric)`,
		`sum(actions_incidents_total{code="NO_SUCH_CODE"})`,
		`sum by (stages) (actions_stage_messages_total)`,
		`sum(actions_incidents_total{nope="x"})`,
	} {
		var errs errors
		g.checkExpr(&errs, "test", expr)
		if len(errs) == 0 {
			t.Errorf("%q passed", expr)
		}
	}
	g.checkExpr(t, "test", `sum by (phase) (increase(actions_incidents_total{code="ADAPTER_UNAVAILABLE", job=~"$job"}[5m])) > 0`)
	g.checkExpr(t, "test", `histogram_quantile(0.99, sum by (le, stage) (rate(actions_stage_duration_seconds_bucket[5m])))`)
}
