package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/pebble"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/metrics/version"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/reconciliation"
	"github.com/portcullis/portcullis/subjects"
)

// srv asks a $SRV subject of the admin service and decodes the first answer.
// window is the tests' window between accepted nonce stamps.
const window = 10 * time.Second

func srv(t *testing.T, nc *nats.Conn, verb micro.Verb, v any) {
	t.Helper()
	subject, err := micro.ControlSubject(verb, admin.ServiceName, "")
	if err != nil {
		t.Fatal(err)
	}
	m, err := nc.Request(subject, nil, 5*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	if err := json.Unmarshal(m.Data, v); err != nil {
		t.Fatalf("%s: %v: %s", subject, err, m.Data)
	}
}

// TestServiceDiscovery: the operator API is a micro service: PING, INFO
// and STATS name it, give the module version, list one endpoint per verb on
// <prefix>.admin.<verb> in the queue group, and count requests and
// refusals; a refusal carries the micro error headers beside the usual body.
func TestServiceDiscovery(t *testing.T) {
	clock := stages.NewManualClock(t0)
	env := testenv.New(t, testenv.WithClock(clock))
	var ping micro.Ping
	srv(t, env.NC, micro.PingVerb, &ping)
	if ping.Name != admin.ServiceName || ping.Version != version.Get().SemVer() || ping.ID == "" || ping.Metadata["prefix"] != "actions" {
		t.Errorf("ping = %+v", ping)
	}
	var info micro.Info
	srv(t, env.NC, micro.InfoVerb, &info)
	var verbs []string
	for _, e := range info.Endpoints {
		verb := e.Metadata["verb"]
		verbs = append(verbs, verb)
		if e.Subject != env.Subjects.Admin(verb) || e.QueueGroup != admin.QueueGroup {
			t.Errorf("endpoint %+v", e)
		}
	}
	if !slices.Equal(slices.Sorted(slices.Values(verbs)), slices.Sorted(slices.Values(subjects.AdminVerbs()))) {
		t.Errorf("endpoints for %q, want %q", verbs, subjects.AdminVerbs())
	}

	if _, err := env.Admin().List(context.Background()); err != nil {
		t.Fatal(err)
	}
	r, err := env.NC.RequestMsg(&nats.Msg{Subject: env.Subjects.Admin(subjects.AdminReconcileList), Data: []byte(`{}`)}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.Header.Get(micro.ErrorCodeHeader) != admin.CodeUnauthenticated || !strings.Contains(r.Header.Get(micro.ErrorHeader), "no signature") {
		t.Errorf("refusal headers = %v", r.Header)
	}
	var body rawReply
	if err := json.Unmarshal(r.Data, &body); err != nil || body.Error == nil || body.Error.Code != admin.CodeUnauthenticated || body.Result != nil {
		t.Errorf("refusal body = %s", r.Data)
	}

	var stats micro.Stats
	srv(t, env.NC, micro.StatsVerb, &stats)
	for _, e := range stats.Endpoints {
		if e.Subject != env.Subjects.Admin(subjects.AdminReconcileList) {
			continue
		}
		if e.NumRequests != 2 || e.NumErrors != 1 || !strings.Contains(e.LastError, admin.CodeUnauthenticated) {
			t.Errorf("reconcile.list stats = %+v", e)
		}
	}
}

// TestServiceDiscoveryWithAuth: with NATS authentication on, $SRV is the
// processor's account's alone: an operator can use the API but not see
// the service.
func TestServiceDiscoveryWithAuth(t *testing.T) {
	clock := stages.NewManualClock(t0)
	env := testenv.New(t, testenv.WithClock(clock), testenv.WithAuth())
	var ping micro.Ping
	srv(t, env.NC, micro.PingVerb, &ping) // the processor's own login
	if ping.Name != admin.ServiceName {
		t.Errorf("ping = %+v", ping)
	}
	if _, err := env.Admin().List(context.Background()); err != nil {
		t.Fatalf("operator request: %v", err)
	}
	op := env.ConnectAs(t, env.Operator)
	if _, err := op.Request("$SRV.PING", nil, time.Second); err == nil {
		t.Error("an operator reached $SRV.PING")
	}
}

// plainServer starts a nats-server without JetStream and opens an
// in-memory store, for admin servers built by hand; both end with the test.
func plainServer(t *testing.T) (*server.Server, *pebble.Store) {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	st, err := pebble.Open(t.TempDir(), pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return ns, st
}

// TestQueueGroup: of several processors serving one NATS system, exactly
// one answers each request.
func TestQueueGroup(t *testing.T) {
	ns, st := plainServer(t)
	clock := stages.NewManualClock(t0)
	op, _ := nkeys.CreateUser()
	opPub, _ := op.PublicKey()
	subj := subjects.Default()
	rec := &reconciliation.Stage{Journal: pebble.NewJournal(st), Route: stages.Route{Subjects: subj, Self: "reconciliation"}, Clock: clock, Metrics: metrics.New(nil, nil), MaxAttempts: 3}
	var conns []*nats.Conn
	for range 2 {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		conns = append(conns, nc)
		s := &admin.Server{Store: st, Journal: pebble.NewJournal(st), Nonces: pebble.Nonces{Store: st, Window: window}, Reconciliation: engine.Resolver{Stage: rec}, ReconcileMaxAttempts: 3, Subjects: subj, Clock: clock, Operators: []config.Role{{Name: "oncall", PublicKey: opPub}}}
		stop, err := s.Serve(nc)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
	}
	client, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	replies, err := client.SubscribeSync("replies.>")
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		body := listBody(t0.UnixMilli(), newNonce(t))
		m := &nats.Msg{Subject: subj.Admin(subjects.AdminReconcileList), Reply: fmt.Sprintf("replies.%d", i), Data: body, Header: sign(t, op, body)}
		if err := client.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]int{}
	for {
		m, err := replies.NextMsg(500 * time.Millisecond)
		if errors.Is(err, nats.ErrTimeout) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[m.Subject]++
		var r rawReply
		if json.Unmarshal(m.Data, &r) != nil || r.Error != nil {
			t.Errorf("reply %s", m.Data)
		}
	}
	if len(got) != n {
		t.Errorf("%d of %d requests answered", len(got), n)
	}
	for s, c := range got {
		if c != 1 {
			t.Errorf("%s answered %d times", s, c)
		}
	}
	// Both instances are one service; together they served each request once.
	sub, err := client.SubscribeSync("stats")
	if err != nil {
		t.Fatal(err)
	}
	if err := client.PublishRequest("$SRV.STATS."+admin.ServiceName, "stats", nil); err != nil {
		t.Fatal(err)
	}
	total, instances := 0, 0
	for range 2 {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var s micro.Stats
		if err := json.Unmarshal(m.Data, &s); err != nil {
			t.Fatal(err)
		}
		instances++
		for _, e := range s.Endpoints {
			total += e.NumRequests
		}
	}
	if instances != 2 || total != n {
		t.Errorf("%d instances served %d requests, want 2 and %d", instances, total, n)
	}
}

// parkedAndConfirmed publishes one proposal that parks for approval and
// one that is confirmed, and returns their fingerprints.
func parkedAndConfirmed(t *testing.T, env *testenv.Env, clock stages.Clock) (parked, confirmed string) {
	t.Helper()
	p := testenv.Lumber("prop-park")
	env.PublishSigned(t, p, env.Host)
	env.Recorder.Wait(t, "prop-park", testenv.Kind(schema.KindNeedsApproval))
	parked = testenv.FingerprintOf(t, p, "sku-1001")
	c := testenv.Set(testenv.Lumber("prop-ok"), "intent.payload", map[string]any{"quantity": 30})
	c = testenv.Granted(t, c, "sku-1001", clock.Now())
	env.PublishSigned(t, c, env.Host)
	env.Recorder.Wait(t, "prop-ok", testenv.Kind(schema.KindConfirmed))
	confirmed = testenv.FingerprintOf(t, c, "sku-1001")
	activity(t, env, parked, func(a *schema.Activity) bool { return a.Status == schema.ActivityAwaitingApproval })
	activity(t, env, confirmed, func(a *schema.Activity) bool { return a.Status == string(schema.StatusConfirmed) })
	return parked, confirmed
}

// TestApprovalsAndProposals: approvals.list and proposals.get, and
// receipts.get by proposal, against a real processor.
func TestApprovalsAndProposals(t *testing.T) {
	clock := stages.NewManualClock(t0)
	env := testenv.New(t, testenv.WithClock(clock))
	ctx := context.Background()
	ops := env.Admin()
	fpPark, fpOK := parkedAndConfirmed(t, env, clock)

	ap, err := ops.Approvals(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := admin.ParkedApproval{Host: testenv.HostName, ProposalID: "prop-park", Fingerprint: fpPark, Referent: "sku-1001", Provider: "demo",
		ArrivedAtMs: t0.UnixMilli(), ExpiresAtMs: t0.Add(env.Config.Approval.TTL).UnixMilli()}
	if ap.Total != 1 || len(ap.Approvals) != 1 || ap.Approvals[0] != want || ap.NowMs != t0.UnixMilli() {
		t.Errorf("approvals = %+v, want %+v", ap, want)
	}
	if _, err := ops.Approvals(ctx, admin.MaxApprovalsLimit+1); !errors.Is(err, admin.ErrBadRequest) {
		t.Errorf("limit too large: %v", err)
	}

	p, err := ops.Proposal(ctx, schema.ProposalRef{Host: testenv.HostName, ProposalID: "prop-park"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Fingerprint != fpPark || p.Approval == nil || p.Approval.State != string(kv.StateParked) || p.Approval.ExpiresAtMs != want.ExpiresAtMs ||
		p.Receipt != nil || p.Truncated || len(p.Outcomes) != 1 || p.Outcomes[0].Outcome.Kind != schema.KindNeedsApproval || p.Outcomes[0].Seq == 0 {
		t.Errorf("parked proposal = %+v", p)
	}
	p, err = ops.Proposal(ctx, schema.ProposalRef{Host: testenv.HostName, ProposalID: "prop-ok"})
	if err != nil {
		t.Fatal(err)
	}
	last := p.Outcomes[len(p.Outcomes)-1].Outcome
	if p.Fingerprint != fpOK || p.Approval == nil || p.Approval.State != string(kv.StatePermitted) || p.Receipt == nil ||
		p.Receipt.Status != schema.StatusConfirmed || last.Kind != schema.KindConfirmed || last.ProposalID != "prop-ok" {
		t.Errorf("confirmed proposal = %+v", p)
	}
	for i := 1; i < len(p.Outcomes); i++ {
		if p.Outcomes[i].Seq <= p.Outcomes[i-1].Seq {
			t.Errorf("outcomes out of order: %+v", p.Outcomes)
		}
	}

	byFP, err := ops.Receipts(ctx, fpOK)
	if err != nil {
		t.Fatal(err)
	}
	ref := schema.ProposalRef{Host: testenv.HostName, ProposalID: "prop-ok"}
	byRef, err := ops.ReceiptsOf(ctx, admin.Target{Proposal: &ref})
	if err != nil || byRef.Fingerprint != fpOK || len(byRef.Receipts) != len(byFP.Receipts) || byRef.Receipts[0].ReceiptID != byFP.Receipts[0].ReceiptID {
		t.Errorf("receipts by proposal = %+v, %v", byRef, err)
	}
	parkedRef := schema.ProposalRef{Host: testenv.HostName, ProposalID: "prop-park"}
	if _, err := ops.ReceiptsOf(ctx, admin.Target{Proposal: &parkedRef}); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("receipts of a parked proposal: %v", err)
	}
	for _, c := range []struct {
		name string
		ref  schema.ProposalRef
		want error
	}{
		{"unknown", schema.ProposalRef{Host: testenv.HostName, ProposalID: "prop-none"}, admin.ErrNotFound},
		{"another host", schema.ProposalRef{Host: testenv.OtherHostName, ProposalID: "prop-ok"}, admin.ErrNotFound},
		{"host not a token", schema.ProposalRef{Host: "a.b", ProposalID: "prop-ok"}, admin.ErrBadRequest},
		{"bad id", schema.ProposalRef{Host: testenv.HostName, ProposalID: "prop ok"}, admin.ErrBadRequest},
	} {
		if _, err := ops.Proposal(ctx, c.ref); !errors.Is(err, c.want) {
			t.Errorf("proposal %s: %v, want %v", c.name, err, c.want)
		}
		if _, err := ops.ReceiptsOf(ctx, admin.Target{Proposal: &c.ref}); !errors.Is(err, c.want) {
			t.Errorf("receipts %s: %v, want %v", c.name, err, c.want)
		}
	}
	// Both a fingerprint and a proposal, or neither: refused.
	if _, err := ops.ReceiptsOf(ctx, admin.Target{Fingerprint: fpOK, Proposal: &ref}); !errors.Is(err, admin.ErrBadRequest) {
		t.Errorf("both: %v", err)
	}
	if _, err := ops.ReceiptsOf(ctx, admin.Target{}); !errors.Is(err, admin.ErrBadRequest) {
		t.Errorf("neither: %v", err)
	}
}

// TestProposalOutcomesBounded: a proposal's outcome history is read from
// the outcome stream by subject, skipping other proposals' messages, and
// bounded: the first ones, then the last.
func TestProposalOutcomesBounded(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	publish := func(id string, i int) {
		o := schema.NewOutcome(schema.ProposalRef{Host: testenv.HostName, ProposalID: id}, schema.KindDenied, int64(i+1),
			schema.NewIncident(schema.PhaseAuthorization, schema.CodeGrantExpired))
		if _, err := env.JS.Publish(ctx, env.Subjects.OutcomeRecord(testenv.HostName, id), schema.MustMarshal(o)); err != nil {
			t.Fatal(err)
		}
	}
	const many = admin.MaxProposalOutcomes + 20
	for i := range many {
		publish("prop-many", i)
		if i < admin.MaxProposalOutcomes {
			publish("prop-exact", i)
		}
		if i < admin.MaxProposalOutcomes+1 {
			publish("prop-one-more", i)
		}
	}
	for _, c := range []struct {
		id        string
		n         int
		lastAt    int64
		truncated bool
	}{
		{"prop-many", admin.MaxProposalOutcomes, many, true},
		{"prop-exact", admin.MaxProposalOutcomes, admin.MaxProposalOutcomes, false},
		{"prop-one-more", admin.MaxProposalOutcomes, admin.MaxProposalOutcomes + 1, true},
	} {
		p, err := env.Admin().Proposal(ctx, schema.ProposalRef{Host: testenv.HostName, ProposalID: c.id})
		if err != nil {
			t.Fatalf("%s: %v", c.id, err)
		}
		if len(p.Outcomes) != c.n || p.Truncated != c.truncated || p.Fingerprint != "" || p.Approval != nil {
			t.Errorf("%s: %d outcomes, truncated %v, %+v", c.id, len(p.Outcomes), p.Truncated, p.Approval)
			continue
		}
		if first, last := p.Outcomes[0].Outcome, p.Outcomes[c.n-1].Outcome; first.AtMs != 1 || last.AtMs != c.lastAt || first.ProposalID != c.id {
			t.Errorf("%s: first at %d, last at %d", c.id, first.AtMs, last.AtMs)
		}
		for i := range c.n - 1 {
			if p.Outcomes[i].Outcome.AtMs != int64(i+1) {
				t.Fatalf("%s: outcome %d at %d", c.id, i, p.Outcomes[i].Outcome.AtMs)
			}
		}
	}
}

// TestActivityList: snapshots, the most recently changed first, in pages.
func TestActivityList(t *testing.T) {
	clock := stages.NewManualClock(t0)
	env := testenv.New(t, testenv.WithClock(clock))
	ctx := context.Background()
	ops := env.Admin()
	if l, err := ops.Activity(ctx, 0, 0); err != nil || len(l.Entries) != 0 || l.Next != 0 {
		t.Fatalf("empty bucket: %+v %v", l, err)
	}
	fpPark, fpOK := parkedAndConfirmed(t, env, clock)
	all, err := ops.Activity(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Entries) != 2 || all.Next != 0 || all.Entries[0].Revision <= all.Entries[1].Revision {
		t.Fatalf("all = %+v", all)
	}
	fps := []string{all.Entries[0].Fingerprint, all.Entries[1].Fingerprint}
	if !slices.Contains(fps, fpPark) || !slices.Contains(fps, fpOK) {
		t.Errorf("fingerprints %q", fps)
	}
	for _, e := range all.Entries {
		if e.Provider != "demo" || e.Referent != "sku-1001" || e.Operation != "adjust_stock" || len(e.Proposals) != 1 {
			t.Errorf("entry %+v", e)
		}
		if e.Fingerprint == fpOK && e.Status != string(schema.StatusConfirmed) || e.Fingerprint == fpPark && e.Status != schema.ActivityAwaitingApproval {
			t.Errorf("status of %+v", e)
		}
	}
	p1, err := ops.Activity(ctx, 1, 0)
	if err != nil || len(p1.Entries) != 1 || p1.Entries[0].Fingerprint != all.Entries[0].Fingerprint || p1.Entries[0].Revision != all.Entries[0].Revision || p1.Next == 0 {
		t.Fatalf("page 1 = %+v %v", p1, err)
	}
	p2, err := ops.Activity(ctx, 1, p1.Next)
	if err != nil || len(p2.Entries) != 1 || p2.Entries[0].Fingerprint != all.Entries[1].Fingerprint {
		t.Fatalf("page 2 = %+v %v", p2, err)
	}
	if p2.Next != 0 {
		p3, err := ops.Activity(ctx, 1, p2.Next)
		if err != nil || len(p3.Entries) != 0 || p3.Next != 0 {
			t.Errorf("page 3 = %+v %v", p3, err)
		}
	}
	// A change moves an intent to the front.
	bucket, err := env.JS.KeyValue(ctx, env.Subjects.ActivityBucket())
	if err != nil {
		t.Fatal(err)
	}
	older := strings.TrimPrefix(all.Entries[1].Fingerprint, "sha256:")
	e, err := bucket.Get(ctx, older)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bucket.Put(ctx, older, e.Value()); err != nil {
		t.Fatal(err)
	}
	if again, err := ops.Activity(ctx, 0, 0); err != nil || len(again.Entries) != 2 || again.Entries[0].Fingerprint != all.Entries[1].Fingerprint {
		t.Errorf("after a change = %+v %v", again, err)
	}
	if _, err := ops.Activity(ctx, admin.MaxActivityLimit+1, 0); !errors.Is(err, admin.ErrBadRequest) {
		t.Errorf("limit too large: %v", err)
	}
}

// TestResolveByProposal: a resolution may name a proposal of the intent.
func TestResolveByProposal(t *testing.T) {
	clock := stages.NewManualClock(t0)
	env := testenv.New(t, testenv.WithClock(clock))
	fp := indeterminate(t, env, clock, "prop-ind")
	ref := schema.ProposalRef{Host: testenv.HostName, ProposalID: "prop-ind"}
	res, err := env.Admin().ResolveTarget(context.Background(), admin.Target{Proposal: &ref}, false, "ticket:OPS-3")
	if err != nil {
		t.Fatal(err)
	}
	if res.Fingerprint != fp || res.OutcomeKind != schema.KindRejected || res.Receipt.Reconciliation.Operator != testenv.OperatorName {
		t.Errorf("resolved = %+v", res)
	}
	env.Recorder.Wait(t, "prop-ind", testenv.Kind(schema.KindRejected))
	unknown := schema.ProposalRef{Host: testenv.HostName, ProposalID: "prop-none"}
	if _, err := env.Admin().ResolveTarget(context.Background(), admin.Target{Proposal: &unknown}, true, "ticket:1"); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("unknown proposal: %v", err)
	}
}
