package client_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/client"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/disclosure"
	"github.com/portcullis/portcullis/subjects"
)

// withDisclosure is an inventory proposal that needs two protected classes
// (reauthentication required), granted inline.
func withDisclosure(t *testing.T, id string) map[string]any {
	t.Helper()
	p := inventory(id)
	testenv.Set(p, "intent.protected_disclosure", map[string]any{
		"field_classes": []string{"legal_identity", "birth_date"}, "recipient": "Duffel",
		"purpose": "Create the exact approved order.", "source": "fictional_test_fixture", "require_reauthentication": true,
	})
	return testenv.Granted(t, p, "sku-1001", time.Now())
}

// Protected values travel from a client Resolver to a client Connector in
// memory: the receipt keeps the value-free record, nothing stores or emits
// a value, and both sides zero the values once done. A refusal denies
// without dispatching.
func TestDisclosureEndToEnd(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	ctx := testContext(t)

	var mu sync.Mutex
	var released, received [][]byte
	var receivedMap map[string]jsontext.Value
	res, err := client.ServeResolver(connect(t, env, env.Resolver).Conn, client.ResolverConfig{},
		client.DisclosureFunc(func(_ context.Context, req schema.DisclosureRequest) (client.Disclosure, error) {
			if strings.Contains(req.Purpose, "refuse") {
				return client.Disclosure{}, client.Refuse("user.declined")
			}
			values := map[string]jsontext.Value{
				schema.ClassLegalIdentity: jsontext.Value(`{"given_name":"SECRET-GIVEN-41","family_name":"SECRET-FAMILY-42"}`),
				schema.ClassBirthDate:     jsontext.Value(`"1990-02-28"`),
			}
			mu.Lock()
			for _, v := range values {
				released = append(released, v)
			}
			mu.Unlock()
			return client.Disclosure{AuthenticationAssurance: schema.AssuranceBiometric, Values: values}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Stop()
	resolved := make(chan struct{}, 2)
	res.OnServed(func() { resolved <- struct{}{} })

	inv := &provider{dispatch: func(_ context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
		mu.Lock()
		defer mu.Unlock()
		if d := req.ProtectedDisclosure; d != nil {
			receivedMap = d.Values
			for _, v := range d.Values {
				received = append(received, v)
			}
		}
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed}, nil
	}}
	conn := serveInventory(t, env, inv)
	dispatched := make(chan struct{}, 1)
	conn.OnServed(func() { dispatched <- struct{}{} })

	host := newHost(t, env, client.HostConfig{})
	tr, err := host.Propose(ctx, proposal(t, withDisclosure(t, "prop-disc")))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	o, err := tr.Await(ctx, client.Terminal)
	if err != nil {
		t.Fatal(err)
	}
	if o.Kind != schema.KindConfirmed || o.Receipt == nil || o.Receipt.Disclosure == nil {
		t.Fatalf("outcome %+v", o)
	}
	if d := o.Receipt.Disclosure; d.Recipient != "Duffel" || d.AuthenticationAssurance != schema.AssuranceBiometric || len(d.FieldClasses) != 2 {
		t.Errorf("disclosure record %+v", d)
	}
	<-resolved
	<-dispatched
	mu.Lock()
	if len(released) != 2 || len(received) != 2 {
		t.Fatalf("resolver released %d values, connector received %d", len(released), len(received))
	}
	for i, v := range append(append([][]byte(nil), released...), received...) {
		if len(bytes.Trim(v, "\x00")) != 0 {
			t.Errorf("value %d not zeroed after the call: %q", i, v)
		}
	}
	if len(receivedMap) != 0 {
		t.Errorf("%d classes left in the connector's map", len(receivedMap))
	}
	mu.Unlock()
	env.AssertNowhere(t, "SECRET-GIVEN-41", "SECRET-FAMILY-42", "1990-02-28")

	// A refusal: denied, nothing dispatched.
	p := withDisclosure(t, "prop-refuse")
	testenv.Set(p, "intent.protected_disclosure.purpose", "Please refuse this.")
	p = testenv.Granted(t, p, "sku-1001", time.Now())
	tr2, err := host.Propose(ctx, proposal(t, p))
	if err != nil {
		t.Fatal(err)
	}
	defer tr2.Stop()
	o, err = tr2.Await(ctx, client.Terminal)
	if err != nil {
		t.Fatal(err)
	}
	if o.Kind != schema.KindDenied || !hasIncident(o, schema.PhaseDisclosure, schema.CodeDisclosureRefused) {
		t.Errorf("outcome %+v, want DENIED/PROTECTED_DISCLOSURE_REFUSED", o)
	}
	if n, _ := inv.counts(); n != 1 {
		t.Errorf("%d dispatches, want only the first", n)
	}
}

// What a Resolver answers, judged by the processor's own check of
// resolver replies.
func TestResolverReplies(t *testing.T) {
	nc := testenv.Connect(t, testenv.StartServer(t, ""))
	var logs bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))
	identity := jsontext.Value(`{"given_name":"Ada","family_name":"Lovelace"}`)
	res, err := client.ServeResolver(nc, client.ResolverConfig{Logger: logger},
		client.DisclosureFunc(func(_ context.Context, req schema.DisclosureRequest) (client.Disclosure, error) {
			switch req.Recipient {
			case "refuse":
				return client.Disclosure{}, client.Refuse("user.declined")
			case "refuse-badly":
				return client.Disclosure{}, client.Refuse("no spaces allowed")
			case "error":
				return client.Disclosure{}, errors.New("profile store down")
			case "panic":
				panic("boom")
			case "missing":
				return client.Disclosure{AuthenticationAssurance: schema.AssuranceBiometric,
					Values: map[string]jsontext.Value{schema.ClassLegalIdentity: append(jsontext.Value(nil), identity...)}}, nil
			case "weak":
				return client.Disclosure{AuthenticationAssurance: schema.AssuranceSession, Values: map[string]jsontext.Value{
					schema.ClassLegalIdentity: append(jsontext.Value(nil), identity...), schema.ClassBirthDate: jsontext.Value(`"1990-01-01"`)}}, nil
			}
			return client.Disclosure{AuthenticationAssurance: schema.AssuranceBiometric, Values: map[string]jsontext.Value{
				schema.ClassLegalIdentity: append(jsontext.Value(nil), identity...), schema.ClassBirthDate: jsontext.Value(`"1990-01-01"`)}}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Stop()

	ask := func(recipient string) (schema.DisclosureRequest, *nats.Msg) {
		in := schema.Intent{Provider: "inventory", Operation: "adjust_stock", Environment: "test",
			ProtectedDisclosure: &schema.DisclosurePlan{FieldClasses: []string{"legal_identity", "birth_date"}, Recipient: recipient,
				Purpose: "Book.", Source: schema.SourceFictionalTestFixture, RequireReauthentication: true}}
		req, err := disclosure.NewRequest(testFP, &in, &schema.Grant{AuthorizationMethod: schema.MethodManual, AuthenticationAssurance: schema.AssuranceBiometric})
		if err != nil {
			t.Fatal(err)
		}
		m, err := nc.Request(subjects.Default().DisclosureResolve(), schema.MustMarshal(req), timeout)
		if err != nil {
			t.Fatal(err)
		}
		return req, m
	}
	for _, tc := range []struct {
		recipient string
		code      schema.Code
	}{
		{"Duffel", ""},
		{"refuse", schema.CodeDisclosureRefused},
		{"refuse-badly", schema.CodeDisclosureRefused},
		{"error", schema.CodeDisclosureRefused},
		{"panic", schema.CodeDisclosureRefused},
		{"missing", schema.CodeDisclosureFieldMismatch},
		{"weak", schema.CodeDisclosureReauthRequired},
	} {
		req, m := ask(tc.recipient)
		d, err := disclosure.Evaluate(&req, m.Data)
		code, _ := disclosure.Code(err)
		if code != tc.code || (err != nil && tc.code == "") {
			t.Errorf("%s: the processor would say %q (%v), want %q", tc.recipient, code, err, tc.code)
		}
		if err == nil && (string(d.Values[schema.ClassLegalIdentity]) != string(identity) || d.Record.AuthenticationAssurance != schema.AssuranceBiometric) {
			t.Errorf("%s: disclosure %v", tc.recipient, d)
		}
	}
	_, m := ask("refuse-badly")
	if !strings.Contains(string(m.Data), client.ReasonRefused) {
		t.Errorf("an invalid refusal code was sent as %s", m.Data)
	}
	m, err = nc.Request(subjects.Default().DisclosureResolve(), []byte(`{"schema":"actions.disclosure.v1","colour":"red"}`), timeout)
	if err != nil || !strings.Contains(string(m.Data), client.ReasonMalformedRequest) {
		t.Errorf("malformed request: %s, %v", msgData(m), err)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(logs.String(), string(schema.CodeDisclosureFieldMismatch)) || strings.Contains(logs.String(), "Lovelace") {
		t.Errorf("log does not name the code the processor will give, or names a value:\n%s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func msgData(m *nats.Msg) []byte {
	if m == nil {
		return nil
	}
	return m.Data
}
