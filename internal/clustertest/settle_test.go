package clustertest

import (
	"context"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// An operator settles an exhausted reconciliation on a cluster while the
// history is recorded (internal/history): the provider never says what
// became of the dispatch, reconciliation gives up (terminal
// RECONCILIATION_REQUIRED), the operator declares the effect present, and
// every proposal of the intent gets CONFIRMED. The checkers accept the
// settlement as the answer only because the operator's call, before it,
// declared that effect; the operator's receipt reads, before and after,
// are linearizable against the settlement's receipt.
func TestOperatorSettlesWhileRecorded(t *testing.T) {
	env := testenv.New(t, testenv.Clustered(), testenv.WithConfig(func(c *config.Config) {
		c.Reconciliation.Interval = 200 * time.Millisecond
		c.Reconciliation.MaxAttempts = 1
	}))
	prov := newProvider(env)
	prov.fake.OnReconcile(func(context.Context, schema.ReconcileRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: schema.ReplyIndeterminate}, nil
	})
	addProcessor(t, env, "second")
	prov.readDuring(t)
	publish(t, env, "settle-1", "unk-settle")
	exhausted := terminal(t, env, []string{"settle-1"})["settle-1"]
	if exhausted.Kind != schema.KindReconciliationRequired || exhausted.Fingerprint == nil {
		t.Fatalf("before the operator: %+v", exhausted)
	}
	key := exhausted.Receipt.IdempotencyKey
	c := env.Admin()
	rec := recorderOf(env)
	if _, err := rec.ReadReceipts(context.Background(), c, key); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.Resolve(context.Background(), c, key, true, "ops:ticket-1"); err != nil {
		t.Fatal(err)
	}
	env.Recorder.Wait(t, "settle-1", testenv.Kind(schema.KindConfirmed))
	// A second proposal of the intent gets the settled answer.
	publish(t, env, "settle-2", "unk-settle")
	if o := terminal(t, env, []string{"settle-2"})["settle-2"]; o.Kind != schema.KindConfirmed {
		t.Errorf("the intent's next proposal: %s", o.Kind)
	}
	if _, err := rec.ReadReceipts(context.Background(), c, key); err != nil {
		t.Fatal(err)
	}
	prov.check(t)
}
