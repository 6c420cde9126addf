package metrics_test

import (
	"bufio"
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/portcullis/portcullis/metrics"
)

// Every series of the named stages and providers exists from the start,
// at zero, so an alert on a rate never waits for a first event; a
// scrape shows them under their exact names and closed label values.
func ExampleNew() {
	m := metrics.New([]string{"dispatch"}, []string{"demo"})
	m.ReconcileAttempts.WithLabelValues("demo", metrics.AttemptConfirmed).Inc()

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	lines := bufio.NewScanner(rec.Body)
	for lines.Scan() {
		if strings.HasPrefix(lines.Text(), "actions_reconciliation_attempts_total{") {
			fmt.Println(lines.Text())
		}
	}
	// Output:
	// actions_reconciliation_attempts_total{provider="demo",status="confirmed"} 1
	// actions_reconciliation_attempts_total{provider="demo",status="error"} 0
	// actions_reconciliation_attempts_total{provider="demo",status="failed_before_dispatch"} 0
	// actions_reconciliation_attempts_total{provider="demo",status="indeterminate"} 0
	// actions_reconciliation_attempts_total{provider="demo",status="malformed"} 0
	// actions_reconciliation_attempts_total{provider="demo",status="rejected"} 0
	// actions_reconciliation_attempts_total{provider="demo",status="replayed"} 0
	// actions_reconciliation_attempts_total{provider="demo",status="unavailable"} 0
}
