package natsauth

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/subjects"
)

// The server publishes its answer to a request (a JetStream PubAck, a
// direct-get response, a service's reply) on whatever reply subject the
// requester chose, and no permission checks that subject. In one shared
// account a host could so plant server-made messages on another host's
// outcome subject (even a copy of its own genuine CONFIRMED outcome), on
// internal subjects and in the activity bucket. With each role in its own
// account the answer is delivered in the requester's account. These tests
// aim every permitted request of a host and of an operator at the doors
// that mattered and check that nothing lands there.

// inject publishes on subject with a reply subject of the caller's choice.
func inject(t *testing.T, c *client, subject, reply, body string) {
	t.Helper()
	if err := c.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Data: []byte(body)}); err != nil {
		t.Fatal(err)
	}
}

// injectionTargets are the reply subjects of the tests: another host's
// outcome, an internal stage subject, the activity bucket, and JetStream
// API requests that would purge or delete.
func (e *env) injectionTargets() []string {
	s := e.subj
	return []string{
		s.Outcome("B", "p1"),
		s.Stage(subjects.StageDispatch, subjects.KindProposal, "B.p1"),
		"$KV." + s.ActivityBucket() + ".k",
		"$JS.API.STREAM.PURGE." + s.OutcomesStream(),
		"$JS.API.STREAM.MSG.DELETE." + s.OutcomesStream(),
		"$JS.API.STREAM.DELETE." + stageStream,
	}
}

// watch records every message that reaches the processor's account on
// filters until the test ends; the returned function lists their subjects.
func (e *env) watch(t *testing.T, filters ...string) func() []string {
	t.Helper()
	var mu sync.Mutex
	var got []string
	for _, f := range filters {
		if _, err := e.proc.nc.Subscribe(f, func(m *nats.Msg) {
			mu.Lock()
			got = append(got, m.Subject)
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	e.proc.noErrors(t)
	return func() []string {
		if err := e.proc.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// waitMsgs waits until a stream holds n messages (proof that the server
// handled the publishes, and so sent their PubAcks).
func (e *env) waitMsgs(t *testing.T, stream string, n uint64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d messages in stream %s", n, stream), func() bool { return e.streamMsgs(t, stream) >= n })
}

// bSeesNothing: host B received nothing live, and its direct get of its
// outcome p1 finds no message (404): nothing was stored on its subject.
func (e *env) bSeesNothing(t *testing.T, live *nats.Subscription, b *client) {
	t.Helper()
	if m, err := live.NextMsg(200 * time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Errorf("host B received %v live (error %v)", m, err)
	}
	m, err := b.nc.Request(subjects.DirectGetLast(e.subj.OutcomesStream(), e.subj.Outcome("B", "p1")), nil, 2*time.Second)
	if err != nil {
		t.Fatalf("B's direct get: %v", err)
	}
	if st := m.Header.Get("Status"); st != "404" || len(m.Data) != 0 {
		t.Errorf("B's direct get of its outcome p1: status %q, %q; want 404 and no message", st, m.Data)
	}
}

func TestReplySubjectInjectionByHostLandsNowhere(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		s := e.subj
		const genuine = `{"host":"A","kind":"CONFIRMED"}`
		e.publishAs(t, s.OutcomeRecord("A", "p1"), genuine)
		watched := e.watch(t, s.Outcomes(), s.Internal(), "$KV.>",
			"$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.DELETE.>", "$JS.API.STREAM.MSG.DELETE.>")
		b := e.connect(t, e.roles.hostB)
		live, err := b.nc.SubscribeSync(s.HostOutcomes("B"))
		if err != nil {
			t.Fatal(err)
		}
		b.noErrors(t)

		a := e.connect(t, e.roles.hostA)
		ownGet := subjects.DirectGetLast(s.OutcomesStream(), s.Outcome("A", "p1"))
		targets := e.injectionTargets()
		for _, reply := range targets {
			inject(t, a, s.Proposal("A"), reply, `{"proposal_id":"x"}`) // a PubAck
			inject(t, a, s.Grant("A"), reply, `{"grant":"x"}`)          // a PubAck
			inject(t, a, ownGet, reply, "")                             // A's genuine outcome
		}
		a.noErrors(t)
		n := uint64(len(targets))
		e.waitMsgs(t, s.ProposalsStream(), n)
		e.waitMsgs(t, s.GrantsStream(), n)
		// The direct gets were answered too: the same request with A's own
		// inbox still is.
		if m, err := a.nc.Request(ownGet, nil, 2*time.Second); err != nil || string(m.Data) != genuine {
			t.Fatalf("A's own direct get: %q %v", msgData(m), err)
		}

		e.bSeesNothing(t, live, b)
		e.nothingStored(t, map[string]uint64{s.ProposalsStream(): n, s.GrantsStream(): n, s.OutcomesStream(): 1})
		if got := watched(); len(got) != 0 {
			t.Errorf("reached the processor's account: %q", got)
		}
		a.noErrors(t)
	})
}

// TestReplySubjectInjectionByOperatorLandsNowhere aims an operator's
// permitted requests (stream info, direct gets, and operator API requests
// that the processor itself answers) at the same subjects. The answers do
// arrive — on the operator's own outcome subscription, in its own account
// — and nowhere else.
func TestReplySubjectInjectionByOperatorLandsNowhere(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		s := e.subj
		var mu sync.Mutex
		served := 0
		if _, err := e.proc.nc.Subscribe(s.Admins(), func(m *nats.Msg) {
			mu.Lock()
			served++
			mu.Unlock()
			_ = m.Respond([]byte(`{"admin":true}`))
		}); err != nil {
			t.Fatal(err)
		}
		const genuine = `{"host":"A","kind":"CONFIRMED"}`
		e.publishAs(t, s.OutcomeRecord("A", "p1"), genuine)
		e.publishAs(t, s.Incident("admission"), `{"code":"X"}`)
		watched := e.watch(t, s.Outcomes(), s.Internal(), "$KV.>",
			"$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.DELETE.>", "$JS.API.STREAM.MSG.DELETE.>")
		b := e.connect(t, e.roles.hostB)
		live, err := b.nc.SubscribeSync(s.HostOutcomes("B"))
		if err != nil {
			t.Fatal(err)
		}
		b.noErrors(t)

		o := e.connect(t, e.roles.operator)
		own, err := o.nc.SubscribeSync(s.Outcomes())
		if err != nil {
			t.Fatal(err)
		}
		o.noErrors(t)
		targets := e.injectionTargets()
		for _, reply := range targets {
			inject(t, o, s.Admin(subjects.AdminReceipt), reply, "{}")                  // the processor's reply
			inject(t, o, "$JS.API.STREAM.INFO."+s.OutcomesStream(), reply, "")         // stream info
			inject(t, o, "$JS.API.DIRECT.GET."+s.OutcomesStream(), reply, `{"seq":1}`) // A's genuine outcome
			inject(t, o, subjects.DirectGetLast(s.IncidentsStream(), s.Incident("admission")), reply, "")
		}
		o.noErrors(t)
		waitFor(t, fmt.Sprintf("the processor to serve all %d operator requests", len(targets)), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return served == len(targets)
		})
		// The four answers aimed at actions.outcomes.B.p1 reached the
		// operator's own subscription, in its own account.
		var answers [][]byte
		for range 4 {
			m, err := own.NextMsg(2 * time.Second)
			if err != nil {
				t.Fatalf("the operator's own subscription: %v", err)
			}
			if m.Subject != s.Outcome("B", "p1") {
				t.Errorf("operator received %s", m.Subject)
			}
			answers = append(answers, m.Data)
		}
		if !slices.ContainsFunc(answers, func(d []byte) bool { return string(d) == genuine }) {
			t.Errorf("the direct get's answer is not among %q", answers)
		}

		e.bSeesNothing(t, live, b)
		e.nothingStored(t, map[string]uint64{s.OutcomesStream(): 1, s.IncidentsStream(): 1})
		if got := watched(); len(got) != 0 {
			t.Errorf("reached the processor's account: %q", got)
		}
		if m, err := own.NextMsg(100 * time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
			t.Errorf("the operator received more: %v %v", m, err)
		}
	})
}

// TestInjectedAnswersStayInTheRolesAccount removes every per-user
// permission (the account layer alone) to show where the answers go: into
// the injecting host's own account, where its own subscriptions see them.
// An answer aimed at one of the host's own imports goes on to the
// processor's account as a publish of that host's — what it may publish
// itself; one aimed at another host's import goes nowhere.
func TestInjectedAnswersStayInTheRolesAccount(t *testing.T) {
	e := newEnv(t, modeAccountsOnly)
	s := e.subj
	e.publishAs(t, s.OutcomeRecord("A", "p1"), `{"host":"A"}`)
	b := e.connect(t, e.roles.hostB)
	bAll, err := b.nc.SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}
	b.noErrors(t)
	a := e.connect(t, e.roles.hostA)
	aAll, err := a.nc.SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}
	a.noErrors(t)

	targets := e.injectionTargets()
	for _, reply := range targets {
		inject(t, a, s.Proposal("A"), reply, "{}")
	}
	seen := map[string]bool{}
	for range 2 * len(targets) { // its own publish (echo) and the PubAck
		m, err := aAll.NextMsg(2 * time.Second)
		if err != nil {
			t.Fatalf("host A's own subscription: %v", err)
		}
		if m.Subject != s.Proposal("A") {
			var ack jetstream.PubAck
			if err := json.Unmarshal(m.Data, &ack); err != nil || ack.Stream != s.ProposalsStream() {
				t.Errorf("%s: %q is not a PubAck", m.Subject, m.Data)
			}
		}
		seen[m.Subject] = true
	}
	for _, reply := range targets {
		if !seen[reply] {
			t.Errorf("the PubAck aimed at %s did not arrive in host A's account", reply)
		}
	}
	// Aimed at one of its own imports, an answer goes on to the processor's
	// account as a publish of A's own (what A may publish anyway; the
	// server drops one that would go back through the import it came
	// from). Aimed at B's, nowhere.
	inject(t, a, s.Proposal("A"), s.Grant("A"), "{}")
	inject(t, a, subjects.DirectGetLast(s.OutcomesStream(), s.Outcome("A", "p1")), s.Grant("A"), "")
	inject(t, a, s.Proposal("A"), s.Proposal("A"), "{}") // the PubAck would come back by the same import
	inject(t, a, s.Proposal("A"), s.Proposal("B"), "{}")
	inject(t, a, s.Proposal("A"), s.Grant("B"), "{}")
	n := uint64(len(targets)) + 4
	e.waitMsgs(t, s.ProposalsStream(), n)
	e.waitMsgs(t, s.GrantsStream(), 2)
	// What could reach B now are the server's own answers (PubAcks), sent
	// by JetStream after it stored the messages and with no completion a
	// client can see: give them time to arrive.
	time.Sleep(100 * time.Millisecond)
	if m, err := bAll.NextMsg(100 * time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Errorf("host B received %v (error %v)", m, err)
	}
	for stream, filter := range map[string]string{s.ProposalsStream(): s.Proposals(), s.GrantsStream(): s.Grants()} {
		st, err := e.js.Stream(ctxT(t), stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctxT(t), jetstream.WithSubjectFilter(filter))
		if err != nil {
			t.Fatal(err)
		}
		for subject, count := range info.State.Subjects {
			if !strings.HasSuffix(subject, ".A") {
				t.Errorf("%d messages stored on %s", count, subject)
			}
		}
	}
	e.nothingStored(t, map[string]uint64{s.ProposalsStream(): n, s.GrantsStream(): 2, s.OutcomesStream(): 1})
}
