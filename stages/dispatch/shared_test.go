package dispatch_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	kvjs "github.com/portcullis/portcullis/kv/jetstream"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/seal"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/dispatch"
	"github.com/portcullis/portcullis/stages/policy"
	"github.com/portcullis/portcullis/subjects"
)

// sharedStages are the dispatch stages of two processors, "p_a" and
// "p_b", sharing a replicated journal on a real server, and the fake
// provider both call.
func sharedStages(t *testing.T, timeout, margin time.Duration) (a, b *dispatch.Stage, fake *adapters.Fake) {
	t.Helper()
	cfg := config.Defaults()
	cfg.NATS = config.NATS{URL: "nats://unused", Replicas: 1}
	cfg.Store.Journal = config.JournalReplicated
	subj := subjects.Default()
	srv := testenv.StartServer(t, "")
	prov := config.Provider{Name: "demo", Adapter: adapters.KindFake, Timeout: timeout, UnavailableRetry: time.Second, MaxInFlight: 4}
	fake = adapters.NewFake("demo", adapters.FakeScript{})
	sealer, err := seal.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	stage := func(self string) *dispatch.Stage {
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := engine.EnsureStreams(ctx, js, subj, cfg); err != nil {
			t.Fatal(err)
		}
		bucket, err := kvjs.Bind(ctx, js, subj.JournalBucket())
		if err != nil {
			t.Fatal(err)
		}
		j := kvjs.NewJournal(kvjs.JournalOptions{KV: bucket, JS: js, Writer: self,
			Timers: &kvjs.Schedules{JS: js, Subjects: subj, Seal: sealer}})
		return &dispatch.Stage{
			Journal: j, Adapters: map[string]dispatch.Adapter{"demo": fake}, Providers: []dispatch.Provider{{Name: prov.Name, Timeout: prov.Timeout, UnavailableRetry: prov.UnavailableRetry, MaxInFlight: prov.MaxInFlight}},
			Policy: policy.Rules{ClockSkew: 30 * time.Second, MaxGrantLifetime: 24 * time.Hour},
			NC:     nc, Clock: stages.SystemClock{}, Metrics: metrics.New(nil, []string{"demo"}),
			Route:             stages.Route{Subjects: subj, Self: subjects.StageDispatch, Next: subjects.StageReconciliation},
			Log:               slog.New(slog.NewTextHandler(io.Discard, nil)),
			ReconcileInterval: time.Hour,
			Self:              self, LeaseMargin: margin,
		}
	}
	return stage("p_a"), stage("p_b"), fake
}

// input is the dispatch stage's input for proposal id of intent batch, as
// authorization hands it on.
func input(t *testing.T, id, batch string) *stages.Input {
	t.Helper()
	p, err := schema.DecodeProposal(testenv.Body(t, proposal(t, id, batch)), 0)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := fingerprint.Of(p, "sku-1001")
	if err != nil {
		t.Fatal(err)
	}
	env := schema.Envelope{Schema: schema.SchemaEnvelope, Proposal: *p, Host: testenv.HostName, AdmittedAtMs: time.Now().UnixMilli(),
		Grounded:      &schema.Grounded{Referent: "sku-1001", Fingerprint: fp.Fingerprint, IdempotencyKey: fp.IdempotencyKey, ObservationRef: "catalog:12"},
		Authorization: &schema.AuthorizationRecord{Grant: *p.Grant, DecidedAtMs: time.Now().UnixMilli()}}
	subject := subjects.Default().Stage(subjects.StageDispatch, subjects.KindProposal, subjects.ProposalToken(testenv.HostName, id))
	return &stages.Input{Subject: subject, Data: schema.EncodeEnvelope(&env), StreamSeq: 1, Delivered: 1}
}

// blockFirst makes the fake's first dispatch wait until release is closed,
// and closes inCall when it starts.
func blockFirst(fake *adapters.Fake) (inCall, release chan struct{}) {
	inCall, release = make(chan struct{}), make(chan struct{})
	first := true
	fake.OnDispatch(func(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
		if first {
			first = false
			close(inCall)
			<-release
		}
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "fake:1"}, nil
	})
	return inCall, release
}

func handle(t *testing.T, s *dispatch.Stage, in *stages.Input) stages.Result {
	t.Helper()
	res, err := s.Handle(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func outcomeOf(t *testing.T, res stages.Result) schema.Outcome {
	t.Helper()
	if len(res.Outcomes) != 1 {
		t.Fatalf("result %+v, want one outcome", res)
	}
	return res.Outcomes[0]
}

// handleAsync runs st.Handle(in) in the background; its result arrives on
// the channel.
func handleAsync(t *testing.T, st *dispatch.Stage, in *stages.Input) <-chan stages.Result {
	done := make(chan stages.Result, 1)
	go func() {
		res, err := st.Handle(context.Background(), in)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	return done
}

// Processor B, handed a second proposal of an intent that processor A is
// dispatching right now, waits for A's receipt (SPEC §6): it neither calls
// the provider nor declares A's dispatch interrupted while A's lease runs.
func TestSharedJournalWaitsForALiveDispatch(t *testing.T) {
	a, b, fake := sharedStages(t, 10*time.Second, 5*time.Second)
	inCall, release := blockFirst(fake)
	done := handleAsync(t, a, input(t, "p-1", "x"))
	<-inCall
	res := handle(t, b, input(t, "p-2", "x"))
	if res.RetryAfter <= 0 || len(res.Outcomes) != 0 {
		t.Fatalf("B during A's call: %+v, want a retry and nothing published", res)
	}
	close(release)
	if o := outcomeOf(t, <-done); o.Kind != schema.KindConfirmed {
		t.Fatalf("A: %s", o.Kind)
	}
	if o := outcomeOf(t, handle(t, b, input(t, "p-2", "x"))); o.Kind != schema.KindConfirmed {
		t.Fatalf("B after A's receipt: %s", o.Kind)
	}
	if n := fake.Dispatches(); n != 1 {
		t.Errorf("the provider was called %d times", n)
	}
}

// Once A's lease has ended, B records DISPATCH_INTERRUPTED. A's reply,
// arriving later, loses its compare-and-set: A never calls the provider
// again and answers its own proposal from B's record; reconciliation
// (polls armed with the receipt) asks the provider what happened.
func TestSharedJournalLapsedLease(t *testing.T) {
	a, b, fake := sharedStages(t, 100*time.Millisecond, 100*time.Millisecond)
	inCall, release := blockFirst(fake)
	done := handleAsync(t, a, input(t, "p-1", "y"))
	<-inCall
	var res stages.Result
	// B is told to come back (RetryAfter) until A's lease has lapsed.
	testenv.WaitFor(t, "B past A's lease", func() bool {
		if res.RetryAfter > 0 {
			time.Sleep(res.RetryAfter) // as the runner's delayed redelivery would
		}
		res = handle(t, b, input(t, "p-2", "y"))
		return res.RetryAfter == 0
	})
	o := outcomeOf(t, res)
	if o.Kind != schema.KindReconciliationRequired || len(o.Incidents) != 1 || o.Incidents[0].Code != schema.CodeDispatchInterrupted {
		t.Fatalf("B after A's lease: %+v", o)
	}
	close(release)
	oa := outcomeOf(t, <-done)
	if oa.Kind != schema.KindReconciliationRequired || oa.Receipt.ReceiptID != o.Receipt.ReceiptID {
		t.Fatalf("A after losing: %+v, want B's receipt %s", oa, o.Receipt.ReceiptID)
	}
	if n := fake.Dispatches(); n != 1 {
		t.Errorf("the provider was called %d times", n)
	}
	rec, _, err := b.Journal.Load(o.Receipt.Fingerprint)
	if err != nil || len(rec.Proposals) != 2 || rec.ReceiptSeq != 1 || rec.InFlightBy != "p_a" {
		t.Errorf("record %+v %v", rec, err)
	}
}

// The request's not_after_ms is the in-flight record's lease end, as the
// shared journal stores it for every processor (and reconciliation) to
// read: the moment of the in-flight write plus the provider's timeout and
// the margin.
func TestSharedJournalRequestCarriesTheLease(t *testing.T) {
	a, _, fake := sharedStages(t, 2*time.Second, 5*time.Second)
	var got schema.DispatchRequest
	fake.OnDispatch(func(_ context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
		got = req
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed}, nil
	})
	o := outcomeOf(t, handle(t, a, input(t, "p-1", "lease")))
	rec, _, err := a.Journal.Load(*o.Fingerprint)
	if err != nil || got.NotAfterMs == 0 || got.NotAfterMs != rec.InFlightUntilMs || rec.InFlightUntilMs-rec.InFlightAtMs != 7000 {
		t.Errorf("not_after_ms %d; record in flight at %d until %d (%v)", got.NotAfterMs, rec.InFlightAtMs, rec.InFlightUntilMs, err)
	}
}
