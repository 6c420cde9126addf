package migrate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	kvjs "github.com/portcullis/portcullis/kv/jetstream"

	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/migrate"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// script makes the fake "demo" answer by the proposal's batch: "waits"
// indeterminate (and its reconciliation too: it waits for an operator),
// "poll" acknowledged (verified by reconciliation: confirmed), anything
// else confirmed.
func script(env *testenv.Env) {
	fake := env.Fakes["demo"]
	fake.OnDispatch(func(_ context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
		switch {
		case strings.Contains(string(req.Payload), `"waits`):
			return schema.AdapterReply{Outcome: schema.ReplyIndeterminate}, nil
		case strings.Contains(string(req.Payload), `"poll`):
			return schema.AdapterReply{Outcome: schema.ReplyAcknowledged, ProviderActionID: "fake:ack"}, nil
		}
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "fake:ok"}, nil
	})
	fake.OnReconcile(func(_ context.Context, req schema.ReconcileRequest) (schema.AdapterReply, error) {
		if req.ProviderActionID == "" { // "waits": the dispatch named none
			return schema.AdapterReply{Outcome: schema.ReplyIndeterminate}, nil
		}
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed, EvidenceRefs: []string{"fake:verified"}}, nil
	})
}

// proposal is a lumber proposal of batch, granted unless parked.
func proposal(t *testing.T, id, batch string, granted bool) map[string]any {
	t.Helper()
	p := testenv.Lumber(id)
	testenv.Set(p, "intent.payload", map[string]any{"quantity": 20, "batch": batch})
	if granted {
		testenv.Granted(t, p, "sku-1001", time.Now())
	}
	return p
}

// replicated is env's configuration on the replicated journal.
func replicated(env *testenv.Env) *config.Config {
	c := *env.Config
	c.Store.Journal = config.JournalReplicated
	c.Internal.KeyFile = env.Config.InternalKeyFile()
	return &c
}

// startFails starts a processor on cfg and expects it to refuse, saying want.
func startFails(t *testing.T, cfg *config.Config, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := engine.Start(ctx, engine.Options{Config: cfg})
	if err == nil {
		p.Close()
		t.Fatalf("started; want a refusal saying %q", want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("refused with %v; want it to say %q", err, want)
	}
}

// A single node with a local journal on the cluster's own NATS (store.journal
// = "local") moves into the cluster's buckets: a run stopped midway (as by
// a crash) while the cluster moves a moved record on, then finished; run
// again, it changes nothing; then the store starts replicated and the
// cluster knows everything the node did — receipts answer repeats of a done
// intent without a provider call, the action waiting for an operator is
// in `reconcile list`, a parked proposal is resumed by its grant, a poll
// the node had pending fires, proposal and delivery ids stay taken.
func TestMigrateIntoTheClusterItUsed(t *testing.T) {
	clock := stages.NewManualClock(time.Now())
	env := testenv.New(t, testenv.Clustered(), testenv.WithClock(clock), testenv.WithConfig(func(c *config.Config) {
		c.Store.Journal = config.JournalLocal
		c.Reconciliation.Interval = time.Second
		c.Reconciliation.MaxAttempts = 1
	}))
	script(env)
	fake := env.Fakes["demo"]
	env.PublishSigned(t, proposal(t, "done-1", "done", true), env.Host)
	env.PublishSigned(t, proposal(t, "waits-1", "waits", true), env.Host)
	env.Recorder.Wait(t, "done-1", testenv.Kind(schema.KindConfirmed))
	env.Recorder.Wait(t, "waits-1", testenv.Kind(schema.KindReconciliationRequired))
	clock.Advance(time.Second) // its one poll: exhausted
	env.Quiesce(t)
	if o := env.Recorder.Wait(t, "waits-1", testenv.Terminal); o.Kind != schema.KindReconciliationRequired {
		t.Fatalf("waits-1: %+v", o)
	}
	env.PublishSigned(t, proposal(t, "poll-1", "poll", true), env.Host)
	env.PublishSigned(t, proposal(t, "parked-1", "parked", false), env.Host)
	env.Recorder.Wait(t, "poll-1", testenv.Kind(schema.KindAcknowledged))
	parked := env.Recorder.Wait(t, "parked-1", testenv.Kind(schema.KindNeedsApproval))
	env.Quiesce(t)

	cfg := replicated(env)
	// Not while the processor that owns the store runs.
	if _, err := migrate.Run(context.Background(), migrate.Options{Config: cfg}); !errors.Is(err, migrate.ErrStoreInUse) {
		t.Fatalf("migrate while the processor runs: %v", err)
	}
	env.Stop(t)
	startFails(t, cfg, "processor migrate")

	// A run that stops after the journal, as a crash would.
	ctx, cancel := context.WithCancel(context.Background())
	migrate.AfterStep(func(step int) {
		if step == 0 {
			cancel()
		}
	})
	sum, err := migrate.Run(ctx, migrate.Options{Config: cfg})
	migrate.AfterStep(nil)
	if !errors.Is(err, context.Canceled) || sum.Intents.Created != 3 {
		t.Fatalf("interrupted run: %+v, %v", sum, err)
	}
	// Meanwhile the cluster runs on: a processor of it fires the poll the
	// node had pending (armed as a schedule) and moves that record on.
	env.Config.Store.Journal = config.JournalReplicated
	other := env.AddProcessor(t, "cluster")
	clock.Advance(2 * time.Second)
	if o := env.Recorder.Wait(t, "poll-1", testenv.Terminal); o.Kind != schema.KindConfirmed {
		t.Fatalf("poll-1 after its schedule fired: %+v", o)
	}

	sum, err = migrate.Run(context.Background(), migrate.Options{Config: cfg})
	if err != nil {
		t.Fatalf("finishing the run: %+v, %v", sum, err)
	}
	want := migrate.Summary{
		Intents:    migrate.Counts{Present: 3},
		Approvals:  migrate.Counts{Created: 4},
		Admissions: migrate.Counts{Created: 4},
		Deliveries: migrate.Counts{Created: 4},
		Timers:     2, // poll-1's poll (its record moved on: not armed again) and parked-1's expiry
		Marked:     true,
	}
	if sum != want {
		t.Fatalf("summary %+v, want %+v", sum, want)
	}
	if sum, err = migrate.Run(context.Background(), migrate.Options{Config: cfg}); err != nil ||
		sum != (migrate.Summary{Intents: migrate.Counts{Present: 3}, Approvals: migrate.Counts{Present: 4}, Admissions: migrate.Counts{Present: 4}, Deliveries: migrate.Counts{Present: 4}, Marked: true}) {
		t.Fatalf("second run: %+v, %v", sum, err)
	}

	// The store starts replicated; the cluster knows what the node did.
	other.Stop(t)
	env.Start(t)
	jr := env.Processor().Journal()
	done := env.Recorder.Wait(t, "done-1", testenv.Terminal)
	if rs, err := jr.Receipts(*done.Fingerprint); err != nil || len(rs) != 1 || rs[0].ReceiptID != done.Receipt.ReceiptID {
		t.Errorf("done-1's receipts in the bucket: %+v %v", rs, err)
	}
	list, err := env.Admin().List(context.Background())
	if err != nil || len(list.Actions) != 1 || list.Actions[0].Fingerprint != *env.Recorder.Wait(t, "waits-1", testenv.Terminal).Fingerprint {
		t.Errorf("reconcile list: %+v %v", list, err)
	}
	// The same intent again, under a new id: its receipt, no call.
	env.PublishSigned(t, proposal(t, "again-1", "done", true), env.Host)
	again := env.Recorder.Wait(t, "again-1", testenv.Terminal)
	if again.Receipt == nil || again.Receipt.ReceiptID != done.Receipt.ReceiptID {
		t.Errorf("the done intent again: %+v", again)
	}
	// The parked proposal's grant resumes it.
	env.PublishGrant(t, testenv.Set(testenv.Grant(parked.Approval.Fingerprint, time.Now(), nil), "proposal_id", "parked-1"), env.Host)
	if o := env.Recorder.Wait(t, "parked-1", testenv.Terminal); o.Kind != schema.KindConfirmed {
		t.Errorf("parked-1 after its grant: %+v", o)
	}
	// Ids stay taken: the same delivery again is a repeat, the same id
	// with another body a reuse.
	env.PublishSigned(t, proposal(t, "done-1", "done", true), env.Host)
	env.PublishSigned(t, testenv.Set(proposal(t, "done-1", "other", true), "context.delivery.delivery_id", "delivery:other"), env.Host)
	env.Recorder.WaitEvent(t, schema.PhaseAdmission, schema.CodeAdmissionProposalIDReused)
	env.Quiesce(t)
	for _, o := range env.Recorder.Outcomes("done-1")[1:] {
		if o.Kind != schema.KindConfirmed || o.Receipt == nil || o.Receipt.ReceiptID != done.Receipt.ReceiptID {
			t.Errorf("done-1 repeated: %+v", o)
		}
	}
	if err := fake.AtMostOnce(); err != nil {
		t.Error(err)
	}
	if n := fake.Dispatches(); n != 4 {
		t.Errorf("%d dispatches, want one per intent: 4", n)
	}

	// Back to the local journal: refused, it is out of date.
	env.Stop(t)
	local := *env.Config
	local.Store.Journal = config.JournalLocal
	startFails(t, &local, "moved into the buckets")
}

// A single node on its embedded server moves into another NATS: a parked
// proposal cannot move (its envelope is in the node's stream, which a
// grant re-reads), a record the cluster already holds under the same key
// conflicts — reported, never overwritten — and the store is not marked;
// stream sequences of the node's stream are not carried over. Once the
// parked proposal is decided on the node, and the conflict accepted, the
// store is marked.
func TestMigrateIntoAnotherNATS(t *testing.T) {
	env := testenv.New(t)
	env.PublishSigned(t, proposal(t, "done-1", "done", true), env.Host)
	env.PublishSigned(t, proposal(t, "taken-1", "taken", true), env.Host)
	env.PublishSigned(t, proposal(t, "parked-1", "parked", false), env.Host)
	env.Recorder.Wait(t, "done-1", testenv.Terminal)
	env.Recorder.Wait(t, "taken-1", testenv.Terminal)
	parked := env.Recorder.Wait(t, "parked-1", testenv.Kind(schema.KindNeedsApproval))
	env.Quiesce(t)
	env.Stop(t)

	target := testenv.StartServer(t, "")
	cfg := replicated(env)
	cfg.NATS = config.NATS{URL: target.ClientURL(), Replicas: 1}
	// The cluster took "taken-1" for another proposal of its own.
	bucket := admissionBucket(t, cfg)
	if res, err := bucket.ImportAdmitted(testenv.Ref("taken-1"), kv.Admitted{Digest: "another", Seq: 7, AtMs: 1}); err != nil || res != kvjs.Created {
		t.Fatal(res, err)
	}

	sum, err := migrate.Run(context.Background(), migrate.Options{Config: cfg})
	if !errors.Is(err, migrate.ErrIncomplete) || sum.Approvals.NotMoved != 1 || sum.Admissions.Conflict != 1 || sum.Admissions.Created != 2 || sum.Intents.Created != 2 || sum.Marked {
		t.Fatalf("run: %+v, %v", sum, err)
	}
	if a, found, err := bucket.Admitted(testenv.Ref("taken-1")); err != nil || !found || a.Digest != "another" {
		t.Errorf("the conflicting record was touched: %+v %v %v", a, found, err)
	}
	if a, found, err := bucket.Admitted(testenv.Ref("done-1")); err != nil || !found || a.Seq != 0 {
		t.Errorf("done-1's record keeps a sequence of another stream: %+v %v %v", a, found, err)
	}
	startFails(t, cfg, "processor migrate")

	// Decided on the node (declined), then moved, the conflict accepted.
	env.Start(t)
	env.PublishGrant(t, map[string]any{"schema": "actions.decline.v1", "proposal_id": "parked-1",
		"intent_fingerprint": parked.Approval.Fingerprint, "declined_by": "actor:demo"}, env.Host)
	env.Recorder.Wait(t, "parked-1", testenv.Terminal)
	env.Quiesce(t)
	env.Stop(t)
	if sum, err := migrate.Run(context.Background(), migrate.Options{Config: cfg}); !errors.Is(err, migrate.ErrIncomplete) || sum.Marked {
		t.Fatalf("with the conflict: %+v, %v", sum, err)
	}
	sum, err = migrate.Run(context.Background(), migrate.Options{Config: cfg, AcceptConflicts: true})
	if err != nil || !sum.Marked || sum.Admissions.Conflict != 1 || sum.Approvals.NotMoved != 0 {
		t.Fatalf("conflicts accepted: %+v, %v", sum, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := engine.Start(ctx, engine.Options{Config: cfg})
	if err != nil {
		t.Fatalf("the migrated store on the other NATS: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// admissionBucket opens the admission records of cfg's NATS.
func admissionBucket(t *testing.T, cfg *config.Config) *kvjs.Admissions {
	t.Helper()
	nc, js, err := engine.Connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	subj, err := subjects.New(cfg.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	var h *kvjs.Admissions
	testenv.Retry(t, func(ctx context.Context) error {
		b, err := kvjs.AdmissionBucket(subj.AdmissionBucket(), 1, time.Hour).Ensure(ctx, js)
		if err != nil {
			return err
		}
		h = kvjs.NewAdmissions(kvjs.AdmissionsOptions{KV: b, JS: js, Subjects: subj})
		return nil
	})
	return h
}
