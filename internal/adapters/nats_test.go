package adapters_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// natsFixture is an embedded server, the adapter's connection and a
// connector's connection.
type natsFixture struct {
	adapter  *adapters.NATS
	nc, peer *nats.Conn
	subj     subjects.Subjects
	received atomic.Int64
}

func newNATSFixture(t *testing.T, prefix string, timeout time.Duration) *natsFixture {
	t.Helper()
	srv := testenv.StartServer(t, "")
	subj, err := subjects.New(prefix)
	if err != nil {
		t.Fatal(err)
	}
	f := &natsFixture{nc: testenv.Connect(t, srv), peer: testenv.Connect(t, srv), subj: subj}
	f.adapter, err = adapters.NewNATS("inventory", f.nc, subj, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// respond subscribes a connector on subject that answers with answer(msg);
// a nil answer sends nothing.
func (f *natsFixture) respond(t *testing.T, subject string, answer func(*nats.Msg) []byte) {
	t.Helper()
	sub, err := f.peer.Subscribe(subject, func(m *nats.Msg) {
		f.received.Add(1)
		if b := answer(m); b != nil {
			_ = m.Respond(b)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := f.peer.Flush(); err != nil {
		t.Fatal(err)
	}
}

func TestNATSDispatchRoundTrip(t *testing.T) {
	f := newNATSFixture(t, "acme.ops", 5*time.Second)
	req := dispatchReq("inventory", "round-trip")
	req.ExternalSpend = &schema.Spend{Currency: "USD", AmountMinor: 24567}
	req.ProtectedDisclosure = &schema.DispatchDisclosure{
		Recipient: "Duffel", Purpose: "Create the order.", FieldClasses: []string{"birth_date"},
		Values: map[string]jsontext.Value{"birth_date": jsontext.Value(`"1990-01-31"`)},
	}
	if got := f.subj.ProviderDispatch("inventory"); got != "acme.ops.provider.inventory.dispatch" {
		t.Fatalf("subject %s", got)
	}
	var seen schema.DispatchRequest
	f.respond(t, f.subj.ProviderDispatch("inventory"), func(m *nats.Msg) []byte {
		if err := schema.Decode(m.Data, &seen); err != nil {
			t.Errorf("connector cannot strictly decode the request: %v", err)
		}
		return []byte(`{"outcome":"acknowledged","provider_action_id":"ord_1","evidence_refs":["inv:ord_1"]}`)
	})
	reply, err := f.adapter.Dispatch(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if reply.Outcome != schema.ReplyAcknowledged || reply.ProviderActionID != "ord_1" || len(reply.EvidenceRefs) != 1 {
		t.Fatalf("reply %+v", reply)
	}
	if string(schema.MustMarshal(seen)) != string(schema.MustMarshal(req)) {
		t.Fatalf("connector saw\n%s\nwant\n%s", schema.MustMarshal(seen), schema.MustMarshal(req))
	}
	if string(seen.ProtectedDisclosure.Values["birth_date"]) != `"1990-01-31"` {
		t.Fatal("values did not reach the connector")
	}
}

func TestNATSReconcile(t *testing.T) {
	f := newNATSFixture(t, "", 5*time.Second)
	answer := `{"outcome":"confirmed","evidence_refs":["inv:audit-7"]}`
	var seen schema.ReconcileRequest
	f.respond(t, "actions.provider.inventory.reconcile", func(m *nats.Msg) []byte {
		if err := schema.Decode(m.Data, &seen); err != nil {
			t.Errorf("connector cannot decode: %v", err)
		}
		return []byte(answer)
	})
	req := reconcileReq("rec", "att-1")
	reply, err := f.adapter.Reconcile(t.Context(), req)
	if err != nil || reply.Outcome != schema.ReplyConfirmed {
		t.Fatalf("reply %+v, %v", reply, err)
	}
	if seen != req {
		t.Fatalf("connector saw %+v", seen)
	}
	// A reconcile cannot answer "acknowledged".
	answer = `{"outcome":"acknowledged"}`
	if _, err := f.adapter.Reconcile(t.Context(), req); class(err) != "malformed" {
		t.Fatalf("acknowledged reconcile: %s (%v)", class(err), err)
	}
}

func TestNATSNoResponders(t *testing.T) {
	f := newNATSFixture(t, "", 5*time.Second)
	// A connector for another provider does not count.
	f.respond(t, "actions.provider.other.dispatch", func(*nats.Msg) []byte { return []byte(`{"outcome":"confirmed"}`) })
	start := time.Now()
	_, err := f.adapter.Dispatch(t.Context(), dispatchReq("inventory", "nobody"))
	if class(err) != "not_invoked" || errors.Is(err, adapters.ErrTimeout) {
		t.Fatalf("got %s (%v), want not_invoked", class(err), err)
	}
	if !strings.Contains(err.Error(), "no responders") {
		t.Errorf("error %q does not say why", err)
	}
	if time.Since(start) > 4*time.Second {
		t.Error("no responders waited for the timeout")
	}
	if _, err := f.adapter.Reconcile(t.Context(), reconcileReq("nobody", "a")); class(err) != "not_invoked" {
		t.Fatalf("reconcile: %s (%v)", class(err), err)
	}
	if f.received.Load() != 0 {
		t.Fatal("the other provider's connector received a request")
	}
}

func TestNATSTimeout(t *testing.T) {
	f := newNATSFixture(t, "", 300*time.Millisecond)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	f.respond(t, "actions.provider.inventory.dispatch", func(*nats.Msg) []byte {
		<-release // never answers in time
		return nil
	})
	_, err := f.adapter.Dispatch(t.Context(), dispatchReq("inventory", "slow"))
	if class(err) != "timeout" {
		t.Fatalf("got %s (%v), want timeout", class(err), err)
	}
	if f.received.Load() != 1 {
		t.Fatalf("connector received %d", f.received.Load())
	}
}

// TestNATSCancelledAfterSending: the request went out, so a cancelled
// context is unknown, neither "not invoked" nor a timeout.
func TestNATSCancelledAfterSending(t *testing.T) {
	f := newNATSFixture(t, "", time.Minute)
	got := make(chan struct{}, 1)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	f.respond(t, "actions.provider.inventory.dispatch", func(*nats.Msg) []byte {
		got <- struct{}{}
		<-release
		return nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-got; cancel() }()
	_, err := f.adapter.Dispatch(ctx, dispatchReq("inventory", "cancel"))
	if class(err) != "unknown" || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %s (%v), want unknown wrapping context.Canceled", class(err), err)
	}
}

func TestNATSMalformedReplies(t *testing.T) {
	f := newNATSFixture(t, "", 5*time.Second)
	var answer atomic.Value
	f.respond(t, "actions.provider.inventory.dispatch", func(*nats.Msg) []byte { return answer.Load().([]byte) })
	for _, body := range []string{
		`not json`,
		`{"outcome":"confirmed","extra":1}`,
		`{"outcome":"maybe"}`,
		`{"outcome":"confirmed","outcome":"rejected"}`,
		`{"outcome":"confirmed","evidence_refs":["no-colon"]}`,
		`{"stream":"ACTIONS","seq":1}`, // a JetStream PubAck is not a reply
		`{"outcome":"confirmed"}` + strings.Repeat(" ", adapters.MaxReplyBytes),
	} {
		answer.Store([]byte(body))
		_, err := f.adapter.Dispatch(t.Context(), dispatchReq("inventory", "malformed"))
		if class(err) != "malformed" {
			t.Errorf("%.40q: got %s (%v), want malformed", body, class(err), err)
		}
	}
}

func TestNATSNotSent(t *testing.T) {
	f := newNATSFixture(t, "", 5*time.Second)
	f.respond(t, "actions.provider.inventory.dispatch", func(*nats.Msg) []byte { return []byte(`{"outcome":"confirmed"}`) })

	// A context already done: nothing is sent.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := f.adapter.Dispatch(ctx, dispatchReq("inventory", "done"))
	if class(err) != "not_invoked" || !errors.Is(err, context.Canceled) {
		t.Fatalf("done context: %s (%v)", class(err), err)
	}

	// Over the server's max_payload: refused before sending.
	big := dispatchReq("inventory", "big")
	big.Payload = jsontext.Value(`"` + strings.Repeat("x", 2<<20) + `"`)
	if _, err := f.adapter.Dispatch(t.Context(), big); class(err) != "not_invoked" || !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("oversized: %s (%v)", class(err), err)
	}

	// A closed connection cannot send.
	f.nc.Close()
	if _, err := f.adapter.Dispatch(t.Context(), dispatchReq("inventory", "closed")); class(err) != "not_invoked" {
		t.Fatalf("closed connection: %s (%v)", class(err), err)
	}
	if n := f.received.Load(); n != 0 {
		t.Fatalf("connector received %d requests that were never sent", n)
	}
}

// TestNATSConcurrent: replies go to the right caller.
func TestNATSConcurrent(t *testing.T) {
	f := newNATSFixture(t, "", 10*time.Second)
	f.respond(t, "actions.provider.inventory.dispatch", func(m *nats.Msg) []byte {
		var req schema.DispatchRequest
		if err := schema.Decode(m.Data, &req); err != nil {
			return []byte(`{}`)
		}
		return schema.MustMarshal(schema.AdapterReply{Outcome: "confirmed", ProviderActionID: req.IdempotencyKey})
	})
	errs := make(chan error, 32)
	for i := range 32 {
		go func() {
			req := dispatchReq("inventory", "c"+string(rune('a'+i)))
			r, err := f.adapter.Dispatch(t.Context(), req)
			if err == nil && r.ProviderActionID != req.IdempotencyKey {
				err = errors.New("reply crossed to another caller")
			}
			errs <- err
		}()
	}
	for range 32 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
