package jetstream

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/intent"

	"github.com/go-json-experiment/json"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/schema"
)

func testBucket(t *testing.T) (*server.Server, jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := JournalBucket("journal_t", 1).Ensure(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	return s, js, kv
}

var (
	tfp = "sha256:" + strings.Repeat("ab", 32)
	tid = kv.Identity{Fingerprint: tfp, IdempotencyKey: kv.Hex(tfp), Target: schema.Target{Provider: "demo", Capability: "c", Operation: "o", Environment: "test", Referent: "r"}}
)

// A processor that dies right after its record's compare-and-set leaves
// the other keys unwritten: reads fill them in from the record, and the
// next commit of the fingerprint, by any processor, writes them.
func TestCrashAfterTheRecordIsRepaired(t *testing.T) {
	_, js, bucket := testBucket(t)
	h := kv.Hex(tfp)
	// The record of a settled reconciliation attempt, as a processor wrote
	// it before dying: its After was never applied. Before it, the
	// dispatch receipt (1) and the index entry were stored.
	rec := kv.NewIntent(tid, "fake", 100)
	first := intent.Settle(&rec, kv.Verdict{Status: schema.StatusReconciliationRequired, NextAction: schema.NextReconcile, Attempted: true}, "dispatch", nil, nil, 100)
	cp := kv.Attempt{AttemptID: kv.AttemptID(tfp, 1), Number: 1, StartedAtMs: 150}
	rec.ReconcileAttempt = 1
	second := intent.Settle(&rec, kv.Verdict{Status: schema.StatusConfirmed, NextAction: schema.NextNone, Attempted: true, Settled: true},
		"reconcile/"+cp.AttemptID, &schema.ReceiptReconcileRef{AttemptID: cp.AttemptID, PreviousReceiptID: first.ReceiptID}, nil, 200)
	done := cp
	done.Status, done.FinishedAtMs = "confirmed", 200
	ctx := context.Background()
	put := func(key string, v any) {
		data, _ := json.Marshal(v)
		if _, err := bucket.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}
	put(receiptKey(h, 1), first)
	put(attemptKey(h, cp.AttemptID), cp)
	put(indexKey(h), int64(100))
	put(recordKey(h), stored{Record: rec, Writer: "p_dead", Commit: "c1", After: &after{Receipt: &second, Attempt: &done, Unindex: true}})

	j := NewJournal(JournalOptions{KV: bucket, JS: js, Writer: "p_live"})
	rs, err := j.Receipts(tfp)
	if err != nil || len(rs) != 2 || rs[1].ReceiptID != second.ReceiptID {
		t.Fatalf("Receipts = %+v %v", rs, err)
	}
	if a, found, err := j.Attempt(tfp, cp.AttemptID); err != nil || !found || a.Status != "confirmed" {
		t.Fatalf("Attempt = %+v %v %v", a, found, err)
	}
	if idx, err := j.Indeterminates(); err != nil || len(idx) != 0 {
		t.Fatalf("Indeterminates = %+v %v", idx, err)
	}

	// The next commit (a later proposal of the intent) stores them.
	unlock := j.Lock(tfp)
	got, _, err := j.Load(tfp)
	if err != nil {
		t.Fatal(err)
	}
	got.AddProposal(schema.ProposalRef{Host: "h", ProposalID: "later"})
	if err := j.Commit(tfp, kv.IntentWrites{Record: &got}); err != nil {
		t.Fatal(err)
	}
	unlock()
	if e, err := bucket.Get(ctx, receiptKey(h, 2)); err != nil || !strings.Contains(string(e.Value()), second.ReceiptID) {
		t.Errorf("receipt 2 after the repair: %v", err)
	}
	if e, err := bucket.Get(ctx, attemptKey(h, cp.AttemptID)); err != nil || !strings.Contains(string(e.Value()), `"confirmed"`) {
		t.Errorf("attempt after the repair: %v", err)
	}
	if _, err := bucket.Get(ctx, indexKey(h)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("index entry after the repair: %v", err)
	}
}

// A write whose answer was lost but which was stored is recognized as the
// writer's own by its commit id: not a conflict.
func TestOwnStoredWriteIsNoConflict(t *testing.T) {
	_, js, bucket := testBucket(t)
	j := NewJournal(JournalOptions{KV: bucket, JS: js, Writer: "p_me"})
	h := kv.Hex(tfp)
	s := &stored{Record: kv.NewIntent(tid, "fake", 1), Writer: "p_me", Commit: "mine"}
	data, _ := json.Marshal(s, json.Deterministic(true))
	rev, err := bucket.Create(context.Background(), recordKey(h), data) // the "lost" first attempt
	if err != nil {
		t.Fatal(err)
	}
	if got, err := j.swap(h, 0, s); err != nil || got != rev {
		t.Fatalf("swap of a stored write = %d %v, want %d", got, err, rev)
	}
	other := &stored{Record: kv.NewIntent(tid, "fake", 2), Writer: "p_me", Commit: "another"}
	if _, err := j.swap(h, 0, other); !errors.Is(err, kv.ErrConflict) {
		t.Fatalf("swap of another write = %v, want kv.ErrConflict", err)
	}
}

// With JetStream gone, a commit neither claims success nor a conflict.
func TestUnanswerableCommitIsUncertain(t *testing.T) {
	srv, js, bucket := testBucket(t)
	j := NewJournal(JournalOptions{KV: bucket, JS: js, Writer: "p_me", Timeouts: Timeouts{OpTimeout: 300 * time.Millisecond, AttemptTimeout: 100 * time.Millisecond, SettleTimeout: time.Second}})
	unlock := j.Lock(tfp)
	defer unlock()
	if _, _, err := j.Load(tfp); err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	rec := kv.NewIntent(tid, "fake", 1)
	if err := j.Commit(tfp, kv.IntentWrites{Record: &rec}); !errors.Is(err, kv.ErrUncertain) {
		t.Fatalf("Commit = %v, want kv.ErrUncertain", err)
	}
}

// commitSettled writes a record settled by the verdicts given, through the
// journal, with a finished attempt for each verdict after the first.
func commitSettled(t *testing.T, j *Journal, fp string, verdicts ...kv.Verdict) kv.Intent {
	t.Helper()
	unlock := j.Lock(fp)
	defer unlock()
	rec, found, err := j.Load(fp)
	if err != nil {
		t.Fatal(err)
	}
	if !found {
		id := tid
		id.Fingerprint, id.IdempotencyKey = fp, kv.Hex(fp)
		rec = kv.NewIntent(id, "fake", 100)
	}
	for i, v := range verdicts {
		w := kv.IntentWrites{Record: &rec}
		if i > 0 {
			rec.ReconcileAttempt = i
			cp := kv.Attempt{AttemptID: kv.AttemptID(fp, i), Number: i, StartedAtMs: 100, Status: "confirmed", FinishedAtMs: 100}
			w.Attempt = &cp
		}
		rc := intent.Settle(&rec, v, "step"+string(rune('a'+i)), nil, nil, 100)
		w.Receipt = &rc
		if err := j.Commit(fp, w); err != nil {
			t.Fatal(err)
		}
	}
	return rec
}

// A sweep that dies after its tombstone, and a processor that gives the
// fingerprint a new life meanwhile: the writer removes the old life's keys
// before its compare-and-set, so its receipts are its own; the sweep,
// resuming late, removes nothing written after its tombstone; a tombstone
// nobody wrote over is finished by a later sweep.
func TestSweepTombstoneAndNewLife(t *testing.T) {
	_, js, bucket := testBucket(t)
	sweeper := NewJournal(JournalOptions{KV: bucket, JS: js, Writer: "p_sweeper"})
	writer := NewJournal(JournalOptions{KV: bucket, JS: js, Writer: "p_writer"})
	required := kv.Verdict{Status: schema.StatusReconciliationRequired, NextAction: schema.NextReconcile, Attempted: true}
	done := kv.Verdict{Status: schema.StatusConfirmed, NextAction: schema.NextNone, Attempted: true, Settled: true}
	old := commitSettled(t, writer, tfp, required, done)
	h := kv.Hex(tfp)
	s, rev, err := sweeper.loadStored(tfp)
	if err != nil || s == nil || !s.Record.Finished() {
		t.Fatalf("record: %+v %v", s, err)
	}
	// The sweep's tombstone, and then it dies.
	tomb := &stored{Record: s.Record, Writer: "p_sweeper", Commit: "t1", Swept: true}
	tRev, err := sweeper.swap(h, rev, tomb)
	if err != nil {
		t.Fatal(err)
	}
	if _, found, err := writer.Load(tfp); err != nil || found {
		t.Fatalf("a tombstone loads as %v %v", found, err)
	}
	if rs, err := writer.Receipts(tfp); err != nil || len(rs) != 0 {
		t.Fatalf("a tombstone's receipts: %+v %v", rs, err)
	}
	// A new life: one receipt, numbered 1 like the old life's first.
	fresh := kv.Verdict{Status: schema.StatusRejected, NextAction: schema.NextNone, Attempted: true, Settled: true}
	newLife := commitSettled(t, writer, tfp, fresh)
	check := func(when string) {
		t.Helper()
		rs, err := writer.Receipts(tfp)
		if err != nil || len(rs) != 1 || rs[0].ReceiptID != newLife.Receipt.ReceiptID || rs[0].Status != schema.StatusRejected {
			t.Fatalf("%s: receipts %+v %v, want the new life's one", when, rs, err)
		}
		if _, found, err := writer.Attempt(tfp, kv.AttemptID(tfp, 1)); err != nil || found {
			t.Fatalf("%s: the old life's attempt is still there (%v)", when, err)
		}
	}
	check("new life")
	// The sweep resumes: nothing of the new life goes.
	if err := sweeper.bury(h, &old, tRev); err != nil {
		t.Fatal(err)
	}
	check("after the late sweep")
	if rec, found, err := writer.Load(tfp); err != nil || !found || rec.Receipt.Status != schema.StatusRejected {
		t.Fatalf("new life's record: %+v %v %v", rec, found, err)
	}

	// A tombstone left alone: a later sweep past its horizon finishes it.
	other := "sha256:" + strings.Repeat("cd", 32)
	commitSettled(t, writer, other, required, done)
	s, rev, _ = sweeper.loadStored(other)
	if _, err := sweeper.swap(kv.Hex(other), rev, &stored{Record: s.Record, Writer: "p_sweeper", Commit: "t2", Swept: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := sweeper.Sweep(context.Background(), time.Hour, time.Hour, time.Now().Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	l, err := bucket.ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for k := range l.Keys() {
		if strings.Contains(k, kv.Hex(other)) {
			t.Errorf("left behind: %s", k)
		}
	}
}
