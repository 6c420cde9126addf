package metrics_test

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
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
	m := metrics.New([]string{"demo", "inventory"})
	problems, err := testutil.GatherAndLint(m.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

func TestSpecMetricsExistAndStartAtZero(t *testing.T) {
	m := metrics.New([]string{"demo"})
	got := names(t, m)
	for _, n := range []string{
		"actions_stage_messages_total", "actions_incidents_total", "actions_stage_duration_seconds",
		"actions_dispatches_total", "actions_reconciliation_attempts_total",
		"actions_indeterminate_actions", "actions_approvals_pending", "actions_dispatch_duration_seconds",
	} {
		if !got[n] {
			t.Errorf("metric %s missing", n)
		}
	}
	// Pre-created series: every stage × result, phase × code, provider × status.
	if n := testutil.CollectAndCount(m.StageMessages); n != len(subjects.Stages)*len(metrics.Results) {
		t.Errorf("stage message series = %d", n)
	}
	if n := testutil.CollectAndCount(m.Incidents); n != len(schema.Codes) {
		t.Errorf("incident series = %d, want %d", n, len(schema.Codes))
	}
	if n := testutil.CollectAndCount(m.Dispatches); n != len(schema.ReceiptStatuses) {
		t.Errorf("dispatch series = %d", n)
	}
}

var metricName = regexp.MustCompile(`\bactions_[a-z_]+`)

// The shipped dashboard queries only metrics that exist.
func TestDashboardQueriesExistingMetrics(t *testing.T) {
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(metrics.Dashboard, &dash); err != nil {
		t.Fatal(err)
	}
	got := names(t, metrics.New([]string{"demo"}))
	var used []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			refs := metricName.FindAllString(tg.Expr, -1)
			if len(refs) == 0 {
				t.Errorf("panel %q: no metric in %q", p.Title, tg.Expr)
			}
			for _, r := range refs {
				base := r
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(r, suf); ok && got[b] {
						base = b
					}
				}
				if !got[base] {
					t.Errorf("panel %q queries %s, which does not exist", p.Title, r)
				}
				used = append(used, base)
			}
		}
	}
	// Every Portcullis metric appears on the dashboard.
	for n := range got {
		if strings.HasPrefix(n, "actions_") && !slices.Contains(used, n) {
			t.Errorf("metric %s is not on the dashboard", n)
		}
	}
}
