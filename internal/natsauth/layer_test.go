package natsauth

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/subjects"
)

// The account layer alone (modeAccountsOnly: every per-user permission
// removed, each role with full rights inside its own account) still keeps
// each role to its row of SPEC §2.8. The per-user permissions are a second,
// independent layer (every other test runs with both).

// noResponders: a request on subject finds nobody in the role's account.
func noResponders(t *testing.T, c *client, subjects ...string) {
	t.Helper()
	for _, s := range subjects {
		if m, err := c.nc.Request(s, []byte(`{}`), 2*time.Second); !errors.Is(err, nats.ErrNoResponders) {
			t.Errorf("request %s: %v %v, want %v", s, msgData(m), err, nats.ErrNoResponders)
		}
	}
}

// publishAll publishes on each subject (allowed: no per-user layer).
func publishAll(t *testing.T, c *client, subjects ...string) {
	t.Helper()
	for _, s := range subjects {
		if err := c.nc.Publish(s, []byte(`{"forged":true}`)); err != nil {
			t.Fatal(err)
		}
	}
	c.noErrors(t)
}

// ingested returns once every stream nothingStored counts has stored what
// was routed to it before (publishAll flushed its client: the server has
// routed those publishes). A stream stores in arrival order, so once a
// sentinel the processor publishes there is acknowledged, anything routed
// to it earlier is stored too. The sentinels are deleted again, but for
// the bucket's (its stream denies deletes): one more message there. Only
// for modeAccountsOnly, where the processor may publish on every subject.
func (e *env) ingested(t *testing.T) {
	t.Helper()
	s := e.subj
	for stream, subject := range map[string]string{
		s.ProposalsStream(): s.Proposal("sentinel"), s.GrantsStream(): s.Grant("sentinel"),
		s.OutcomesStream(): s.OutcomeRecord("sentinel", "x"), s.IncidentsStream(): s.Incident("sentinel"),
		stageStream: s.Stage("sentinel", subjects.KindProposal, "x"), "KV_" + s.ActivityBucket(): "$KV." + s.ActivityBucket() + ".sentinel",
	} {
		seq := e.publishAs(t, subject, "{}")
		if stream == "KV_"+s.ActivityBucket() {
			continue
		}
		st, err := e.js.Stream(ctxT(t), stream)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.DeleteMsg(ctxT(t), seq); err != nil {
			t.Fatalf("stream %s: deleting the sentinel: %v", stream, err)
		}
	}
}

func msgValue(v jetstream.KeyValueEntry) string {
	if v == nil {
		return ""
	}
	return string(v.Value())
}

// everything subscribes to ">" in the role's account.
func everything(t *testing.T, c *client) *nats.Subscription {
	t.Helper()
	sub, err := c.nc.SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}
	c.noErrors(t)
	return sub
}

// received lists the subjects a subscription got within a short while.
func received(sub *nats.Subscription) []string {
	var out []string
	for {
		m, err := sub.NextMsg(150 * time.Millisecond)
		if err != nil {
			return out
		}
		out = append(out, m.Subject)
	}
}

// processorPublishesEverywhere: the processor publishes (core NATS) on
// every kind of subject of its account.
func (e *env) processorPublishesEverywhere(t *testing.T) {
	t.Helper()
	s := e.subj
	for _, subj := range []string{
		s.OutcomeRecord("A", "p9"), s.OutcomeRecord("B", "p9"), s.Incident("dispatch"),
		s.Stage(subjects.StageDispatch, subjects.KindProposal, "A.p9"), s.Proposal("B"), s.Grant("B"),
		s.ProviderDispatch("q"), s.DisclosureResolve(), s.Candidates("s2"), s.Admin(subjects.AdminReceipt),
		"$KV." + s.ActivityBucket() + ".k", subjects.Inbox(e.roles.proc.pub) + ".x",
	} {
		if err := e.proc.nc.Publish(subj, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	e.proc.noErrors(t)
}

func TestAccountLayerAloneHost(t *testing.T) {
	e := newEnv(t, modeAccountsOnly)
	s := e.subj
	out, bucket := s.OutcomesStream(), "KV_"+s.ActivityBucket()
	e.publishAs(t, s.OutcomeRecord("B", "p1"), `{"secret":"B-ONLY"}`)
	watched := e.watch(t, "actions.>", "$KV.>")
	a := e.connect(t, e.roles.hostA)

	// Another host's subjects, outcomes, incidents, internal subjects, the
	// bucket, the operator API, the responders' subjects: nothing reaches
	// the processor's account.
	publishAll(t, a, s.Proposal("B"), s.Grant("B"), s.Outcome("A", "p1"), s.Outcome("B", "p1"),
		s.Incident("admission"), s.Stage(subjects.StageDispatch, subjects.KindProposal, "B.p1"),
		"$KV."+s.ActivityBucket()+".k", s.Admin(subjects.AdminReconcileSolve),
		s.ProviderDispatch("p"), s.DisclosureResolve(), s.Candidates("s"))
	// No JetStream API but its own direct gets: not B's outcome, no other
	// stream, no management, no consumers.
	noResponders(t, a,
		subjects.DirectGetLast(out, s.Outcome("B", "p1")),
		"$JS.API.DIRECT.GET."+out,
		"$JS.API.STREAM.INFO."+out, "$JS.API.STREAM.NAMES", "$JS.API.STREAM.CREATE.X",
		"$JS.API.STREAM.PURGE."+out, "$JS.API.STREAM.DELETE."+bucket, "$JS.API.STREAM.MSG.DELETE."+out,
		"$JS.API.CONSUMER.CREATE."+out, "$JS.API.CONSUMER.CREATE."+out+".d."+s.HostOutcomes("A"),
		"$JS.API.CONSUMER.DURABLE.CREATE."+out+".d",
		s.Admin(subjects.AdminReceipt), s.ProviderDispatch("p"))
	// Its account has no JetStream of its own: the server's answer.
	m, err := a.nc.Request("$JS.API.INFO", nil, 2*time.Second)
	if err != nil || !strings.Contains(string(m.Data), `"code":503`) || !strings.Contains(string(m.Data), "JetStream not enabled for account") {
		t.Errorf("$JS.API.INFO: %q %v", msgData(m), err)
	}
	js, err := jetstream.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "MINE", Subjects: []string{"mine.>"}}); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("create a stream in its own account: %v, want %v", err, nats.ErrNoResponders)
	}

	// Live: only its own outcomes arrive (a subscription to ">", which
	// would also answer its own requests above).
	all := everything(t, a)
	e.processorPublishesEverywhere(t)
	if got := received(all); len(got) != 1 || got[0] != s.Outcome("A", "p9") {
		t.Errorf("host A received %q, want only %s", got, s.Outcome("A", "p9"))
	}
	if got := watched(); len(got) != 13 { // the processor's own publishes only (not its inbox), and the two outcomes the stream stored sent live
		t.Errorf("the processor's account received %d messages: %q", len(got), got)
	}
	e.nothingStored(t, map[string]uint64{out: 3, s.IncidentsStream(): 1, stageStream: 1, s.ProposalsStream(): 1,
		s.GrantsStream(): 1, bucket: 1})
	e.noConsumers(t)
}

func TestAccountLayerAloneConnector(t *testing.T) {
	e := newEnv(t, modeAccountsOnly)
	s := e.subj
	cp := e.connect(t, e.roles.cp)
	all, err := cp.nc.SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}
	var r responder
	r.serve(t, cp, s.ProviderDispatch("p"), s.ProviderReconcile("p"))

	// Its requests are served and answered; nobody serves the others.
	requestServed(t, e, s.ProviderDispatch("p"))
	requestServed(t, e, s.ProviderReconcile("p"))
	for _, subj := range []string{s.ProviderDispatch("q"), s.DisclosureResolve(), s.Candidates("s")} {
		if m, err := e.proc.nc.Request(subj, nil, 2*time.Second); !errors.Is(err, nats.ErrNoResponders) {
			t.Errorf("request %s: %v %v, want %v", subj, msgData(m), err, nats.ErrNoResponders)
		}
	}
	// It sees exactly its two requests (and its own replies to them).
	var requests []string
	for _, subj := range received(all) {
		if !strings.HasPrefix(subj, "_R_.") {
			requests = append(requests, subj)
		}
	}
	if len(requests) != 2 || requests[0] != s.ProviderDispatch("p") || requests[1] != s.ProviderReconcile("p") {
		t.Errorf("connector cp received %q", requests)
	}
	watched := e.watch(t, "actions.>", "$KV.>")
	e.processorPublishesEverywhere(t)
	if got := received(all); len(got) != 0 {
		t.Errorf("connector cp received %q", got)
	}
	if err := all.Unsubscribe(); err != nil { // it would answer its own requests
		t.Fatal(err)
	}
	// Its publishes stay in its account; it reaches no service and no
	// stream (its account has no JetStream: the server's own answer).
	publishAll(t, cp, s.Outcome("A", "p1"), s.Proposal("A"), s.Stage(subjects.StageDispatch, subjects.KindProposal, "A.p1"),
		"$KV."+s.ActivityBucket()+".k", subjects.Inbox(e.roles.proc.pub)+".x")
	noResponders(t, cp, s.Admin(subjects.AdminReceipt), s.ProviderDispatch("q"), s.DisclosureResolve(),
		subjects.DirectGetLast(s.OutcomesStream(), s.Outcome("A", "p1")))
	for _, subj := range []string{"$JS.API.STREAM.INFO." + s.OutcomesStream(), "$JS.API.STREAM.PURGE." + s.OutcomesStream()} {
		m, err := cp.nc.Request(subj, nil, 2*time.Second)
		if err != nil || !strings.Contains(string(m.Data), `"code":503`) || !strings.Contains(string(m.Data), "JetStream not enabled for account") {
			t.Errorf("%s: %q %v", subj, msgData(m), err)
		}
	}
	if got := watched(); len(got) != 13 { // the processor's own publishes only, and the two outcomes the stream stored sent live
		t.Errorf("the processor's account received %d messages: %q", len(got), got)
	}
	e.nothingStored(t, map[string]uint64{s.OutcomesStream(): 2, s.IncidentsStream(): 1, stageStream: 1, s.ProposalsStream(): 1,
		s.GrantsStream(): 1, "KV_" + s.ActivityBucket(): 1})
}

func TestAccountLayerAloneOperator(t *testing.T) {
	e := newEnv(t, modeAccountsOnly)
	s := e.subj
	out := s.OutcomesStream()
	e.publishAs(t, s.OutcomeRecord("A", "p1"), `{"host":"A"}`)
	if _, err := e.kv.Put(ctxT(t), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	o := e.connect(t, e.roles.operator)
	js, err := jetstream.New(o.nc)
	if err != nil {
		t.Fatal(err)
	}
	// Reading works through the imports.
	st, err := js.Stream(ctxT(t), out)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := st.GetMsg(ctxT(t), 1); err != nil || string(m.Data) != `{"host":"A"}` {
		t.Fatalf("direct get: %v", err)
	}
	kv, err := js.KeyValue(ctxT(t), s.ActivityBucket())
	if err != nil {
		t.Fatal(err)
	}
	if v, err := kv.Get(ctxT(t), "k"); err != nil || string(v.Value()) != "v" {
		t.Fatalf("bucket get: %v", err)
	}
	// Writing does not: a put finds no stream, management and consumers no
	// responder, and no stream captures what it publishes.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := kv.Put(ctx, "k", []byte("forged")); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Errorf("bucket put: %v, want %v", err, jetstream.ErrNoStreamResponse)
	}
	if _, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "d"}); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("create consumer: %v, want %v", err, nats.ErrNoResponders)
	}
	noResponders(t, o, "$JS.API.STREAM.PURGE."+out, "$JS.API.STREAM.DELETE."+out, "$JS.API.STREAM.MSG.DELETE."+out,
		"$JS.API.STREAM.UPDATE.KV_"+s.ActivityBucket(), "$JS.API.STREAM.CREATE.X", "$JS.API.STREAM.INFO."+s.ProposalsStream(),
		"$JS.API.DIRECT.GET."+stageStream, "$JS.API.CONSUMER.CREATE."+out)
	publishAll(t, o, s.Outcome("A", "p2"), s.Incident("admission"), s.Proposal("A"),
		s.Stage(subjects.StageDispatch, subjects.KindProposal, "A.p1"), "$KV."+s.ActivityBucket()+".k")
	e.ingested(t)
	e.nothingStored(t, map[string]uint64{out: 1, "KV_" + s.ActivityBucket(): 2}) // k and the sentinel
	if v, err := e.kv.Get(ctxT(t), "k"); err != nil || string(v.Value()) != "v" {
		t.Errorf("the bucket's key k: %q %v, want the processor's own value", msgValue(v), err) // a forged put replaces it, one message still
	}
	e.noConsumers(t)
}
