// Package clustertest runs processors that share a three-server JetStream
// cluster in process (SPEC §6): the stage consumers shared between them,
// one NATS server stopped and brought back, stream leaders moving during
// traffic. The SIGKILL tests of real processor binaries on a cluster are in
// internal/crashtest.
//
// Every test checks the same invariants, from the far side: the fake
// provider saw each idempotency key at most once, each reconciliation
// attempt id at most once, and every proposal's last stored outcome is
// terminal. Outcomes are read from the outcomes stream, not from a live
// subscription, which misses what is published while its server is down.
package clustertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var fastReconcile = testenv.WithConfig(func(c *config.Config) { c.Reconciliation.Interval = 200 * time.Millisecond })

// provider scripts the fake "demo" of env: an intent whose batch starts
// with "unk" answers indeterminate (reconciliation settles it as
// confirmed), every other one confirms.
type provider struct {
	fake  *adapters.Fake
	env   *testenv.Env
	stops []func() // of the operator's reads (recorded_test.go)
}

func newProvider(env *testenv.Env) *provider {
	p := &provider{fake: env.Fakes["demo"], env: env}
	recorderOf(env).ObserveFake(p.fake)
	p.fake.OnDispatch(func(_ context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
		if strings.Contains(string(req.Payload), `"unk`) {
			return schema.AdapterReply{Outcome: schema.ReplyIndeterminate}, nil
		}
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "fake:" + req.IdempotencyKey[:8]}, nil
	})
	p.fake.OnReconcile(func(_ context.Context, req schema.ReconcileRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed, EvidenceRefs: []string{"fake:reconciled"}}, nil
	})
	return p
}

// check asserts the run's invariants over its whole history (each key
// acted on at most once, each attempt id queried at most once, one answer
// per proposal agreeing with the provider, …: internal/history), every
// proposal published having ended.
func (p *provider) check(t *testing.T) {
	t.Helper()
	p.checkHistory(t, true)
}

// proposal is a granted lumber proposal for "demo" whose intent is
// batch's: proposals of one batch are one intent.
func proposal(t *testing.T, id, batch string) map[string]any {
	t.Helper()
	p := testenv.Lumber(id)
	testenv.Set(p, "intent.payload", map[string]any{"quantity": 20, "batch": batch, "note": payloadOnly})
	return testenv.Granted(t, p, "sku-1001", time.Now())
}

// payloadOnly is in every proposal's payload and must be stored nowhere:
// records are value-free.
const payloadOnly = "payload-only-3e1f9c"

// publish publishes a signed proposal, retrying (with its proposal id as
// Nats-Msg-Id, so a retry of a stored publish is dropped) while a server
// is down or a leader moves.
func publish(t *testing.T, env *testenv.Env, id, batch string) {
	t.Helper()
	body := testenv.Body(t, proposal(t, id, batch))
	m := nats.NewMsg(env.Subjects.Proposal(testenv.HostName))
	m.Data = body
	for k, v := range testenv.Sign(t, env.Host, body) {
		m.Header[k] = v
	}
	m.Header.Set(jetstream.MsgIDHeader, "test/"+id)
	call := time.Now()
	testenv.Retry(t, func(ctx context.Context) error {
		_, err := env.JS.PublishMsg(ctx, m)
		return err
	})
	proposed(env, id, call)
}

// terminal waits until the last stored outcome of each proposal is
// terminal and returns them.
func terminal(t *testing.T, env *testenv.Env, ids []string) map[string]schema.Outcome {
	t.Helper()
	out := map[string]schema.Outcome{}
	deadline := time.Now().Add(60 * time.Second)
	for _, id := range ids {
		subject := env.Subjects.Outcome(testenv.HostName, id)
		var o schema.Outcome
		if !testenv.Poll(time.Until(deadline), func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), testenv.APITimeout)
			defer cancel()
			st, err := env.JS.Stream(ctx, env.Subjects.OutcomesStream())
			var m *jetstream.RawStreamMsg
			if err == nil {
				m, err = st.GetLastMsgForSubject(ctx, subject)
			}
			if err != nil {
				if !errors.Is(err, jetstream.ErrMsgNotFound) && !errors.Is(err, context.DeadlineExceeded) {
					t.Logf("reading the outcome of %s: %v", id, err)
				}
				return false
			}
			if err := schema.Decode(m.Data, &o); err != nil {
				t.Fatalf("outcome of %s: %v", id, err)
			}
			return o.Terminal
		}) {
			dumpLogs(t, env)
			t.Fatalf("%s: no terminal outcome within 60s (last: %+v)", id, o)
		}
		out[id] = o
	}
	return out
}

// instances are the processors AddProcessor started, by Env, for dumpLogs.
var instances sync.Map // *testenv.Env → []*testenv.Instance

func addProcessor(t *testing.T, env *testenv.Env, name string) *testenv.Instance {
	in := env.AddProcessor(t, name)
	v, _ := instances.LoadOrStore(env, &[]*testenv.Instance{})
	l := v.(*[]*testenv.Instance)
	*l = append(*l, in)
	return in
}

// dumpLogs logs what the processors warned about, for a failure.
func dumpLogs(t *testing.T, env *testenv.Env) {
	t.Helper()
	logs := map[string][]byte{"first": env.Logs.Bytes()}
	if v, ok := instances.Load(env); ok {
		for _, in := range *v.(*[]*testenv.Instance) {
			logs[in.Name] = in.Logs.Bytes()
		}
	}
	for name, b := range logs {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) || strings.Contains(l, "reconciliation") {
				t.Logf("%s: %s", name, l)
			}
		}
	}
}

// traffic publishes n proposals named prefix-i, two per intent, every
// third intent answered indeterminate first; it returns their ids and
// checks, once all are terminal, that each ended confirmed.
type traffic struct {
	ids []string
}

func (tr *traffic) send(t *testing.T, env *testenv.Env, prefix string, n int) {
	t.Helper()
	for i := range n {
		batch := fmt.Sprintf("%s-%d", prefix, i/2)
		if (i/2)%3 == 0 {
			batch = "unk-" + batch
		}
		id := fmt.Sprintf("%s-%02d", prefix, i)
		publish(t, env, id, batch)
		tr.ids = append(tr.ids, id)
	}
}

func (tr *traffic) confirmed(t *testing.T, env *testenv.Env) {
	t.Helper()
	for id, o := range terminal(t, env, tr.ids) {
		if o.Kind != schema.KindConfirmed {
			t.Errorf("%s ended %s: %+v", id, o.Kind, o.Incidents)
		}
	}
}

// Two processors on one cluster, with NATS authentication on, share the
// stage consumers: every proposal gets its outcome, every intent reaches
// the provider once (both proposals of an intent may be handled by
// different processors), and reconciliation polls — message schedules in
// the reconciliation stream — settle the indeterminate ones, each attempt
// once.
func TestTwoProcessorsShareTheWork(t *testing.T) {
	env := testenv.New(t, testenv.Clustered(), testenv.WithAuth(), fastReconcile)
	prov := newProvider(env)
	second := addProcessor(t, env, "second")
	prov.readDuring(t)
	var tr traffic
	tr.send(t, env, "share", 24)
	tr.confirmed(t, env)
	prov.check(t)
	if env.Processor().InstanceID() == second.Processor().InstanceID() {
		t.Error("two processors share an instance id")
	}
	env.AssertNowhere(t, payloadOnly)
	if n := len(prov.fake.Delivered()); n != 12 {
		t.Errorf("%d intents reached the provider, want 12", n)
	}
}

// One NATS server of three stops while processors work, and comes back:
// nothing is lost or repeated, and a processor started meanwhile joins.
func TestOneServerDown(t *testing.T) {
	env := testenv.New(t, testenv.Clustered(), fastReconcile)
	prov := newProvider(env)
	addProcessor(t, env, "second")
	prov.readDuring(t)
	var tr traffic
	tr.send(t, env, "before", 8)
	// The server leading the journal, where every dispatch commits.
	down := env.Cluster.StreamLeader(t, env.Account(), "KV_"+env.Subjects.JournalBucket())
	env.Cluster.Stop(t, down)
	tr.send(t, env, "down", 12)
	addProcessor(t, env, "third")
	env.Cluster.Start(t, down)
	tr.send(t, env, "after", 8)
	tr.confirmed(t, env)
	prov.check(t)
}

// Stream leaders move while proposals flow: the journal's, the dispatch
// stage's and the reconciliation stage's (where the polls are scheduled).
func TestLeadersMoveDuringTraffic(t *testing.T) {
	env := testenv.New(t, testenv.Clustered(), fastReconcile)
	prov := newProvider(env)
	addProcessor(t, env, "second")
	prov.readDuring(t)
	var tr traffic
	for i, stream := range []string{
		"KV_" + env.Subjects.JournalBucket(),
		env.Subjects.StageStream(subjects.StageDispatch),
		env.Subjects.TimersStream(subjects.StageReconciliation),
	} {
		tr.send(t, env, fmt.Sprintf("move%d", i), 8)
		env.StepDownStream(t, stream)
	}
	tr.confirmed(t, env)
	prov.check(t)
}

// publishBody publishes a signed proposal body as is (of proposal id),
// with a message id.
func publishBody(t *testing.T, env *testenv.Env, id string, body []byte, msgID string) {
	t.Helper()
	defer proposed(env, id, time.Now())
	m := nats.NewMsg(env.Subjects.Proposal(testenv.HostName))
	m.Data = body
	for k, v := range testenv.Sign(t, env.Host, body) {
		m.Header[k] = v
	}
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	testenv.Retry(t, func(ctx context.Context) error {
		_, err := env.JS.PublishMsg(ctx, m)
		return err
	})
}

// operatorCode sends an operator request as is and returns its error code
// ("" for a result).
func operatorCode(t *testing.T, env *testenv.Env, verb string, body []byte, hdr nats.Header) string {
	t.Helper()
	r, err := env.NC.RequestMsg(&nats.Msg{Subject: env.Subjects.Admin(verb), Data: body, Header: hdr}, 20*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", verb, err)
	}
	var rep struct {
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.Data, &rep); err != nil {
		t.Fatalf("%s: reply %s: %v", verb, r.Data, err)
	}
	if rep.Error == nil {
		return ""
	}
	return rep.Error.Code
}

// What one processor admitted, and the operator requests it answered, are
// known to every other (SPEC §6): with the first processor gone, the
// second refuses the proposal id reused with other content (the incident
// only), answers a repeat of the proposal and a repeat of its delivery id
// with the recorded outcome, refuses a replayed signed operator request,
// and finds the intent of the proposal for the operator.
func TestAnotherProcessorKnowsWhatOneAdmitted(t *testing.T) {
	env := testenv.New(t, testenv.Clustered())
	prov := newProvider(env)
	// The first processor alone admits the proposal and answers a signed
	// operator request.
	first := proposal(t, "taken-1", "cedar")
	firstBody := testenv.Body(t, first)
	publishBody(t, env, "taken-1", firstBody, "test/taken-1")
	confirmed := terminal(t, env, []string{"taken-1"})["taken-1"]
	if confirmed.Kind != schema.KindConfirmed {
		t.Fatalf("taken-1 ended %s", confirmed.Kind)
	}
	st, err := admin.NewStamp(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	req := fmt.Appendf(nil, `{"requested_at_ms":%d,"nonce":%q}`, st.RequestedAtMs, st.Nonce)
	hdr, err := admin.Sign(env.Operator, req)
	if err != nil {
		t.Fatal(err)
	}
	if code := operatorCode(t, env, subjects.AdminReconcileList, req, hdr); code != "" {
		t.Fatalf("signed request: %s", code)
	}

	// Only the second processor runs from now on.
	second := addProcessor(t, env, "second")
	env.Stop(t)
	defer dumpLogs(t, env)

	// The id reused with other content: the incident, nothing else.
	reused := proposal(t, "taken-1", "spruce")
	testenv.Set(reused, "context.delivery.delivery_id", "delivery:reused")
	publishBody(t, env, "taken-1", testenv.Body(t, reused), "test/taken-1-reused")
	env.Recorder.WaitEvent(t, schema.PhaseAdmission, schema.CodeAdmissionProposalIDReused)

	// A repeat of the proposal under a new delivery id, and a repeat of
	// its delivery id: answered with the recorded outcome, republished
	// once in the replay window (the second repeat is read by direct get).
	var again map[string]any
	if err := json.Unmarshal(firstBody, &again); err != nil {
		t.Fatal(err)
	}
	testenv.Set(again, "context.delivery.delivery_id", "delivery:again")
	window := func() int64 { return time.Now().UnixMilli() / (10 * time.Minute).Milliseconds() }
	began := window()
	publishBody(t, env, "taken-1", testenv.Body(t, again), "test/taken-1-again")
	publishBody(t, env, "taken-1", firstBody, "test/taken-1-redelivered") // its delivery id again
	env.Recorder.WaitAll(t, "taken-1", testenv.Count(2))
	env.Quiesce(t)
	stored := env.StoredHistory(t)["taken-1"]
	if want := 2 + int(window()-began); len(stored) != want { // a replay window may have begun between the repeats
		t.Errorf("stored outcomes of taken-1: %d, want the outcome and a replay per window (%d)", len(stored), want)
	}
	for i, o := range stored {
		if o.Kind != schema.KindConfirmed || o.Receipt == nil || confirmed.Receipt == nil || o.Receipt.ReceiptID != confirmed.Receipt.ReceiptID {
			t.Errorf("stored outcome %d: %+v, want the recorded outcome", i, o)
		}
	}
	if n := env.Recorder.CountEvents(schema.PhaseAdmission, schema.CodeAdmissionProposalIDReused); n != 1 {
		t.Errorf("%d reuse incidents, want 1", n)
	}

	// The operator's replayed request is refused by the other processor.
	if code := operatorCode(t, env, subjects.AdminReconcileList, req, hdr); code != admin.CodeReplayed {
		t.Errorf("replayed to the other processor: code %q, want %q", code, admin.CodeReplayed)
	}
	// The other processor finds the proposal's intent.
	ref := schema.ProposalRef{Host: testenv.HostName, ProposalID: "taken-1"}
	rs, err := env.Admin().ReceiptsOf(context.Background(), admin.Target{Proposal: &ref})
	if err != nil {
		t.Fatalf("receipts of %s on the other processor: %v", ref, err)
	}
	if confirmed.Fingerprint == nil || rs.Fingerprint != *confirmed.Fingerprint {
		t.Errorf("receipts of %s: fingerprint %s", ref, rs.Fingerprint)
	}
	if second.Processor() == nil {
		t.Fatal("the second processor stopped")
	}
	env.AssertNowhere(t, payloadOnly)
	prov.check(t)
}
