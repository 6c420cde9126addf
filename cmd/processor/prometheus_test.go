package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.yaml.in/yaml/v3"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/subjects"
)

// EnvRequirePrometheus makes TestDashboardAndAlertsOnPrometheus fail,
// not skip, without a prometheus binary (.ci/run sets it; so does CI=true).
const EnvRequirePrometheus = "PORTCULLIS_REQUIRE_PROMETHEUS"

// prometheusBinary finds Prometheus (Debian's package: /usr/bin/prometheus).
func prometheusBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/prometheus"); err == nil {
		return "/usr/bin/prometheus"
	}
	msg := "prometheus not installed (Debian package prometheus; .ci/run installs it)"
	if os.Getenv("CI") == "true" || os.Getenv(EnvRequirePrometheus) == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// promQuery is one PromQL query through Prometheus's HTTP API.
type promQuery struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	} `json:"data"`
}

func promGet(t *testing.T, base, path string, v any) {
	t.Helper()
	res, err := http.Get(base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %d %s", path, res.StatusCode, b)
	}
}

func query(t *testing.T, base, expr string) promQuery {
	t.Helper()
	var q promQuery
	promGet(t, base, "/api/v1/query?query="+url.QueryEscape(expr), &q)
	return q
}

// seriesOf is what an alert expression selects before its threshold: the
// expression without a final comparison with a number, or absent()'s
// argument. An alert that does not fire selects nothing; what it compares
// must still exist.
var threshold = regexp.MustCompile(`^(?s)(.*?)\s*(>=|<=|==|!=|>|<)\s*-?[0-9.]+\s*$`)

func seriesOf(expr string) string {
	expr = strings.TrimSpace(expr)
	if inner, ok := strings.CutPrefix(expr, "absent("); ok {
		return strings.TrimSuffix(inner, ")")
	}
	if m := threshold.FindStringSubmatch(expr); m != nil {
		return m[1]
	}
	return expr
}

// dashboardVars fills the dashboard's variables as Grafana would for the
// job the test scrapes.
var dashboardVars = strings.NewReplacer(`$job`, "portcullis", `$instance`, ".+", `$__rate_interval`, "1m")

// The dashboard and the alert rules, proven on a real Prometheus (issue
// 34: they were checked against metric names only): a processor with the
// providers an operator meets (one that confirms, one whose effect stays
// unknown until reconciliation is exhausted, one nobody serves) and short
// timers runs a scripted load — confirmed, indeterminate, unreachable,
// timed-out and malformed proposals — while Prometheus scrapes it every
// second with metrics/alerts.yml loaded. Then every dashboard panel's
// query and every alert's expression is evaluated through Prometheus's
// HTTP API: each must parse, and each must select series (an alert's
// expression without its threshold: an alert that does not fire still
// compares something that exists); every rule's evaluation must be
// healthy.
func TestDashboardAndAlertsOnPrometheus(t *testing.T) {
	prom := prometheusBinary(t)
	dir := t.TempDir()
	natsAddr, metricsAddr, promAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	cfg := fmt.Sprintf(`nats {
  listen    = %q
  store_dir = "data/nats"
  auth      = false
}
store {
  dir = "data/store"
}
metrics {
  listen = %q
}
admission {
  allow_unsigned = true
}
approval {
  ttl = "2s"
}
reconciliation {
  interval     = "200ms"
  max_attempts = 1
}
provider "demo" {
  adapter = "fake"
}
provider "stuck" {
  adapter = "fake"
  script {
    dispatch  = ["indeterminate"]
    reconcile = ["indeterminate"]
  }
}
provider "inventory" {
  adapter           = "nats"
  unavailable_retry = "1s"
}
`, natsAddr, metricsAddr)
	if err := os.WriteFile(filepath.Join(dir, "p.hcl"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	startProcessor(t, dir, "processor started", "run", "--config", "p.hcl")

	alerts, err := filepath.Abs("../../metrics/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	promCfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - %q\nscrape_configs:\n  - job_name: portcullis\n    static_configs:\n      - targets: [%q]\n", alerts, metricsAddr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(promCfg), 0o600); err != nil {
		t.Fatal(err)
	}
	pcmd := exec.Command(prom, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	var plog testenv.LogBuffer
	pcmd.Stdout, pcmd.Stderr = &plog, &plog
	if err := pcmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pcmd.Process.Kill(); _ = pcmd.Wait() })
	base := "http://" + promAddr
	testenv.WaitFor(t, "Prometheus ready", func() bool {
		res, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})

	// The scripted load, unsigned as run --dev would take it.
	nc, err := nats.Connect("nats://" + natsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subj := subjects.Default()
	publish := func(body []byte) {
		t.Helper()
		if _, err := js.Publish(ctx, subj.Proposal("frontdesk"), body); err != nil {
			t.Fatal(err)
		}
	}
	proposal := func(id, provider string, quantity int, granted bool) []byte {
		m := testenv.Set(testenv.Lumber(id), "intent.provider", provider)
		testenv.Set(m, "intent.payload", map[string]any{"quantity": quantity})
		if granted {
			m = testenv.Granted(t, m, "sku-1001", time.Now())
		}
		return testenv.Body(t, m)
	}
	for i := range 5 {
		publish(proposal(fmt.Sprintf("ok-%d", i), "demo", i+1, true))
	}
	publish(proposal("stuck-1", "stuck", 1, true))                            // indeterminate, exhausted after one poll
	publish(proposal("nobody-1", "inventory", 1, true))                       // no connector: unreachable, then ADAPTER_UNAVAILABLE
	publish(proposal("wait-1", "demo", 99, false))                            // parked, then APPROVAL_TIMED_OUT
	publish([]byte(`{"schema":"actions.proposal.v1","proposal_id":"bad-1"}`)) // malformed

	// Until Prometheus has seen the load's effects, and a few scrapes after.
	for _, cond := range []string{
		`max(actions_indeterminate_exhausted{job="portcullis"}) >= 1`,
		`max(actions_provider_unreachable{job="portcullis",provider="inventory"}) == 1`,
		`sum(actions_incidents_total{job="portcullis",code="APPROVAL_TIMED_OUT"}) >= 1`,
		`sum(actions_incidents_total{job="portcullis",code="ADAPTER_UNAVAILABLE"}) >= 1`,
		`sum(actions_outcomes_total{job="portcullis",kind="CONFIRMED"}) >= 5`,
		`count_over_time(up{job="portcullis"}[1m]) >= 5`,
	} {
		var last promQuery
		if !testenv.Poll(45*time.Second, func() bool { last = query(t, base, cond); return len(last.Data.Result) > 0 }) {
			t.Fatalf("Prometheus never saw %s (last: %+v)\nprometheus log:\n%s", cond, last, plog.Bytes())
		}
	}

	check := func(where, expr string) {
		t.Helper()
		q := query(t, base, expr)
		switch {
		case q.Status != "success":
			t.Errorf("%s: %q: %s %s", where, expr, q.ErrorType, q.Error)
		case len(q.Data.Result) == 0:
			t.Errorf("%s: %q returns no series", where, expr)
		}
	}
	var dash struct {
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
	queries := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			check("panel "+p.Title, dashboardVars.Replace(tg.Expr))
			queries++
		}
	}

	raw, err := os.ReadFile(alerts)
	if err != nil {
		t.Fatal(err)
	}
	var rf struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rf); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			want[r.Alert] = true
			if q := query(t, base, r.Expr); q.Status != "success" {
				t.Errorf("alert %s: %q: %s %s", r.Alert, r.Expr, q.ErrorType, q.Error)
			}
			check("alert "+r.Alert+" (without its threshold)", seriesOf(r.Expr))
			queries++
		}
	}
	// Prometheus evaluated every rule, healthily.
	var rules struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name           string `json:"name"`
					Health         string `json:"health"`
					LastError      string `json:"lastError"`
					LastEvaluation string `json:"lastEvaluation"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	promGet(t, base, "/api/v1/rules", &rules)
	for _, g := range rules.Data.Groups {
		for _, r := range g.Rules {
			delete(want, r.Name)
			if r.Health != "ok" || r.LastError != "" || strings.HasPrefix(r.LastEvaluation, "0001-") {
				t.Errorf("rule %s: health %q, last error %q, last evaluated %s", r.Name, r.Health, r.LastError, r.LastEvaluation)
			}
		}
	}
	for name := range want {
		t.Errorf("rule %s is not loaded by Prometheus", name)
	}
	t.Logf("%d queries evaluated on Prometheus", queries)
}
