package metrics_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/portcullis/portcullis/metrics"
)

// runbookBase is where every alert's runbook_url points: docs/runbook.md, at
// the anchor runbook-<alert name in lower case>.
const runbookBase = "https://github.com/portcullis/portcullis/blob/main/docs/runbook.md#runbook-"

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		InputSeries []struct {
			Series string `yaml:"series"`
		} `yaml:"input_series"`
		AlertRuleTest []struct {
			Alertname string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// decodeYAML decodes a file; strict: no field v does not have.
func decodeYAML(t *testing.T, path string, v any, strict bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(strict)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func alertRules(t *testing.T) []rule {
	t.Helper()
	var rf ruleFile
	decodeYAML(t, "alerts.yml", &rf, true)
	if len(rf.Groups) != 1 || rf.Groups[0].Name != "portcullis" {
		t.Fatalf("want one group named portcullis, got %d", len(rf.Groups))
	}
	return rf.Groups[0].Rules
}

// upSelector is the only way the rules may use Prometheus's own `up`: the
// scrape job of the processors is "portcullis".
const upSelector = `up{job="portcullis"}`

// Every alert queries only metrics, label values and labels that exist in
// a real Gather() of the registry, and carries a severity, a summary, a
// description and its runbook's anchor in docs/runbook.md.
func TestAlertsQueryExistingMetrics(t *testing.T) {
	g := gather(t, metrics.New(pipeline(), []string{"demo"}))
	seen := map[string]bool{}
	for _, r := range alertRules(t) {
		where := "alert " + r.Alert
		if r.Alert == "" || r.Record != "" {
			t.Errorf("rule %q: only alerting rules belong here", r.Record)
			continue
		}
		if seen[r.Alert] {
			t.Errorf("%s: defined twice", where)
		}
		seen[r.Alert] = true
		if !strings.HasPrefix(r.Alert, "Portcullis") {
			t.Errorf("%s: name does not start with Portcullis", where)
		}
		used := g.checkExpr(t, where, r.Expr)
		withoutUp := strings.ReplaceAll(r.Expr, upSelector, "")
		if strings.Contains(withoutUp, "up{") || strings.Contains(withoutUp, "up ") {
			t.Errorf("%s: uses up other than as %s: %q", where, upSelector, r.Expr)
		}
		if len(used) == 0 && withoutUp == r.Expr {
			t.Errorf("%s: no Portcullis metric and no %s in %q", where, upSelector, r.Expr)
		}
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q, want critical or warning", where, s)
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s: no %s", where, a)
			}
		}
		if want := runbookBase + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %q", where, r.Annotations["runbook_url"], want)
		}
	}
	for _, must := range []string{`actions_indeterminate_actions`, `result="gave_up"`, `actions_provider_unreachable`, `actions_indeterminate_exhausted`, `code="APPROVAL_TIMED_OUT"`, `actions_dispatch_duration_seconds_bucket`,
		`actions_approvals_pending`, `actions_consumer_pending_messages`, `actions_ready`, upSelector, "absent(",
		`code="INTERNAL_MESSAGE_REJECTED"`, `code="ADMISSION_UNAUTHENTICATED"`} {
		found := false
		for _, r := range alertRules(t) {
			found = found || strings.Contains(r.Expr, must)
		}
		if !found {
			t.Errorf("no alert on %s", must)
		}
	}
}

// alerts_test.yml tests every alert both firing and not firing, on series
// that look like the real ones.
func TestAlertTestsCoverEveryAlert(t *testing.T) {
	var rt ruleTests
	decodeYAML(t, "alerts_test.yml", &rt, false)
	if !slices.Contains(rt.RuleFiles, "alerts.yml") {
		t.Errorf("rule_files %v lacks alerts.yml", rt.RuleFiles)
	}
	g := gather(t, metrics.New(pipeline(), []string{"demo", "inventory", "payments"}))
	fires, silent := map[string]bool{}, map[string]bool{}
	for i, tc := range rt.Tests {
		for _, s := range tc.InputSeries {
			if strings.HasPrefix(s.Series, "up{") {
				continue
			}
			if len(g.checkExpr(t, "alerts_test.yml series", s.Series)) == 0 {
				t.Errorf("test %d: series %q is not a Portcullis metric", i, s.Series)
			}
		}
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	names := map[string]bool{}
	for _, r := range alertRules(t) {
		names[r.Alert] = true
		if !fires[r.Alert] {
			t.Errorf("%s: no test where it fires", r.Alert)
		}
		if !silent[r.Alert] {
			t.Errorf("%s: no test where it does not fire", r.Alert)
		}
	}
	for n := range fires {
		if !names[n] {
			t.Errorf("alerts_test.yml tests %s, which alerts.yml does not define", n)
		}
	}
}

// With promtool installed (CI installs it; see .ci/run), the rules check
// and their unit tests pass here too.
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian package prometheus)")
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// Every alert's runbook_url names a runbook section docs/runbook.md has.
func TestEveryAlertHasARunbook(t *testing.T) {
	readme, err := os.ReadFile("../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range alertRules(t) {
		heading := "## Runbook: " + r.Alert
		if !strings.Contains(string(readme), "\n"+heading+"\n") {
			t.Errorf("docs/runbook.md lacks %q", heading)
		}
		anchor := "#runbook-" + strings.ToLower(r.Alert)
		if url := r.Annotations["runbook_url"]; !strings.HasSuffix(url, anchor) {
			t.Errorf("%s: runbook_url %q does not end in %s", r.Alert, url, anchor)
		}
	}
}
