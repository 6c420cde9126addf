package jetstream_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/testenv"
	kvs "github.com/portcullis/portcullis/kv"
	kvintent "github.com/portcullis/portcullis/kv/intent"
	kvjs "github.com/portcullis/portcullis/kv/jetstream"
	"github.com/portcullis/portcullis/schema"
)

const fp = "sha256:5a6883578c195c2db4563345d2872d693c6dfabca09b1ae4918d1cd00103e446"

func activityBucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(testenv.Connect(t, testenv.StartServer(t, "")))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "activity"})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func addProposal(id string) func(a *schema.Activity) {
	return func(a *schema.Activity) { a.AddProposal(schema.ProposalRef{Host: "h", ProposalID: id}) }
}

// Updates from two stores (two processors) on one snapshot never lose an
// edit: a store that wrote last updates at the revision it wrote, and one
// whose memory is stale reads the snapshot back when its write is refused.
func TestUpdateTwoWriters(t *testing.T) {
	kv := activityBucket(t)
	ctx := context.Background()
	a, b := &kvjs.Activity{KV: kv}, &kvjs.Activity{KV: kv}
	steps := []struct {
		s  *kvjs.Activity
		id string
	}{{a, "p1"}, {a, "p2"}, {b, "p3"}, {a, "p4"}, {b, "p5"}, {b, "p6"}}
	for _, st := range steps {
		if err := st.s.Update(ctx, fp, addProposal(st.id)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := a.Get(ctx, fp)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Proposals) != len(steps) {
		t.Fatalf("proposals %v, want %d of them", got.Proposals, len(steps))
	}
	if e, err := kv.Get(ctx, kvjs.ActivityKey(fp)); err != nil || e.Revision() != uint64(len(steps)) {
		t.Fatalf("revision %d, %v: want one write per update", e.Revision(), err)
	}
}

// A store that never wrote a snapshot which exists (written by another
// processor, or before a restart) finds it when its create is refused.
func TestUpdateExistingSnapshot(t *testing.T) {
	kv := activityBucket(t)
	ctx := context.Background()
	if err := (&kvjs.Activity{KV: kv}).Update(ctx, fp, addProposal("old")); err != nil {
		t.Fatal(err)
	}
	s := &kvjs.Activity{KV: kv}
	if err := s.Update(ctx, fp, addProposal("new")); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, fp)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Proposals) != 2 {
		t.Fatalf("proposals %v, want old and new", got.Proposals)
	}
	// Deleted behind its back: created again.
	if err := kv.Delete(ctx, kvjs.ActivityKey(fp)); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, fp, addProposal("again")); err != nil {
		t.Fatal(err)
	}
	if got, err = s.Get(ctx, fp); err != nil || len(got.Proposals) != 1 {
		t.Fatalf("after delete: %+v, %v", got, err)
	}
}

// Reconciliation's write comes first, before the dispatch's receipt can be
// read (its history entry held up by a partition), then dispatch's own,
// late: the snapshot never shows a dispatch section without a result
// (status "" is not in the schema), and ends with the dispatch's result
// under reconciliation's later receipt. Seen in
// TestPartitionLeadersCutOff: the activity record of an intent confirmed
// by reconciliation kept {"dispatch":{"status":""}} for good.
func TestLateDispatchWriteCompletesTheSnapshot(t *testing.T) {
	kv := activityBucket(t)
	ctx := context.Background()
	s := &kvjs.Activity{KV: kv}
	dispatched := &schema.Receipt{ReceiptID: "rcpt_1", Status: schema.StatusReconciliationRequired, DispatchAttempted: true, RecordedAtMs: 2000}
	confirmed := &schema.Receipt{ReceiptID: "rcpt_2", Status: schema.StatusConfirmed, RecordedAtMs: 3000,
		Reconciliation: &schema.ReceiptReconcileRef{AttemptID: "rcn_1"}}
	byReconciliation := kvs.Intent{Adapter: "nats", InFlightAtMs: 1000, Receipt: confirmed}
	byDispatch := kvs.Intent{Adapter: "nats", InFlightAtMs: 1000, Receipt: dispatched}

	if err := s.Update(ctx, fp, project(byReconciliation)); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, fp)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != string(schema.StatusConfirmed) || (got.Dispatch != nil && got.Dispatch.Status == "") {
		t.Fatalf("after reconciliation: status %q, dispatch %+v (a section without its result)", got.Status, got.Dispatch)
	}
	if err := s.Update(ctx, fp, project(byDispatch)); err != nil {
		t.Fatal(err)
	}
	if got, err = s.Get(ctx, fp); err != nil {
		t.Fatal(err)
	}
	if got.Status != string(schema.StatusConfirmed) || got.Receipt.ReceiptID != "rcpt_2" {
		t.Errorf("the later receipt was replaced: status %q, receipt %s", got.Status, got.Receipt.ReceiptID)
	}
	if d := got.Dispatch; d == nil || d.Status != schema.StatusReconciliationRequired || d.FinishedAtMs != 2000 || d.StartedAtMs != 1000 || !d.Attempted {
		t.Errorf("dispatch section %+v, want the dispatch's result", d)
	}
}

// project is rec's projection into a snapshot, as an activity edit.
func project(rec kvs.Intent) func(*schema.Activity) {
	return func(a *schema.Activity) { kvintent.Project(rec, a) }
}
