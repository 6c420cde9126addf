package natsauth

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/subjects"
)

// responder serves subjects (queue group "g", as connectors scale out) and
// answers each request once with "served:<subject>"; it records the reply
// subjects it was given.
type responder struct {
	mu      sync.Mutex
	replies []string
}

func (r *responder) serve(t *testing.T, c *client, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if _, err := c.nc.QueueSubscribe(s, "g", func(m *nats.Msg) {
			r.mu.Lock()
			r.replies = append(r.replies, m.Reply)
			r.mu.Unlock()
			_ = m.Respond([]byte("served:" + m.Subject))
		}); err != nil {
			t.Fatal(err)
		}
	}
	c.noErrors(t)
}

func (r *responder) lastReply() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.replies[len(r.replies)-1]
}

// requestServed: the processor's request on subject reaches the responder
// and its reply reaches the processor.
func requestServed(t *testing.T, e *env, subject string) {
	t.Helper()
	m, err := e.proc.nc.Request(subject, []byte(`{"request":1}`), 2*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	if string(m.Data) != "served:"+subject {
		t.Fatalf("request %s: reply %q", subject, m.Data)
	}
}

// replyOnly checks a reply-only role: it serves exactly serve, subscribes
// to nothing in forbidden, and publishes nothing but one reply per request.
func replyOnly(t *testing.T, e *env, id identity, serve []string, forbidden map[string]string) {
	t.Helper()
	c := e.connect(t, id)
	var r responder
	r.serve(t, c, serve...)
	for _, s := range serve {
		requestServed(t, e, s)
	}
	c.noErrors(t)

	// One reply per request: a second reply to the same request is refused.
	used := r.lastReply()
	denyPublish(t, c, used)

	// Nothing else: not a request on its own subjects, not a reply subject
	// it never received, no public, internal or JetStream subject.
	denyPublish(t, c,
		e.subj.Outcome("x", "y"),
		e.subj.Proposal("A"),
		e.subj.Grant("A"),
		e.subj.Incident("dispatch"),
		e.subj.Stage(subjects.StageDispatch, subjects.KindProposal, "A.p1"),
		e.subj.Admin(subjects.AdminReceipt),
		"$KV."+e.subj.ActivityBucket()+".k",
		subjects.Inbox(e.roles.proc.pub)+".fake.1",
		subjects.Inbox(id.pub)+".x",
		"$JS.API.STREAM.INFO."+e.subj.OutcomesStream(),
		"$JS.API.DIRECT.GET."+e.subj.OutcomesStream()+"."+e.subj.Outcome("A", "p1"),
		"$JS.API.CONSUMER.CREATE."+e.subj.OutcomesStream(),
	)
	denyPublish(t, c, serve...)
	e.nothingStored(t, nil)
	e.noConsumers(t)
	denySubscribe(t, e, c, forbidden)
}

func TestConnectorServesOnlyItsProviders(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		s := e.subj
		replyOnly(t, e, e.roles.cp,
			[]string{s.ProviderDispatch("p"), s.ProviderReconcile("p")},
			map[string]string{
				s.ProviderDispatch("q"):       s.ProviderDispatch("q"),
				s.ProviderReconcile("q"):      s.ProviderReconcile("q"),
				"actions.provider.>":          s.ProviderDispatch("q"),
				"actions.provider.*.dispatch": s.ProviderDispatch("q"),
				s.DisclosureResolve():         s.DisclosureResolve(),
				s.Candidates("s"):             s.Candidates("s"),
				s.Outcomes():                  s.Outcome("A", "p1"),
				s.Internal():                  s.Stage(subjects.StageDispatch, subjects.KindProposal, "A.p1"),
				"_INBOX.>":                    subjects.Inbox(e.roles.proc.pub) + ".x",
			})
	})
}

func TestResolverServesOnlyResolve(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		s := e.subj
		replyOnly(t, e, e.roles.resolver,
			[]string{s.DisclosureResolve()},
			map[string]string{
				"actions.disclosure.>":  s.DisclosureResolve(),
				s.ProviderDispatch("p"): s.ProviderDispatch("p"),
				s.Candidates("s"):       s.Candidates("s"),
				s.Outcomes():            s.Outcome("A", "p1"),
				"_INBOX.>":              subjects.Inbox(e.roles.proc.pub) + ".x",
			})
	})
}

func TestSourceServesOnlyItsCandidates(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		s := e.subj
		replyOnly(t, e, e.roles.source,
			[]string{s.Candidates("s")},
			map[string]string{
				s.Candidates("s2"):      s.Candidates("s2"),
				"actions.candidates.>":  s.Candidates("s2"),
				"actions.candidates.*":  s.Candidates("s2"),
				s.DisclosureResolve():   s.DisclosureResolve(),
				s.ProviderDispatch("p"): s.ProviderDispatch("p"),
				"_INBOX.>":              subjects.Inbox(e.roles.proc.pub) + ".x",
			})
	})
}

// TestResponsePermissionPublishNilOrEmpty checks ENGINEERING.md's claim on
// the server: a response permission with Publish nil, or with an empty
// SubjectPermission, denies every publish except replies (the server turns
// both into an empty allow list). Without a response permission an empty
// SubjectPermission allows everything, while an empty non-nil allow list
// (what Users sets) denies everything.
func TestResponsePermissionPublishNilOrEmpty(t *testing.T) {
	proc, open, closed := newIdentity(t), newIdentity(t), newIdentity(t)
	nilPub, emptyPub, explicit := newIdentity(t), newIdentity(t), newIdentity(t)
	sub := &server.SubjectPermission{Allow: []string{"svc"}}
	srv := startServer(t, &server.Options{Host: "127.0.0.1", Port: -1, Nkeys: []*server.NkeyUser{
		{Nkey: proc.pub},
		{Nkey: nilPub.pub, Permissions: &server.Permissions{Subscribe: sub, Response: &server.ResponsePermission{}}},
		{Nkey: emptyPub.pub, Permissions: &server.Permissions{Publish: &server.SubjectPermission{}, Subscribe: sub, Response: &server.ResponsePermission{}}},
		{Nkey: explicit.pub, Permissions: &server.Permissions{Publish: &server.SubjectPermission{Allow: []string{}}, Subscribe: sub,
			Response: &server.ResponsePermission{MaxMsgs: server.DEFAULT_ALLOW_RESPONSE_MAX_MSGS, Expires: server.DEFAULT_ALLOW_RESPONSE_EXPIRATION}}},
		{Nkey: open.pub, Permissions: &server.Permissions{Publish: &server.SubjectPermission{}, Subscribe: sub}},
		{Nkey: closed.pub, Permissions: &server.Permissions{Publish: &server.SubjectPermission{Allow: []string{}}, Subscribe: sub}},
	}})
	conn := func(id identity) *client {
		c, err := dial(srv, id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.nc.Close)
		return c
	}
	p := conn(proc)
	watch, err := p.nc.SubscribeSync("elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	p.noErrors(t)
	for name, id := range map[string]identity{"publish nil": nilPub, "publish empty": emptyPub, "allow list empty": explicit} {
		t.Run("responder/"+name, func(t *testing.T) {
			c := conn(id)
			sub, err := c.nc.Subscribe("svc", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) })
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			c.noErrors(t)
			if m, err := p.nc.Request("svc", nil, 2*time.Second); err != nil || string(m.Data) != "ok" {
				t.Fatalf("reply: %v %v", msgData(m), err)
			}
			denyPublish(t, c, "elsewhere")
		})
	}
	t.Run("no responses/empty SubjectPermission allows all", func(t *testing.T) {
		c := conn(open)
		if err := c.nc.Publish("elsewhere", []byte("x")); err != nil {
			t.Fatal(err)
		}
		c.noErrors(t)
		if _, err := watch.NextMsg(2 * time.Second); err != nil {
			t.Fatalf("the publish did not arrive: %v", err)
		}
	})
	t.Run("no responses/empty allow list denies all", func(t *testing.T) {
		denyPublish(t, conn(closed), "elsewhere")
	})
	if m, err := watch.NextMsg(100 * time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Errorf("a denied publish arrived: %v %v", msgData(m), err)
	}
}

// TestNobodyServingIsNoResponders: a processor request that no connector,
// resolver or source is connected to serve fails at once with "no
// responders" through the import, as within one account: the nats adapter
// takes it for "not dispatched" (a timeout would mean "unknown").
func TestNobodyServingIsNoResponders(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		s := e.subj
		for _, subj := range []string{s.ProviderDispatch("p"), s.ProviderReconcile("q"), s.DisclosureResolve(), s.Candidates("s")} {
			start := time.Now()
			m, err := e.proc.nc.Request(subj, []byte(`{}`), 5*time.Second)
			if !errors.Is(err, nats.ErrNoResponders) || time.Since(start) > time.Second {
				t.Errorf("request %s: %v %v after %s, want %v at once", subj, msgData(m), err, time.Since(start), nats.ErrNoResponders)
			}
		}
		// Served by the other connector only: still nobody for p.
		cq := e.connect(t, e.roles.cq)
		var r responder
		r.serve(t, cq, s.ProviderDispatch("q"))
		requestServed(t, e, s.ProviderDispatch("q"))
		if _, err := e.proc.nc.Request(s.ProviderDispatch("p"), nil, 2*time.Second); !errors.Is(err, nats.ErrNoResponders) {
			t.Errorf("request for p with only cq connected: %v", err)
		}
	})
}

// TestSeveralProcessesOfOneConnector: processes sharing a connector's key
// in one queue group split its requests, each answered once.
func TestSeveralProcessesOfOneConnector(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		s := e.subj
		var r1, r2 responder
		r1.serve(t, e.connect(t, e.roles.cp), s.ProviderDispatch("p"))
		r2.serve(t, e.connect(t, e.roles.cp), s.ProviderDispatch("p"))
		for range 40 {
			requestServed(t, e, s.ProviderDispatch("p"))
		}
		r1.mu.Lock()
		r2.mu.Lock()
		defer r1.mu.Unlock()
		defer r2.mu.Unlock()
		if n1, n2 := len(r1.replies), len(r2.replies); n1+n2 != 40 || n1 == 0 || n2 == 0 {
			t.Errorf("the two processes served %d and %d of 40 requests", n1, n2)
		}
	})
}

// TestDuplicateServiceImportFansOut pins why a provider has one connector
// block: nats-server 2.15 accepts two imports of one subject from two
// accounts (programmatically and in configuration text) and delivers each
// request to both, queue groups notwithstanding: two dispatches.
func TestDuplicateServiceImportFansOut(t *testing.T) {
	proc, c1, c2 := newIdentity(t), newIdentity(t), newIdentity(t)
	P, A1, A2 := server.NewAccount(ProcessorAccount), server.NewAccount("connector-1"), server.NewAccount("connector-2")
	for _, a := range []*server.Account{A1, A2} {
		if err := a.AddServiceExport("svc", []*server.Account{P}); err != nil {
			t.Fatal(err)
		}
		if err := P.AddServiceImport(a, "svc", ""); err != nil {
			t.Fatalf("second import refused (then the config rule is belt and braces): %v", err)
		}
	}
	srv := startServer(t, &server.Options{Host: "127.0.0.1", Port: -1, Accounts: []*server.Account{P, A1, A2},
		Nkeys: []*server.NkeyUser{{Nkey: proc.pub, Account: P}, {Nkey: c1.pub, Account: A1}, {Nkey: c2.pub, Account: A2}}})
	var mu sync.Mutex
	got := 0
	for _, id := range []identity{c1, c2} {
		c, err := dial(srv, id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.nc.Close)
		if _, err := c.nc.QueueSubscribe("svc", "g", func(m *nats.Msg) {
			mu.Lock()
			got++
			mu.Unlock()
			_ = m.Respond([]byte("ok"))
		}); err != nil {
			t.Fatal(err)
		}
		c.noErrors(t)
	}
	p, err := dial(srv, proc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.nc.Close)
	if _, err := p.nc.Request("svc", nil, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	// If it never does, the server changed: revisit the one-connector-per-provider rule.
	waitFor(t, "the request to reach both connectors", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got >= 2
	})
	if err := p.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got != 2 {
		t.Errorf("one request reached %d connectors", got)
	}
}
