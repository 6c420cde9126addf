package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/client"
	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

var (
	testKey = strings.Repeat("5a", 32)
	testFP  = "sha256:" + testKey
)

func dispatchBody(referent string) []byte {
	return dispatchBodyUntil(referent, time.Now().Add(time.Hour).UnixMilli())
}

// dispatchBodyUntil is dispatchBody with its not_after_ms.
func dispatchBodyUntil(referent string, notAfterMs int64) []byte {
	return schema.MustMarshal(schema.DispatchRequest{
		Schema:         schema.SchemaDispatch,
		Fingerprint:    testFP,
		IdempotencyKey: testKey,
		Target: schema.Target{
			Provider:    "inventory",
			Capability:  "inventory.adjust",
			Operation:   "adjust_stock",
			Environment: "test",
			Referent:    referent,
		},
		Payload:    jsontext.Value(`{"quantity":20}`),
		NotAfterMs: notAfterMs,
	})
}

func reconcileBody(attempt string) []byte {
	return schema.MustMarshal(schema.ReconcileRequest{
		Schema: schema.SchemaReconcile, Fingerprint: testFP, IdempotencyKey: testKey, AttemptID: attempt,
		ProviderActionID: "inv-1", PreviousReceiptID: "rcpt_1",
	})
}

// request sends body as the processor's nats adapter does and decodes the
// reply as it does (strictly).
func request(t *testing.T, nc *nats.Conn, subject string, body []byte, forReconcile bool) schema.AdapterReply {
	t.Helper()
	m, err := nc.Request(subject, body, timeout)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	r, err := adapters.DecodeReply(m.Data, forReconcile)
	if err != nil {
		t.Fatalf("reply %s does not decode as the processor decodes it: %v", m.Data, err)
	}
	return r
}

// What a Connector answers for each handler result, checked with the
// processor's own reply decoder.
func TestConnectorReplies(t *testing.T) {
	nc := testenv.Connect(t, testenv.StartServer(t, ""))
	var calls atomic.Int32
	h := &provider{
		dispatch: func(_ context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
			calls.Add(1)
			switch req.Referent {
			case "error":
				return schema.AdapterReply{Outcome: schema.ReplyRejected}, errors.New("stock service: 502")
			case "panic":
				panic("boom")
			case "unknown-outcome":
				return schema.AdapterReply{Outcome: "done"}, nil
			case "bad-evidence":
				return schema.AdapterReply{Outcome: schema.ReplyConfirmed, EvidenceRefs: []string{"no colon"}}, nil
			case "nothing-happened":
				return schema.AdapterReply{Outcome: schema.ReplyFailedBeforeDispatch, ErrorCode: "stock.closed"}, nil
			}
			return schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "inv-1", EvidenceRefs: []string{"ledger:1"}}, nil
		},
		reconcile: func(_ context.Context, req schema.ReconcileRequest) (schema.AdapterReply, error) {
			calls.Add(1)
			switch req.AttemptID {
			case "acknowledged":
				return schema.AdapterReply{Outcome: schema.ReplyAcknowledged}, nil
			case "error":
				return schema.AdapterReply{}, errors.New("ledger down")
			}
			return schema.AdapterReply{Outcome: schema.ReplyRejected}, nil
		},
	}
	c, err := client.ServeConnector(nc, client.ConnectorConfig{Providers: []string{"inventory", "stock"}}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	s := subjects.Default()
	dispatch, reconcile := s.ProviderDispatch("inventory"), s.ProviderReconcile("inventory")

	indeterminate := func(code string) schema.AdapterReply {
		return schema.AdapterReply{Outcome: schema.ReplyIndeterminate, ErrorCode: code}
	}
	for _, tc := range []struct {
		name string
		body []byte
		want schema.AdapterReply
	}{
		{"confirmed", dispatchBody("sku-1"), schema.AdapterReply{Outcome: "confirmed", ProviderActionID: "inv-1", EvidenceRefs: []string{"ledger:1"}}},
		{"handler's own failed_before_dispatch", dispatchBody("nothing-happened"), schema.AdapterReply{Outcome: "failed_before_dispatch", ErrorCode: "stock.closed"}},
		{"error: maybe acted", dispatchBody("error"), indeterminate(client.CodeHandlerError)},
		{"panic", dispatchBody("panic"), indeterminate(client.CodeHandlerPanic)},
		{"unknown outcome", dispatchBody("unknown-outcome"), indeterminate(client.CodeInvalidReply)},
		{"evidence ref without colon", dispatchBody("bad-evidence"), indeterminate(client.CodeInvalidReply)},
	} {
		if got := request(t, nc, dispatch, tc.body, false); !equalReply(got, tc.want) {
			t.Errorf("dispatch %s: reply %+v, want %+v", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		attempt string
		want    schema.AdapterReply
	}{
		{"rcn_1", schema.AdapterReply{Outcome: "rejected"}},
		{"acknowledged", indeterminate(client.CodeInvalidReply)},
		{"error", indeterminate(client.CodeHandlerError)},
	} {
		if got := request(t, nc, reconcile, reconcileBody(tc.attempt), true); !equalReply(got, tc.want) {
			t.Errorf("reconcile %s: reply %+v, want %+v", tc.attempt, got, tc.want)
		}
	}

	// Requests it cannot read reach no handler.
	before := calls.Load()
	malformed := schema.AdapterReply{Outcome: schema.ReplyRejected, ErrorCode: client.CodeMalformedRequest}
	for name, body := range map[string][]byte{
		"not JSON":         []byte("hello"),
		"unknown member":   []byte(strings.Replace(string(dispatchBody("x")), `{"schema"`, `{"colour":"red","schema"`, 1)),
		"duplicate member": []byte(strings.Replace(string(dispatchBody("x")), `{"schema"`, `{"referent":"y","schema"`, 1)),
		"wrong schema":     []byte(strings.Replace(string(dispatchBody("x")), schema.SchemaDispatch, schema.SchemaReconcile, 1)),
		"key mismatch":     []byte(strings.Replace(string(dispatchBody("x")), `"idempotency_key":"5a`, `"idempotency_key":"6a`, 1)),
		"no not_after_ms":  dispatchBodyUntil("x", 0),
	} {
		if got := request(t, nc, dispatch, body, false); !equalReply(got, malformed) {
			t.Errorf("dispatch %s: reply %+v", name, got)
		}
	}
	// A request for one provider on another's subject.
	if got := request(t, nc, s.ProviderDispatch("stock"), dispatchBody("x"), false); !equalReply(got, malformed) {
		t.Errorf("dispatch for another provider: reply %+v", got)
	}
	if got := request(t, nc, reconcile, []byte(`{}`), true); !equalReply(got, indeterminate(client.CodeMalformedRequest)) {
		t.Errorf("malformed reconcile: reply %+v", got)
	}
	if n := calls.Load(); n != before {
		t.Errorf("the handler was called %d times for unreadable requests", n-before)
	}
}

func equalReply(a, b schema.AdapterReply) bool {
	return string(schema.MustMarshal(a)) == string(schema.MustMarshal(b))
}

// A handler's error after the side effect may have happened is
// indeterminate end to end: RECONCILIATION_REQUIRED, never a failure, and
// reconciliation then settles it through Reconcile.
func TestConnectorHandlerErrorIsReconciled(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth(), testenv.WithConfig(func(c *config.Config) {
		c.Reconciliation.Interval = 50 * time.Millisecond
	}))
	inv := &provider{
		dispatch: func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
			return schema.AdapterReply{}, errors.New("stock service: connection reset after the write")
		},
		reconcile: func(_ context.Context, req schema.ReconcileRequest) (schema.AdapterReply, error) {
			return schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "inv-" + req.IdempotencyKey[:8]}, nil
		},
	}
	serveInventory(t, env, inv)
	host := newHost(t, env, client.HostConfig{})
	ctx := testContext(t)
	p := testenv.Granted(t, inventory("prop-err"), "sku-1001", time.Now())
	tr, err := host.Propose(ctx, proposal(t, p))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	first, err := tr.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first.Kind != schema.KindReconciliationRequired || first.Terminal ||
		!hasIncident(first, schema.PhaseDispatch, schema.CodeProviderIndeterminate) ||
		first.Receipt == nil || first.Receipt.ErrorCode != client.CodeHandlerError {
		t.Fatalf("first outcome %+v, want RECONCILIATION_REQUIRED/PROVIDER_INDETERMINATE with %s", first, client.CodeHandlerError)
	}
	o, err := tr.Await(ctx, client.Terminal)
	if err != nil || o.Kind != schema.KindConfirmed {
		t.Fatalf("terminal outcome %+v, %v", o, err)
	}
	if d, r := inv.counts(); d != 1 || r < 1 {
		t.Errorf("%d dispatches, %d reconciles", d, r)
	}
}

// Protected values reach the handler and are zeroed when it returns.
func TestConnectorWipesValues(t *testing.T) {
	nc := testenv.Connect(t, testenv.StartServer(t, ""))
	var mu sync.Mutex
	var seen map[string]jsontext.Value
	var raw [][]byte
	h := &provider{dispatch: func(_ context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
		mu.Lock()
		defer mu.Unlock()
		seen = req.ProtectedDisclosure.Values
		for _, v := range seen {
			raw = append(raw, v)
		}
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed}, nil
	}}
	c, err := client.ServeConnector(nc, client.ConnectorConfig{Providers: []string{"inventory"}}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	served := make(chan struct{}, 1)
	c.OnServed(func() { served <- struct{}{} })

	var req schema.DispatchRequest
	if err := schema.Decode(dispatchBody("sku-1"), &req); err != nil {
		t.Fatal(err)
	}
	req.ProtectedDisclosure = &schema.DispatchDisclosure{Recipient: "Duffel", Purpose: "Book.", FieldClasses: []string{"birth_date"},
		Values: map[string]jsontext.Value{"birth_date": jsontext.Value(`"1990-02-28"`)}}
	body := schema.MustMarshal(req)
	if got := request(t, nc, subjects.Default().ProviderDispatch("inventory"), body, false); got.Outcome != schema.ReplyConfirmed {
		t.Fatalf("reply %+v", got)
	}
	<-served
	mu.Lock()
	defer mu.Unlock()
	if len(raw) != 1 || len(raw[0]) != len(`"1990-02-28"`) {
		t.Fatalf("the handler saw %d values", len(raw))
	}
	if len(seen) != 0 || strings.Trim(string(raw[0]), "\x00") != "" {
		t.Errorf("after the call: %d classes left, value bytes %q", len(seen), raw[0])
	}
}

// Several processes of one connector share the requests through the queue
// group: each request is handled once.
func TestConnectorQueueGroup(t *testing.T) {
	srv := testenv.StartServer(t, "")
	var a, b atomic.Int32
	for _, n := range []*atomic.Int32{&a, &b} {
		h := &provider{dispatch: func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
			n.Add(1)
			return schema.AdapterReply{Outcome: schema.ReplyConfirmed}, nil
		}}
		c, err := client.ServeConnector(testenv.Connect(t, srv), client.ConnectorConfig{Providers: []string{"inventory"}}, h)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Stop()
	}
	nc := testenv.Connect(t, srv)
	const n = 40
	for range n {
		if got := request(t, nc, subjects.Default().ProviderDispatch("inventory"), dispatchBody("x"), false); got.Outcome != schema.ReplyConfirmed {
			t.Fatalf("reply %+v", got)
		}
	}
	if a.Load()+b.Load() != n || a.Load() == 0 || b.Load() == 0 {
		t.Errorf("handled %d + %d times for %d requests", a.Load(), b.Load(), n)
	}
}

// At most MaxConcurrent handler calls run at once; the others wait their
// turn and are all answered.
func TestConnectorBoundedConcurrency(t *testing.T) {
	nc := testenv.Connect(t, testenv.StartServer(t, ""))
	var running, peak atomic.Int32
	started := make(chan struct{}, 10)
	release := make(chan struct{})
	h := &provider{dispatch: func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
		r := running.Add(1)
		for {
			p := peak.Load()
			if r <= p || peak.CompareAndSwap(p, r) {
				break
			}
		}
		started <- struct{}{}
		<-release
		running.Add(-1)
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed}, nil
	}}
	c, err := client.ServeConnector(nc, client.ConnectorConfig{Providers: []string{"inventory"}, MaxConcurrent: 2}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	const n = 5
	replies := make(chan schema.AdapterReply, n)
	for range n {
		go func() {
			m, err := nc.Request(subjects.Default().ProviderDispatch("inventory"), dispatchBody("x"), timeout)
			if err != nil {
				replies <- schema.AdapterReply{Outcome: err.Error()}
				return
			}
			r, _ := adapters.DecodeReply(m.Data, false)
			replies <- r
		}()
	}
	// Let them through one at a time: each release admits one more.
	for i := range n {
		<-started
		if p := peak.Load(); p > 2 {
			t.Fatalf("%d handlers ran at once", p)
		}
		if i >= 1 {
			release <- struct{}{}
		}
	}
	release <- struct{}{}
	for range n {
		if r := <-replies; r.Outcome != schema.ReplyConfirmed {
			t.Errorf("reply %+v", r)
		}
	}
	if p := peak.Load(); p != 2 {
		t.Errorf("peak concurrency %d, want 2", p)
	}
}

// Drain answers what it already received and then stops serving; Stop
// cancels running handlers, whose replies still go out.
func TestConnectorDrainAndStop(t *testing.T) {
	srv := testenv.StartServer(t, "")
	nc := testenv.Connect(t, srv)
	subject := subjects.Default().ProviderDispatch("inventory")
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	h := &provider{dispatch: func(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
		started <- struct{}{}
		if req.Referent == "wait-for-stop" {
			<-ctx.Done()
			return schema.AdapterReply{}, ctx.Err()
		}
		<-release
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed}, nil
	}}

	c, err := client.ServeConnector(testenv.Connect(t, srv), client.ConnectorConfig{Providers: []string{"inventory"}}, h)
	if err != nil {
		t.Fatal(err)
	}
	reply := make(chan *nats.Msg, 1)
	go func() {
		m, _ := nc.Request(subject, dispatchBody("x"), timeout)
		reply <- m
	}()
	<-started
	drained := make(chan error, 1)
	go func() { drained <- c.Drain(context.Background()) }()
	close(release)
	if err := <-drained; err != nil {
		t.Errorf("Drain: %v", err)
	}
	if m := <-reply; m == nil || !strings.Contains(string(m.Data), `"confirmed"`) {
		t.Errorf("the request in flight during Drain got %v", m)
	}
	if _, err := nc.Request(subject, dispatchBody("x"), time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("after Drain: %v, want no responders", err)
	}

	c, err = client.ServeConnector(testenv.Connect(t, srv), client.ConnectorConfig{Providers: []string{"inventory"}}, h)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		m, _ := nc.Request(subject, dispatchBody("wait-for-stop"), timeout)
		reply <- m
	}()
	<-started
	c.Stop()
	m := <-reply
	if m == nil {
		t.Fatal("no reply from the handler Stop cancelled")
	}
	if r, err := adapters.DecodeReply(m.Data, false); err != nil || r.Outcome != schema.ReplyIndeterminate || r.ErrorCode != client.CodeHandlerError {
		t.Errorf("reply %+v, %v", r, err)
	}
	if _, err := nc.Request(subject, dispatchBody("x"), time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("after Stop: %v, want no responders", err)
	}
}

// A login may serve only its own role's subjects: serving what it may not
// fails at once, with NATS's permissions violation; so does proposing from
// a login that is not the host's.
func TestServeRefusedSubscription(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	nc := connect(t, env, env.Connector)
	_, err := client.ServeConnector(nc.Conn, client.ConnectorConfig{Providers: []string{"demo"}}, &provider{})
	if !errors.Is(err, nats.ErrPermissionViolation) {
		t.Errorf("ServeConnector for another connector's provider: %v, want a permissions violation", err)
	}
	_, err = client.ServeResolver(nc.Conn, client.ResolverConfig{}, client.DisclosureFunc(nil))
	if !errors.Is(err, nats.ErrPermissionViolation) {
		t.Errorf("ServeResolver as a connector: %v, want a permissions violation", err)
	}
	host, err := client.NewHost(nc, client.HostConfig{Name: testenv.HostName})
	if err != nil {
		t.Fatal(err)
	}
	_, err = host.Propose(testContext(t), proposal(t, testenv.Lumber("prop-wrong-login")))
	if !errors.Is(err, client.ErrPublishRefused) || !errors.Is(err, nats.ErrPermissionViolation) {
		t.Errorf("Propose from a connector's login: %v, want ErrPublishRefused", err)
	}
}

// SPEC §4: the Connector never calls the handler for a dispatch request
// that comes after its not_after_ms by the Connector's clock: it answers
// failed_before_dispatch with CodeNotAfterPassed (nothing was done). A
// request in time reaches the handler with a context that ends at
// not_after_ms. A reconcile of a key whose dispatch handler is still
// running is answered indeterminate without asking the handler.
func TestConnectorRefusesLateRequests(t *testing.T) {
	nc := testenv.Connect(t, testenv.StartServer(t, ""))
	var clock atomic.Int64 // the Connector's clock, unix ms
	clock.Store(1_764_424_800_000)
	deadlines := make(chan time.Time, 4)
	inCall, release := make(chan struct{}, 1), make(chan struct{})
	h := &provider{
		dispatch: func(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
			d, _ := ctx.Deadline()
			deadlines <- d
			if req.Referent == "slow" {
				inCall <- struct{}{}
				<-release
			}
			return schema.AdapterReply{Outcome: schema.ReplyConfirmed}, nil
		},
		reconcile: func(context.Context, schema.ReconcileRequest) (schema.AdapterReply, error) {
			return schema.AdapterReply{Outcome: schema.ReplyConfirmed}, nil
		},
	}
	c, err := client.ServeConnector(nc, client.ConnectorConfig{Providers: []string{"inventory"},
		Clock: func() time.Time { return time.UnixMilli(clock.Load()) }}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	s := subjects.Default()
	dispatch, reconcile := s.ProviderDispatch("inventory"), s.ProviderReconcile("inventory")
	now := clock.Load()

	if got := request(t, nc, dispatch, dispatchBodyUntil("late", now-1), false); !got.IsLate() || got.ErrorCode != client.CodeNotAfterPassed {
		t.Errorf("a request 1ms after its not_after_ms: %+v", got)
	}
	if d, _ := h.counts(); d != 0 {
		t.Fatalf("the handler was called for a late request")
	}
	if got := request(t, nc, dispatch, dispatchBodyUntil("just-in-time", now), false); got.Outcome != schema.ReplyConfirmed {
		t.Errorf("a request at its not_after_ms: %+v", got)
	}
	if d := <-deadlines; !d.Equal(time.UnixMilli(now + 1)) {
		t.Errorf("the handler's context ends at %v, want just after not_after_ms %v", d, time.UnixMilli(now))
	}

	// A reconcile while the key's dispatch runs is not answered by the
	// handler: it could not yet know.
	replied := make(chan schema.AdapterReply, 1)
	go func() { replied <- request(t, nc, dispatch, dispatchBodyUntil("slow", now+10_000), false) }()
	<-inCall
	<-deadlines
	inProgress := schema.AdapterReply{Outcome: schema.ReplyIndeterminate, ErrorCode: client.CodeDispatchInProgress}
	if got := request(t, nc, reconcile, reconcileBody("rcn_1"), true); !equalReply(got, inProgress) {
		t.Errorf("a reconcile during the dispatch: %+v", got)
	}
	close(release)
	if got := <-replied; got.Outcome != schema.ReplyConfirmed {
		t.Errorf("the slow dispatch: %+v", got)
	}
	if got := request(t, nc, reconcile, reconcileBody("rcn_2"), true); got.Outcome != schema.ReplyConfirmed {
		t.Errorf("a reconcile after the dispatch: %+v", got)
	}
	if d, r := h.counts(); d != 2 || r != 1 {
		t.Errorf("handler: %d dispatches, %d reconciles; want 2, 1", d, r)
	}
}

// End to end: a connector whose clock runs an hour ahead refuses the
// processor's first request as late; the processor, which has not seen
// the intent recorded by anyone else, sends it again with a new lease,
// and the handler acts once.
func TestConnectorLateRequestSentAgain(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	var calls atomic.Int32
	inv := &provider{}
	c, err := client.ServeConnector(connect(t, env, env.Connector).Conn, client.ConnectorConfig{Providers: []string{"inventory"},
		Clock: func() time.Time {
			if calls.Add(1) == 1 {
				return time.Now().Add(time.Hour)
			}
			return time.Now()
		}}, inv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	host := newHost(t, env, client.HostConfig{})
	ctx := testContext(t)
	tr, err := host.Propose(ctx, proposal(t, testenv.Granted(t, inventory("prop-late"), "sku-1001", time.Now())))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	o, err := tr.Await(ctx, client.Terminal)
	if err != nil || o.Kind != schema.KindConfirmed {
		t.Fatalf("outcome %+v, %v", o, err)
	}
	if d, _ := inv.counts(); d != 1 || calls.Load() != 2 {
		t.Errorf("the handler dispatched %d times; the connector read its clock %d times", d, calls.Load())
	}
}
