package disclosure_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/disclosure"
	"github.com/portcullis/portcullis/subjects"
)

type resolverFixture struct {
	nc, host *nats.Conn
	subject  string
	asked    atomic.Int64
}

func newResolverFixture(t *testing.T) *resolverFixture {
	t.Helper()
	srv := testenv.StartServer(t, "")
	subj, err := subjects.New("acme")
	if err != nil {
		t.Fatal(err)
	}
	return &resolverFixture{nc: testenv.Connect(t, srv), host: testenv.Connect(t, srv), subject: subj.DisclosureResolve()}
}

// serve runs a resolver on the host connection; answer returns the reply
// body, or nil to stay silent.
func (f *resolverFixture) serve(t *testing.T, answer func(req schema.DisclosureRequest, raw []byte) []byte) {
	t.Helper()
	sub, err := f.host.Subscribe(f.subject, func(m *nats.Msg) {
		f.asked.Add(1)
		var req schema.DisclosureRequest
		if err := schema.Decode(m.Data, &req); err != nil {
			t.Errorf("resolver cannot strictly decode the request: %v", err)
			return
		}
		if b := answer(req, m.Data); b != nil {
			_ = m.Respond(b)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := f.host.Flush(); err != nil {
		t.Fatal(err)
	}
}

func TestResolve(t *testing.T) {
	f := newResolverFixture(t)
	want := request(t)
	var seen schema.DisclosureRequest
	f.serve(t, func(req schema.DisclosureRequest, _ []byte) []byte {
		seen = req
		return encode(t, with(func(m map[string]any) { m["authentication_assurance"] = "managed" }))
	})
	d, err := disclosure.Resolve(t.Context(), f.nc, "acme.disclosure.resolve", want, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(schema.MustMarshal(seen)) != string(schema.MustMarshal(want)) {
		t.Fatalf("resolver saw\n%s\nwant\n%s", schema.MustMarshal(seen), schema.MustMarshal(want))
	}
	if d.Record.AuthenticationAssurance != "managed" || len(d.Values) != 3 {
		t.Fatalf("%v", d)
	}
}

func TestResolveFailures(t *testing.T) {
	f := newResolverFixture(t)
	req := request(t)

	// Nobody serves the subject.
	if _, err := disclosure.Resolve(t.Context(), f.nc, f.subject, req, 5*time.Second); codeOf(err) != string(schema.CodeDisclosureUnavailable) {
		t.Fatalf("no responders: %v", err)
	}

	var mode atomic.Value
	f.serve(t, func(schema.DisclosureRequest, []byte) []byte {
		switch mode.Load().(string) {
		case "refuse":
			return []byte(`{"refused":true,"reason_code":"USER_DECLINED"}`)
		case "garbage":
			return []byte(`<html>`)
		case "mismatch":
			return encode(t, with(func(m map[string]any) { m["operation"] = "cancel_order" }))
		case "weak":
			return encode(t, with(func(m map[string]any) { m["authentication_assurance"] = "session" }))
		case "fields":
			return encode(t, with(func(m map[string]any) { delete(values(m), "birth_date") }))
		case "contract":
			return encode(t, with(func(m map[string]any) { values(m)["birth_date"] = []byte(`"1990-02-30"`) }))
		}
		return nil // silent: the client times out
	})
	cases := map[string]schema.Code{
		"refuse":   schema.CodeDisclosureRefused,
		"garbage":  schema.CodeDisclosureMalformed,
		"weak":     schema.CodeDisclosureReauthRequired,
		"fields":   schema.CodeDisclosureFieldMismatch,
		"contract": schema.CodeDisclosureMalformed,
		"mismatch": schema.CodeDisclosureBindingMismatch,
		"silent":   schema.CodeDisclosureUnavailable,
	}
	for m, want := range cases {
		mode.Store(m)
		timeout := 5 * time.Second
		if m == "silent" {
			timeout = 300 * time.Millisecond
		}
		if _, err := disclosure.Resolve(t.Context(), f.nc, f.subject, req, timeout); codeOf(err) != string(want) {
			t.Errorf("%s: got %s, want %s", m, codeOf(err), want)
		}
	}
}

// TestResolveCallerContext: the caller's own cancellation is not a
// disclosure failure (nothing to record as a denial): the error wraps the
// context's and carries no code.
func TestResolveCallerContext(t *testing.T) {
	f := newResolverFixture(t)
	req := request(t)
	got := make(chan struct{}, 1)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	f.serve(t, func(schema.DisclosureRequest, []byte) []byte {
		got <- struct{}{}
		<-release
		return nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-got; cancel() }()
	_, err := disclosure.Resolve(ctx, f.nc, f.subject, req, time.Minute)
	if _, isCode := disclosure.Code(err); isCode || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled while waiting: %v", err)
	}
	if _, err := disclosure.Resolve(ctx, f.nc, f.subject, req, time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before: %v", err)
	}
	if f.asked.Load() != 1 {
		t.Fatalf("resolver asked %d times", f.asked.Load())
	}
}

// TestResolveInvalidRequest: a bad request is never sent.
func TestResolveInvalidRequest(t *testing.T) {
	f := newResolverFixture(t)
	f.serve(t, func(schema.DisclosureRequest, []byte) []byte { return encode(t, answer()) })
	for i, mut := range []func(*schema.DisclosureRequest){
		func(r *schema.DisclosureRequest) { r.Schema = "" },
		func(r *schema.DisclosureRequest) { r.FieldClasses = nil },
		func(r *schema.DisclosureRequest) { r.FieldClasses = []string{"legal_identity", "birth_date"} }, // not sorted
		func(r *schema.DisclosureRequest) { r.Recipient = " Duffel" },
		func(r *schema.DisclosureRequest) { r.Provider = "Duffel" },
		func(r *schema.DisclosureRequest) { r.AuthorizationMethod = "" },
	} {
		req := request(t)
		mut(&req)
		if _, err := disclosure.Resolve(t.Context(), f.nc, f.subject, req, time.Second); !errors.Is(err, disclosure.ErrInvalidRequest) {
			t.Errorf("%d: %v", i, err)
		}
	}
	if f.asked.Load() != 0 {
		t.Fatal("an invalid request reached the resolver")
	}
}

// TestResolveClosedConnection: the resolver cannot be reached.
func TestResolveClosedConnection(t *testing.T) {
	f := newResolverFixture(t)
	f.nc.Close()
	if _, err := disclosure.Resolve(t.Context(), f.nc, f.subject, request(t), time.Second); codeOf(err) != string(schema.CodeDisclosureUnavailable) {
		t.Fatalf("%v", err)
	}
}
