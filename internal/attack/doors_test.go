package attack_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// Issue "Close every door": tried with nothing but a NATS connection
// against a processor whose server requires authentication (the default
// outside --dev), every door named there stays shut. Each test connects as
// one role and tries what SPEC §2.8 forbids it, and asserts the exact
// refusal and that nothing changed.

// violations collects the permission violations a connection is told of:
// a forbidden publish or subscribe returns nil and reports asynchronously.
type violations struct {
	mu   sync.Mutex
	errs []error
}

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.errs = append(v.errs, err)
}

// wait waits for a permission violation naming subject.
func (v *violations) wait(t *testing.T, subject string) {
	t.Helper()
	testenv.WaitFor(t, "a permission violation for "+subject, func() bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		for _, err := range v.errs {
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return true
			}
		}
		return false
	})
}

// dial connects to env's server as kp (its own inbox prefix), recording
// permission violations.
func dial(t *testing.T, env *testenv.Env, kp nkeys.KeyPair) (*nats.Conn, *violations) {
	t.Helper()
	v := &violations{}
	pub, _ := kp.PublicKey()
	nc, err := nats.Connect(env.Server.ClientURL(), nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(subjects.Inbox(pub)), nats.ErrorHandler(v.handler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, v
}

func streamMsgs(t *testing.T, env *testenv.Env, stream string) uint64 {
	t.Helper()
	s, err := env.JS.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// A client without credentials, or with a key the configuration does not
// know, cannot connect at all.
func TestAnonymousAndUnknownClientsAreRefused(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	if _, err := nats.Connect(env.Server.ClientURL()); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("anonymous connect: %v, want %v", err, nats.ErrAuthorization)
	}
	stranger, _ := nkeys.CreateUser()
	pub, _ := stranger.PublicKey()
	if _, err := nats.Connect(env.Server.ClientURL(), nats.Nkey(pub, stranger.Sign)); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("unknown key: %v, want %v", err, nats.ErrAuthorization)
	}
}

// With authentication on, a host's signed proposal travels through its own
// account, a connector serving its provider answers the dispatch, and the
// outcome reaches the host live; nothing else is needed.
func TestAuthenticatedRolesWork(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	conn := env.ConnectAs(t, env.Connector)
	served := 0
	sub, err := conn.Subscribe(env.Subjects.ProviderDispatch("inventory"), func(m *nats.Msg) {
		served++
		_ = m.Respond([]byte(`{"outcome":"confirmed","provider_action_id":"inv-1"}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
	host, _ := dial(t, env, env.Host)
	live, err := host.SubscribeSync(env.Subjects.Outcome(hostA, "door-ok"))
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.Set(grantedA(t, "door-ok", 1, time.Now()), "intent.provider", "inventory")
	p = testenv.Granted(t, p, "sku-1001", time.Now())
	env.PublishSigned(t, p, env.Host)
	o := env.Recorder.Wait(t, "door-ok", testenv.Terminal)
	if o.Kind != schema.KindConfirmed || served != 1 {
		t.Fatalf("outcome %+v, served %d", o, served)
	}
	m, err := live.NextMsg(testenv.WaitTimeout)
	if err != nil {
		t.Fatalf("the host did not hear its outcome live: %v", err)
	}
	if !strings.Contains(string(m.Data), `"kind":"CONFIRMED"`) {
		t.Errorf("live outcome %s", m.Data)
	}
}

// A host cannot publish on any internal subject, on another host's
// subjects, on the operator API or into the activity bucket; it cannot
// subscribe to another host's outcomes or to provider requests.
func TestHostDoorsAreShut(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	host, v := dial(t, env, env.Host)
	forged := schema.MustMarshal(map[string]any{"schema": "actions.envelope.v1"})
	for _, subject := range []string{
		env.Subjects.Stage(subjects.StageDispatch, subjects.KindProposal, "frontdesk.forged"),
		env.Subjects.Stage(subjects.StageReconciliation, subjects.KindTimer, strings.Repeat("ab", 32)),
		env.Subjects.Proposal(hostB),
		env.Subjects.Grant(hostB),
		"$KV." + env.Subjects.ActivityBucket() + "." + strings.Repeat("ab", 32),
		"$JS.API.CONSUMER.CREATE." + env.Subjects.OutcomesStream(),
	} {
		if err := host.Publish(subject, forged); err != nil {
			t.Fatal(err)
		}
		v.wait(t, subject)
	}
	if _, err := host.Request(env.Subjects.Admin(subjects.AdminReconcileList), []byte(`{}`), 500*time.Millisecond); err == nil {
		t.Error("a host reached the operator API")
	}
	v.wait(t, env.Subjects.Admin(subjects.AdminReconcileList))
	for _, subject := range []string{env.Subjects.HostOutcomes(hostB), env.Subjects.Outcomes(), env.Subjects.ProviderDispatch("inventory"), "_INBOX.>"} {
		if _, err := host.SubscribeSync(subject); err != nil {
			t.Fatal(err)
		}
		v.wait(t, subject)
	}
	// Nothing reached a stage, the provider or the bucket.
	env.PublishSigned(t, grantedA(t, "door-sync", 2, time.Now()), env.Host)
	env.Recorder.Wait(t, "door-sync", testenv.Terminal)
	env.Quiesce(t)
	// Stage streams hold work: what reached dispatch is what was handed
	// on to it, ever.
	if got := testenv.ProposalIDs(env.StageEnvelopes(t, subjects.StageDispatch, 1)); len(got) != 1 || got[0] != "door-sync" {
		t.Errorf("hand-offs to dispatch: %v, want door-sync alone", got)
	}
	if n := env.Fakes["demo"].Dispatches(); n != 1 {
		t.Errorf("dispatches = %d, want 1", n)
	}
	kv, err := env.JS.KeyValue(context.Background(), env.Subjects.ActivityBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(context.Background(), strings.Repeat("ab", 32)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("activity key written by a host: %v", err)
	}
}

// A host that sets another host's outcome subject as the reply of its own
// publish or direct get places nothing there: server-made answers stay in
// the host's own account.
func TestReplySubjectInjectionLandsNowhere(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	env.PublishSigned(t, grantedA(t, "inj-own", 3, time.Now()), env.Host)
	env.Recorder.Wait(t, "inj-own", testenv.Terminal)
	host, _ := dial(t, env, env.Host)
	target := env.Subjects.Outcome(hostB, "victim-1")
	body := testenv.Body(t, grantedA(t, "inj-2", 4, time.Now()))
	m := nats.NewMsg(env.Subjects.Proposal(hostA))
	m.Data, m.Reply, m.Header = body, target, testenv.Sign(t, env.Host, body)
	if err := host.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	get := nats.NewMsg(subjects.DirectGetLast(env.Subjects.OutcomesStream(), env.Subjects.Outcome(hostA, "inj-own")))
	get.Reply = target
	if err := host.PublishMsg(get); err != nil {
		t.Fatal(err)
	}
	env.Recorder.Wait(t, "inj-2", testenv.Terminal)
	h := settled(t, env)
	if outs := h.on(env, hostB, "victim-1"); len(outs) != 0 {
		t.Errorf("host B's outcome subject holds %d injected messages", len(outs))
	}
	if outs := env.Recorder.Outcomes(refB("victim-1")); len(outs) != 0 {
		t.Errorf("injected live messages reached host B: %+v", outs)
	}
}

// A connector serves its own providers' subjects only.
func TestConnectorServesOnlyItsProviders(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	conn, v := dial(t, env, env.Connector)
	for _, subject := range []string{env.Subjects.ProviderDispatch("demo"), env.Subjects.ProviderReconcile("demo"), env.Subjects.DisclosureResolve(), env.Subjects.Outcomes()} {
		if _, err := conn.SubscribeSync(subject); err != nil {
			t.Fatal(err)
		}
		v.wait(t, subject)
	}
	if err := conn.Publish(env.Subjects.Outcome(hostA, "x"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	v.wait(t, env.Subjects.Outcome(hostA, "x"))
}

// With NATS authentication off (a development server), a client can
// publish on internal subjects; the seal still keeps it from acting: a
// forged hand-off to dispatch, however well formed, is terminated unread
// with INTERNAL_MESSAGE_REJECTED and reaches no provider. (Before, such an
// envelope was dispatched and CONFIRMED with no signature and no grant.)
func TestForgedInternalMessageIsRejected(t *testing.T) {
	env := testenv.New(t)
	p := grantedA(t, "forged-1", 5, time.Now())
	prop, err := schema.DecodeProposal(testenv.Body(t, p), 0)
	if err != nil {
		t.Fatal(err)
	}
	fp := testenv.FingerprintOf(t, p, "sku-1001")
	e := schema.Envelope{
		Schema: schema.SchemaEnvelope, Proposal: *prop, Host: hostA,
		Grounded:      &schema.Grounded{Referent: "sku-1001", Fingerprint: fp, IdempotencyKey: strings.TrimPrefix(fp, "sha256:")},
		Authorization: &schema.AuthorizationRecord{Grant: *prop.Grant},
	}
	for _, stage := range []string{subjects.StageDispatch, subjects.StageAuthorization, subjects.StageGrounding} {
		env.PublishWith(t, env.Subjects.Stage(stage, subjects.KindProposal, subjects.ProposalToken(hostA, "forged-1")), schema.MustMarshal(e), nil)
	}
	env.PublishSigned(t, grantedA(t, "forged-sync", 6, time.Now()), env.Host)
	env.Recorder.Wait(t, "forged-sync", testenv.Terminal)
	h := settled(t, env)
	for _, phase := range []schema.Phase{schema.PhaseDispatch, schema.PhaseAuthorization, schema.PhaseGrounding} {
		if n := h.count(pc(phase, schema.CodeInternalMessageRejected)); n != 1 {
			t.Errorf("%s INTERNAL_MESSAGE_REJECTED events = %d, want 1", phase, n)
		}
	}
	if outs := h.on(env, hostA, "forged-1"); len(outs) != 0 {
		t.Errorf("the forged proposal got outcomes: %+v", outs)
	}
	if n := env.Fakes["demo"].Dispatches(); n != 1 {
		t.Errorf("dispatches = %d, want 1 (forged-sync only)", n)
	}
}
