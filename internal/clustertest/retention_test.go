package clustertest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
)

// The replicated journal is swept like Pebble's: once the receipts horizon
// has passed, a finished intent's record and receipts are gone from the
// bucket, while an intent waiting for an operator (exhausted
// RECONCILIATION_REQUIRED) stays — in the bucket and in `reconcile list` —
// however old, with two processors sweeping at once.
func TestReplicatedJournalIsSwept(t *testing.T) {
	clock := stages.NewManualClock(time.Now())
	env := testenv.New(t, testenv.Clustered(), testenv.WithClock(clock), testenv.WithConfig(func(c *config.Config) {
		c.Reconciliation.Interval = 200 * time.Millisecond
		c.Reconciliation.MaxAttempts = 1
		c.Retention.SweepInterval = 50 * time.Millisecond
	}))
	addProcessor(t, env, "second")
	defer dumpLogs(t, env)
	fake := env.Fakes["demo"]
	fake.OnDispatch(func(_ context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
		if strings.Contains(string(req.Payload), `"unk`) {
			return schema.AdapterReply{Outcome: schema.ReplyIndeterminate}, nil
		}
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "fake:1"}, nil
	})
	fake.OnReconcile(func(context.Context, schema.ReconcileRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: schema.ReplyIndeterminate}, nil
	})
	publish(t, env, "swept-1", "done")
	publish(t, env, "waits-1", "unk-waits")
	outs := terminal(t, env, []string{"swept-1", "waits-1"})
	if outs["swept-1"].Kind != schema.KindConfirmed || outs["waits-1"].Kind != schema.KindReconciliationRequired {
		t.Fatalf("outcomes: %+v", outs)
	}
	done, waits := *outs["swept-1"].Fingerprint, *outs["waits-1"].Fingerprint
	jr := env.Processor().Journal()
	for _, fp := range []string{done, waits} {
		if _, found, err := jr.Load(fp); err != nil || !found {
			t.Fatalf("%s before the horizon: %v %v", fp, found, err)
		}
	}

	// The receipts horizon passes (30 days by default).
	_, receipts := env.Config.RetentionHorizons()
	clock.Advance(receipts + time.Hour)
	testenv.WaitFor(t, "the finished intent swept from the bucket", func() bool {
		_, found, err := jr.Load(done)
		return err == nil && !found
	})
	if rs, err := jr.Receipts(done); err != nil || len(rs) != 0 {
		t.Errorf("receipts of the swept intent: %d, %v", len(rs), err)
	}
	if rec, found, err := jr.Load(waits); err != nil || !found || !rec.ReconcileExhausted {
		t.Fatalf("the intent waiting for an operator: %+v %v %v", rec, found, err)
	}
	if rs, err := jr.Receipts(waits); err != nil || len(rs) != 2 {
		t.Errorf("its receipts: %d, %v", len(rs), err)
	}
	list, err := env.Admin().List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Actions) != 1 || list.Actions[0].Fingerprint != waits {
		t.Errorf("reconcile list after the sweep: %+v", list.Actions)
	}
	env.AssertNowhere(t, payloadOnly)
}
