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

// Every test here is one door of SPEC §2.8 against a real server, once for
// each rendering of the model (eachServer): each role in its own account,
// with its per-user permissions inside. A forbidden publish or subscribe
// returns nil and is reported asynchronously (client.violation); a
// forbidden request times out. layer_test.go checks the account layer
// without the per-user one.

const forbiddenRequestTimeout = 300 * time.Millisecond

func TestAnonymousConnectRefused(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		nc, err := nats.Connect(e.srv.ClientURL(), nats.NoReconnect())
		if nc != nil {
			nc.Close()
		}
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Fatalf("anonymous connect: %v, want %v", err, nats.ErrAuthorization)
		}
	})
}

func TestUnknownKeyRefused(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		stranger := newIdentity(t)
		if c, err := dial(e.srv, stranger); !errors.Is(err, nats.ErrAuthorization) {
			if c != nil {
				c.nc.Close()
			}
			t.Fatalf("unknown key: %v, want %v", err, nats.ErrAuthorization)
		}
		// A configured public key signed by another key is a stranger too.
		impostor := identity{kp: stranger.kp, pub: e.roles.hostA.pub}
		if c, err := dial(e.srv, impostor); !errors.Is(err, nats.ErrAuthorization) {
			if c != nil {
				c.nc.Close()
			}
			t.Fatalf("host A's key signed by another: %v, want %v", err, nats.ErrAuthorization)
		}
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// streamMsgs counts a stream's messages, as the processor sees them.
func (e *env) streamMsgs(t *testing.T, name string) uint64 {
	t.Helper()
	s, err := e.js.Stream(ctxT(t), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return s.CachedInfo().State.Msgs
}

// nothingStored asserts that no client message reached any stream beyond
// the want counts (stream name → messages the test put there itself).
func (e *env) nothingStored(t *testing.T, want map[string]uint64) {
	t.Helper()
	for _, name := range []string{e.subj.ProposalsStream(), e.subj.GrantsStream(), e.subj.OutcomesStream(),
		e.subj.IncidentsStream(), stageStream, "KV_" + e.subj.ActivityBucket()} {
		if got := e.streamMsgs(t, name); got != want[name] {
			t.Errorf("stream %s holds %d messages, want %d", name, got, want[name])
		}
	}
}

// noConsumers asserts that no stream has a consumer.
func (e *env) noConsumers(t *testing.T) {
	t.Helper()
	names := e.js.StreamNames(ctxT(t))
	for name := range names.Name() {
		s, err := e.js.Stream(ctxT(t), name)
		if err != nil {
			t.Fatal(err)
		}
		if n := s.CachedInfo().State.Consumers; n != 0 {
			t.Errorf("stream %s has %d consumers", name, n)
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
}

// publishAs publishes on subject as the processor and waits for its PubAck
// when a stream captures it.
// publishOutcome publishes body as the processor publishes an outcome of
// host h's proposal id: on its record subject, which the outcomes stream
// stores under the outcome subject and then sends there live.
func (e *env) publishOutcome(t *testing.T, h, id, body string) uint64 {
	t.Helper()
	return e.publishAs(t, e.subj.OutcomeRecord(h, id), body)
}

func (e *env) publishAs(t *testing.T, subject, body string) uint64 {
	t.Helper()
	ack, err := e.js.Publish(ctxT(t), subject, []byte(body))
	if err != nil {
		t.Fatalf("processor publish %s: %v", subject, err)
	}
	return ack.Sequence
}

// denyPublish publishes on each subject and expects a violation for each.
func denyPublish(t *testing.T, c *client, subjects ...string) {
	t.Helper()
	for _, s := range subjects {
		if err := c.nc.Publish(s, []byte(`{"forbidden":true}`)); err != nil {
			t.Fatalf("publish %s: %v", s, err)
		}
		c.violation(t, "Publish", s)
	}
}

// denySubscribe subscribes to each filter and expects a violation; then
// the processor publishes on the concrete subject and nothing arrives.
func denySubscribe(t *testing.T, e *env, c *client, cases map[string]string) {
	t.Helper()
	for filter, concrete := range cases {
		sub, err := c.nc.SubscribeSync(filter)
		if err != nil {
			t.Fatalf("subscribe %s: %v", filter, err)
		}
		c.violation(t, "Subscription", filter)
		if err := e.proc.nc.Publish(concrete, []byte("not for you")); err != nil {
			t.Fatal(err)
		}
		if err := e.proc.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if m, err := sub.NextMsg(100 * time.Millisecond); err == nil {
			t.Errorf("subscription %s received %s", filter, m.Subject)
		}
	}
}

// denyRequest sends a request on subject that must time out (forbidden
// publish) and be reported as a violation.
func denyRequest(t *testing.T, c *client, subject string, body []byte) {
	t.Helper()
	m, err := c.nc.Request(subject, body, forbiddenRequestTimeout)
	if !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("request %s: reply %v, error %v; want %v", subject, m, err, nats.ErrTimeout)
	}
	c.violation(t, "Publish", subject)
}

func TestHostPublishesOwnProposalAndGrantAndGetsPubAcks(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		a := e.connect(t, e.roles.hostA)
		js, err := jetstream.New(a.nc)
		if err != nil {
			t.Fatal(err)
		}
		for subject, stream := range map[string]string{
			e.subj.Proposal("A"): e.subj.ProposalsStream(),
			e.subj.Grant("A"):    e.subj.GrantsStream(),
		} {
			// The PubAck comes back on _INBOX.<A's key>: without that
			// subscribe permission this publish would time out.
			ack, err := js.Publish(ctxT(t), subject, []byte(`{"proposal_id":"p1"}`))
			if err != nil {
				t.Fatalf("publish %s: %v", subject, err)
			}
			if ack.Stream != stream || ack.Sequence != 1 {
				t.Errorf("PubAck %+v, want stream %s seq 1", ack, stream)
			}
		}
		a.noErrors(t)
	})
}

func TestHostCannotPublishElsewhere(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		a := e.connect(t, e.roles.hostA)
		B := e.roles.hostB.pub
		denyPublish(t, a,
			e.subj.Proposal("B"),
			e.subj.Grant("B"),
			e.subj.Proposal("A")+".x", // not a sub-subject of its own either
			e.subj.Outcome("A", "p1"), // outcomes are the processor's
			e.subj.Outcome("B", "p1"),
			e.subj.OutcomeRecord("A", "p1"),
			e.subj.Incident("admission"),
			e.subj.Stage(subjects.StageDispatch, subjects.KindProposal, "A.p1"),
			e.subj.Stage(subjects.StageAuthorization, subjects.KindTimer, "A.p1"),
			// Kept envelopes (payloads inside): the parked and the held.
			e.subj.Parked("A", "p1"),
			e.subj.Held("A", strings.Repeat("ab", 32)),
			"$JS.API.DIRECT.GET."+e.subj.HostHeldStream("A"),
			"$JS.API.DIRECT.GET."+e.subj.HostParkedStream("A")+"."+e.subj.Parked("A", "p1"),
			e.subj.LegacyParked("A.p1"),
			e.subj.LegacyHeld(strings.Repeat("ab", 32)),
			// Another host's ingress stream (its budget, its bodies).
			"$JS.API.DIRECT.GET."+e.subj.HostProposalsStream("B"),
			"$JS.API.STREAM.PURGE."+e.subj.HostProposalsStream("B"),
			e.subj.Admin(subjects.AdminReconcileSolve),
			"$KV."+e.subj.ActivityBucket()+".k",
			e.subj.ProviderDispatch("p"),
			e.subj.DisclosureResolve(),
			e.subj.Candidates("s"),
			subjects.Inbox(B)+".x",
			"$JS.API.STREAM.INFO."+e.subj.OutcomesStream(),
			"$JS.API.STREAM.PURGE."+e.subj.OutcomesStream(),
			"$JS.API.STREAM.MSG.DELETE."+e.subj.OutcomesStream(),
			"$JS.API.STREAM.NAMES",
		)
		e.nothingStored(t, nil)
	})
}

func TestHostCannotCreateConsumers(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		a := e.connect(t, e.roles.hostA)
		out := e.subj.OutcomesStream()
		// A push consumer would deliver onto any subject it names: here a
		// connector's request subject.
		push := []byte(`{"stream_name":"` + out + `","config":{"durable_name":"d","deliver_subject":"` +
			e.subj.ProviderDispatch("p") + `","filter_subject":"` + e.subj.HostOutcomes("A") + `"}}`)
		for _, subject := range []string{
			"$JS.API.CONSUMER.CREATE." + out,
			"$JS.API.CONSUMER.CREATE." + out + ".d." + e.subj.HostOutcomes("A"),
			"$JS.API.CONSUMER.DURABLE.CREATE." + out + ".d",
			"$JS.API.CONSUMER.CREATE." + e.subj.ProposalsStream(),
		} {
			denyRequest(t, a, subject, push)
		}
		js, err := jetstream.New(a.nc)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), forbiddenRequestTimeout)
		defer cancel()
		if _, err := js.CreateConsumer(ctx, out, jetstream.ConsumerConfig{Durable: "d", FilterSubject: e.subj.HostOutcomes("A")}); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("jetstream CreateConsumer: %v, want %v", err, context.DeadlineExceeded)
		}
		a.violation(t, "Publish", "$JS.API.CONSUMER.CREATE."+out+".d."+e.subj.HostOutcomes("A"))
		e.noConsumers(t)
	})
}

func TestHostCannotSubscribeElsewhere(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		a := e.connect(t, e.roles.hostA)
		B := subjects.Inbox(e.roles.hostB.pub)
		denySubscribe(t, e, a, map[string]string{
			e.subj.HostOutcomes("B"):     e.subj.Outcome("B", "p1"),
			e.subj.Outcome("B", "p1"):    e.subj.Outcome("B", "p1"),
			e.subj.Outcomes():            e.subj.Outcome("B", "p1"),
			"actions.outcomes.*.p1":      e.subj.Outcome("B", "p1"),
			"actions.provider.>":         e.subj.ProviderDispatch("p"),
			e.subj.ProviderDispatch("p"): e.subj.ProviderDispatch("p"),
			e.subj.Incidents():           e.subj.Incident("admission"),
			e.subj.Internal():            e.subj.Stage(subjects.StageDispatch, subjects.KindProposal, "A.p1"),
			e.subj.HeldAll():             e.subj.Held("A", strings.Repeat("ab", 32)),
			e.subj.ParkedAll():           e.subj.Parked("A", "p1"),
			e.subj.HostParked("A"):       e.subj.Parked("A", "p1"),
			e.subj.Proposal("A"):         e.subj.Proposal("A"),
			"_INBOX.>":                   B + ".x",
			B + ".>":                     B + ".x",
			"$KV.>":                      "$KV." + e.subj.ActivityBucket() + ".k",
			">":                          e.subj.Outcome("B", "p1"),
		})
	})
}

// TestHostDirectGetsOnlyItsOwnOutcomes: a host reads the last outcome of
// one of its proposals by direct get, and only its own.
func TestHostDirectGetsOnlyItsOwnOutcomes(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		out := e.subj.OutcomesStream()
		e.publishOutcome(t, "A", "p1", `{"host":"A","n":1}`)
		e.publishOutcome(t, "B", "p1", `{"host":"B","secret":"B-ONLY"}`)
		e.publishOutcome(t, "A", "p1", `{"host":"A","n":2}`)
		a := e.connect(t, e.roles.hostA)

		m, err := a.nc.Request(subjects.DirectGetLast(out, e.subj.Outcome("A", "p1")), nil, 2*time.Second)
		if err != nil {
			t.Fatalf("direct get of its own outcome: %v", err)
		}
		if string(m.Data) != `{"host":"A","n":2}` || m.Header.Get(jetstream.SubjectHeader) != e.subj.Outcome("A", "p1") {
			t.Errorf("direct get returned %q (subject %q), want the last outcome of A.p1", m.Data, m.Header.Get(jetstream.SubjectHeader))
		}
		for _, subject := range []string{
			subjects.DirectGetLast(out, e.subj.Outcome("B", "p1")),
			subjects.DirectGetLast(out, "actions.outcomes.*.p1"),
			subjects.DirectGetLast(out, e.subj.Outcomes()),
			"$JS.API.DIRECT.GET." + out, // the form that takes a sequence in its body
			subjects.DirectGetLast(e.subj.ProposalsStream(), e.subj.Proposal("A")),
			subjects.DirectGetLast("KV_"+e.subj.ActivityBucket(), "$KV."+e.subj.ActivityBucket()+".k"),
		} {
			denyRequest(t, a, subject, nil)
		}
		a.noErrors(t)
	})
}

// TestHostDirectGetBodyNeverReturnsAnotherHostsMessage sends request
// bodies on the host's permitted direct-get subject that name a sequence,
// another subject or a filter. The server answers 408 and no message; the
// only body it honours (no_hdr) still reads the host's own subject.
func TestHostDirectGetBodyNeverReturnsAnotherHostsMessage(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		out := e.subj.OutcomesStream()
		e.publishOutcome(t, "B", "p1", `{"secret":"B-ONLY"}`) // seq 1
		e.publishOutcome(t, "A", "p1", `{"host":"A"}`)        // seq 2
		e.publishOutcome(t, "B", "p2", `{"secret":"B-ONLY"}`) // seq 3
		a := e.connect(t, e.roles.hostA)
		own := subjects.DirectGetLast(out, e.subj.Outcome("A", "p1"))
		for _, body := range []string{
			`{"seq":1}`,
			`{"seq":3}`,
			`{"last_by_subj":"actions.outcomes.B.p1"}`,
			`{"last_by_subj":"actions.outcomes.A.p1"}`, // even its own: the subject says it
			`{"next_by_subj":"actions.outcomes.B.>"}`,
			`{"seq":1,"next_by_subj":"actions.outcomes.>"}`,
			`{"multi_last":["actions.outcomes.B.>"]}`,
			`{"multi_last":["actions.outcomes.>"],"batch":10}`,
			`{"batch":10}`,
			`{"seq":1,"batch":10}`,
			`{"start_time":"2000-01-01T00:00:00Z"}`,
			`{"up_to_seq":3}`,
			`{"up_to_time":"2100-01-01T00:00:00Z"}`,
			`not json`,
		} {
			m, err := a.nc.Request(own, []byte(body), 2*time.Second)
			if err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			if strings.Contains(string(m.Data), "B-ONLY") || m.Header.Get(jetstream.SubjectHeader) != "" {
				t.Errorf("body %s returned %q (subject %q)", body, m.Data, m.Header.Get(jetstream.SubjectHeader))
			}
			if st := m.Header.Get("Status"); st != "408" {
				t.Errorf("body %s: status %q, want 408", body, st)
			}
		}
		for _, body := range []string{`{"no_hdr":true}`, `{}`} {
			m, err := a.nc.Request(own, []byte(body), 2*time.Second)
			if err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			if string(m.Data) != `{"host":"A"}` {
				t.Errorf("body %s returned %q, want A's own outcome", body, m.Data)
			}
		}
		// A wildcard in the key stays under the host's own subjects.
		m, err := a.nc.Request(subjects.DirectGetLast(out, e.subj.HostOutcomes("A")), nil, 2*time.Second)
		if err != nil || string(m.Data) != `{"host":"A"}` {
			t.Errorf("direct get of %s: %q, %v", e.subj.HostOutcomes("A"), msgData(m), err)
		}
		a.noErrors(t)
	})
}

func msgData(m *nats.Msg) []byte {
	if m == nil {
		return nil
	}
	return m.Data
}

func TestHostReceivesOwnOutcomesLive(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		a := e.connect(t, e.roles.hostA)
		sub, err := a.nc.SubscribeSync(e.subj.HostOutcomes("A"))
		if err != nil {
			t.Fatal(err)
		}
		a.noErrors(t)
		e.publishOutcome(t, "B", "p1", `{"host":"B"}`)
		e.publishOutcome(t, "A", "p1", `{"host":"A"}`)
		m, err := sub.NextMsg(2 * time.Second)
		if err != nil || m.Subject != e.subj.Outcome("A", "p1") {
			t.Fatalf("live outcome: %v %v", m, err)
		}
	})
}
