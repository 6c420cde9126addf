package metrics_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/metrics"
	buildversion "github.com/portcullis/portcullis/metrics/version"
	"github.com/portcullis/portcullis/schema"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func names(t *testing.T, m *metrics.Metrics) map[string]bool {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, mf := range mfs {
		out[mf.GetName()] = true
	}
	return out
}

func TestLint(t *testing.T) {
	m := metrics.New(pipeline(), []string{"demo", "inventory"})
	problems, err := testutil.GatherAndLint(m.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// pipeline is the stage names of the processor's pipeline table: metrics
// pre-creates the series of the stages it is given, and the dashboard and
// alerts are checked against those.
func pipeline() []string {
	var out []string
	for _, s := range engine.Pipeline() {
		out = append(out, s.Name)
	}
	return out
}

func TestSpecMetricsExistAndStartAtZero(t *testing.T) {
	m := metrics.New(pipeline(), []string{"demo"})
	got := names(t, m)
	for _, n := range []string{
		"actions_stage_messages_total", "actions_incidents_total", "actions_stage_duration_seconds",
		"actions_dispatches_total", "actions_reconciliation_attempts_total",
		"actions_indeterminate_actions", "actions_approvals_pending", "actions_dispatch_duration_seconds",
		"actions_outcomes_total", "actions_consumer_pending_messages", "actions_consumer_ack_pending_messages",
		"actions_build_info", "actions_ready",
	} {
		if !got[n] {
			t.Errorf("metric %s missing", n)
		}
	}
	// Pre-created series: every stage × result, phase × code, provider × status.
	if n := testutil.CollectAndCount(m.StageMessages); n != len(pipeline())*len(metrics.Results()) {
		t.Errorf("stage message series = %d", n)
	}
	if n := testutil.CollectAndCount(m.Incidents); n != len(schema.Codes()) {
		t.Errorf("incident series = %d, want %d", n, len(schema.Codes()))
	}
	if n := testutil.CollectAndCount(m.Dispatches); n != len(schema.Statuses()) {
		t.Errorf("dispatch series = %d", n)
	}
	if n := testutil.CollectAndCount(m.Outcomes); n != len(schema.Kinds()) {
		t.Errorf("outcome series = %d, want one per kind (%d)", n, len(schema.Kinds()))
	}
	for _, st := range pipeline() {
		for _, g := range []*prometheus.GaugeVec{m.ConsumerPending, m.ConsumerAckPending} {
			if v := testutil.ToFloat64(g.WithLabelValues(st)); v != 0 {
				t.Errorf("consumer gauge of %s starts at %v", st, v)
			}
		}
	}
	if n := testutil.CollectAndCount(m.ConsumerPending); n != len(pipeline()) {
		t.Errorf("consumer pending series = %d", n)
	}
}

// actions_build_info is one series, 1, labelled with this binary's build.
func TestBuildInfo(t *testing.T) {
	m := metrics.New(nil, nil)
	version, revision, goVersion := metrics.Build()
	if goVersion != runtime.Version() || version == "" || revision == "" {
		t.Errorf("Build() = %q, %q, %q", version, revision, goVersion)
	}
	// The same words as `processor version`: a test binary records no
	// module version, which both call "devel", never Go's "(devel)".
	if v := buildversion.Get(); version != v.Version || revision != v.Revision || version == "(devel)" {
		t.Errorf("Build() = %q, %q; processor version says %q, %q", version, revision, v.Version, v.Revision)
	}
	want := fmt.Sprintf(`
# HELP actions_build_info Always 1; labelled with the processor's module version, VCS revision and Go version.
# TYPE actions_build_info gauge
actions_build_info{go_version=%q,revision=%q,version=%q} 1
`, goVersion, revision, version)
	if err := testutil.CollectAndCompare(m.BuildInfo, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// actions_ready is 0 until readiness is wired, then follows it at each
// scrape.
func TestReady(t *testing.T) {
	m := metrics.New(nil, nil)
	if v := testutil.ToFloat64(m.Ready); v != 0 {
		t.Errorf("actions_ready = %v before SetReadiness", v)
	}
	var ready atomic.Bool
	m.SetReadiness(ready.Load)
	for _, want := range []bool{false, true, false} {
		ready.Store(want)
		got := testutil.ToFloat64(m.Ready) == 1
		if got != want {
			t.Errorf("actions_ready = %v, readiness %v", got, want)
		}
	}
}

// actions_approvals_pending is a gauge read from the approvals store's
// count at each scrape: 0 until it is wired, never kept by hand.
func TestApprovalsPending(t *testing.T) {
	m := metrics.New(nil, nil)
	want := func(n int) string {
		return fmt.Sprintf(`
# HELP actions_approvals_pending Proposals parked waiting for a grant.
# TYPE actions_approvals_pending gauge
actions_approvals_pending %d
`, n)
	}
	if err := testutil.CollectAndCompare(m.ApprovalsPending, strings.NewReader(want(0))); err != nil {
		t.Errorf("before SetApprovalsPending: %v", err)
	}
	var n atomic.Int64
	m.SetApprovalsPending(func() int { return int(n.Load()) })
	for _, v := range []int{3, 0, 51} {
		n.Store(int64(v))
		if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want(v)), "actions_approvals_pending"); err != nil {
			t.Errorf("count %d: %v", v, err)
		}
	}
}

// The shipped dashboard queries only metrics, label values and labels that
// exist, scoped to the $job and $instance variables, and shows every
// Portcullis metric.
func TestDashboardQueriesExistingMetrics(t *testing.T) {
	var dash struct {
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(metrics.Dashboard(), &dash); err != nil {
		t.Fatal(err)
	}
	g := gather(t, metrics.New(pipeline(), []string{"demo"}))
	vars := map[string]bool{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = true
		if v.Type == "query" && len(g.checkExpr(t, "variable "+v.Name, v.Definition)) == 0 {
			t.Errorf("variable %s: no Portcullis metric in %q", v.Name, v.Definition)
		}
	}
	for _, v := range []string{"datasource", "job", "instance"} {
		if !vars[v] {
			t.Errorf("no $%s variable", v)
		}
	}
	var used []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			where := "panel " + strconv.Quote(p.Title)
			u := g.checkExpr(t, where, tg.Expr)
			if len(u) == 0 {
				t.Errorf("%s: no Portcullis metric in %q", where, tg.Expr)
			}
			used = append(used, u...)
			// Every selector is scoped to the chosen job and instances.
			if n, sel := len(metricRef.FindAllString(tg.Expr, -1)), selector.FindAllStringSubmatch(tg.Expr, -1); len(sel) != n {
				t.Errorf("%s: a metric without matchers in %q", where, tg.Expr)
			}
			for _, sel := range selector.FindAllStringSubmatch(tg.Expr, -1) {
				for _, want := range []string{`job=~"$job"`, `instance=~"$instance"`} {
					if !strings.Contains(sel[2], want) {
						t.Errorf("%s: %s without %s", where, sel[1], want)
					}
				}
			}
		}
	}
	// Every Portcullis metric appears on the dashboard.
	for n := range g {
		if strings.HasPrefix(n, "actions_") && !slices.Contains(used, n) {
			t.Errorf("metric %s is not on the dashboard", n)
		}
	}
}
