// Package clustertest runs processors that share a three-server JetStream
// cluster in process (SPEC §6): the stage consumers shared between them,
// one NATS server stopped and brought back, stream leaders moving during
// traffic. The SIGKILL tests of real processor binaries on a cluster are in
// internal/crashtest.
package clustertest

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var fastReconcile = testenv.WithConfig(func(c *config.Config) { c.Reconciliation.Interval = 200 * time.Millisecond })

// Two processors on one cluster share the stage consumers: every proposal
// gets its outcome, and every intent reaches the provider once.
func TestTwoProcessorsShareTheWork(t *testing.T) {
	env := testenv.New(t, testenv.Clustered(), fastReconcile)
	env.AddProcessor(t, "second")
	const n = 20
	for i := range n {
		env.PublishSigned(t, proposal(t, fmt.Sprintf("prop-%02d", i), fmt.Sprintf("batch-%02d", i)), env.Host)
	}
	for i := range n {
		if o := env.Recorder.Wait(t, fmt.Sprintf("prop-%02d", i), testenv.Terminal); o.Kind != schema.KindConfirmed {
			t.Errorf("%s: %s", o.ProposalID, o.Kind)
		}
	}
	for key, c := range env.Fakes["demo"].Delivered() {
		if c != 1 {
			t.Errorf("%s… dispatched %d times", key[:12], c)
		}
	}
}

// proposal is a granted lumber proposal for the fake provider "demo" whose
// intent is batch's: proposals of one batch are one intent.
func proposal(t *testing.T, id, batch string) map[string]any {
	t.Helper()
	p := testenv.Lumber(id)
	testenv.Set(p, "intent.payload", map[string]any{"quantity": 20, "batch": batch})
	return testenv.Granted(t, p, "sku-1001", time.Now())
}
