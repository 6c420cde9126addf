package config_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/schema/trust"
)

// TestBudgetWarnings: the defaults fit 14 hosts' pipeline budgets in a
// stage stream and 15 history shares (14 hosts and input naming none) in
// history_max_bytes; one more host and each warning names the numbers.
// Unsigned input (every host shares everything) has no per-host budgets.
func TestBudgetWarnings(t *testing.T) {
	withHosts := func(n int) *config.Config {
		c := config.Defaults()
		for i := range n {
			c.Hosts = append(c.Hosts, trust.Host{Name: fmt.Sprintf("h%d", i)})
		}
		return c
	}
	if w := withHosts(14).BudgetWarnings(); len(w) != 0 {
		t.Errorf("14 hosts at the defaults: %q", w)
	}
	w := withHosts(17).BudgetWarnings()
	if len(w) != 2 ||
		!strings.Contains(w[0], "stage_max_bytes 1GiB") || !strings.Contains(w[0], "17 hosts × host_pipeline_max_msgs 1000 × up to 72KiB") ||
		!strings.Contains(w[1], "history_max_bytes 1GiB") || !strings.Contains(w[1], "(17 hosts + 1 for input that names none) × host_history_max_bytes 64MiB = 1152MiB") {
		t.Errorf("17 hosts at the defaults: %q", w)
	}
	c := withHosts(17)
	c.Admission.AllowUnsigned = true
	if w := c.BudgetWarnings(); len(w) != 0 {
		t.Errorf("unsigned input: %q", w)
	}
}
