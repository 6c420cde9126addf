package clustertest

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/history"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// The checkers fail on a real run, not only on planted histories: a
// connector that breaks its contract (SPEC §4) — it acts without
// answering in time, then tells reconciliation it never received the
// request — leads Portcullis to send the intent again (lost in flight),
// and the provider acts twice (and, after the last redispatch, to answer
// FAILED_BEFORE_DISPATCH for an action that happened). The history
// recorded up to the second action shows it: its check names
// one-effect-per-key. (The test asserts the violation instead of failing
// on it.)
func TestHistoryCatchesALyingConnector(t *testing.T) {
	env := testenv.New(t, testenv.Clustered(), testenv.WithConfig(func(c *config.Config) {
		c.Reconciliation.Interval = 200 * time.Millisecond
		c.Approval.ClockSkew = time.Second
		for i := range c.Providers {
			c.Providers[i].Timeout = 300 * time.Millisecond // a short lease: each redispatch comes sooner
		}
	}))
	prov := newProvider(env)
	prov.fake.OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{}, adapters.ErrTimeout // acted, no answer in time
	})
	prov.fake.OnReconcile(func(context.Context, schema.ReconcileRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: schema.ReplyFailedBeforeDispatch, ErrorCode: "LIE"}, nil // the lie
	})
	publish(t, env, "lied-1", "lied")
	twice := func() bool { return slices.Contains(slices.Collect(maps.Values(prov.fake.Delivered())), 2) }
	for deadline := time.Now().Add(time.Minute); !twice(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the provider did not act twice within a minute: %v", prov.fake.Delivered())
		}
	}

	rec := recorderOf(env)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	outs, err := history.ReadOutcomes(ctx, env.JS, env.Subjects)
	if err != nil {
		t.Fatal(err)
	}
	rec.Outcomes(outs)
	bad, _ := history.Check(rec.History(), history.Options{})
	t.Logf("violations: %v", bad)
	if !slices.ContainsFunc(bad, func(v history.Violation) bool { return v.Rule == history.RuleOneEffect }) {
		t.Errorf("the double effect went unnoticed: %v", bad)
	}
}
