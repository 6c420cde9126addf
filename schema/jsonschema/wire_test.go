package jsonschema_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/jsonschema"
)

// The end-to-end tests below run a real processor (testenv) and validate
// every message that crosses the wire: what the host sends, what the
// processor sends to connectors, resolvers and candidate sources, what they
// answer, and what the processor publishes and stores. TestMain fails the
// run if a message kind was never seen on the wire.

var wire = struct {
	sync.Mutex
	seen map[string]int
}{seen: map[string]int{}}

// check validates one message seen on the wire and counts its kind.
func check(t testing.TB, kind string, data []byte) {
	t.Helper()
	if err := jsonschema.Validate(kind, data); err != nil {
		t.Errorf("%s breaks its schema: %v\n%s", kind, err, data)
	}
	wire.Lock()
	wire.seen[kind]++
	wire.Unlock()
}

func TestMain(m *testing.M) {
	code := m.Run()
	filtered := false
	for _, name := range []string{"test.run", "test.skip"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			filtered = true
		}
	}
	if code == 0 && !filtered {
		var missing []string
		for _, k := range jsonschema.Messages() {
			if wire.seen[k] == 0 {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: message kinds never validated on the wire: %s\n", strings.Join(missing, ", "))
			code = 1
		} else {
			fmt.Printf("validated on the wire: %v\n", wire.seen)
		}
	}
	os.Exit(code)
}

// checkRecorded validates every outcome (and its receipt) and incident
// event the Recorder received.
func checkRecorded(t *testing.T, env *testenv.Env) {
	t.Helper()
	for _, raw := range env.Recorder.Raw() {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		if _, ok := m["schema"]; !ok {
			check(t, jsonschema.IncidentEvent, raw)
			continue
		}
		check(t, jsonschema.Outcome, raw)
		if r := m["receipt"]; string(r) != "null" {
			check(t, jsonschema.Receipt, r)
		}
	}
}

// checkActivity validates the activity record of a fingerprint, as stored,
// once the pipeline is idle (it is written after the outcome, before the
// ack).
func checkActivity(t *testing.T, env *testenv.Env, fp string) {
	t.Helper()
	env.Quiesce(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := env.JS.KeyValue(ctx, env.Subjects.ActivityBucket())
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, strings.TrimPrefix(fp, "sha256:"))
	if err != nil {
		t.Fatalf("activity of %s: %v", fp, err)
	}
	check(t, jsonschema.Activity, e.Value())
}

// publish validates a host's message and publishes it signed.
func publish(t *testing.T, env *testenv.Env, kind string, v any) {
	t.Helper()
	check(t, kind, testenv.Body(t, v))
	if kind == jsonschema.Proposal {
		env.PublishSigned(t, v, env.Host)
	} else {
		env.PublishGrant(t, v, env.Host)
	}
}

// serve answers requests on subject with reply(request), validating both.
func serve(t *testing.T, nc *nats.Conn, subject, reqKind, replyKind string, reply func(req []byte) []byte) {
	t.Helper()
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		check(t, reqKind, m.Data)
		out := reply(m.Data)
		check(t, replyKind, out)
		_ = m.Respond(out)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func inventory(t *testing.T, id string, payload map[string]any) map[string]any {
	p := testenv.Lumber(id)
	testenv.Set(p, "intent.provider", "inventory")
	testenv.Set(p, "intent.payload", payload)
	return p
}

// TestWireProvider: a proposal with spend to the nats provider
// "inventory", acknowledged on dispatch and confirmed by reconciliation:
// the dispatch and reconcile requests, the connector's replies, the
// outcomes and receipts, incident events and the activity record.
func TestWireProvider(t *testing.T) {
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) { c.Reconciliation.Interval = 50 * time.Millisecond }))
	serve(t, env.NC, env.Subjects.ProviderDispatch("inventory"), jsonschema.DispatchRequest, jsonschema.AdapterReply, func([]byte) []byte {
		return []byte(`{"outcome":"acknowledged","provider_action_id":"adj_77","evidence_refs":["inventory:adj_77"]}`)
	})
	var polls sync.Mutex
	n := 0
	serve(t, env.NC, env.Subjects.ProviderReconcile("inventory"), jsonschema.ReconcileRequest, jsonschema.AdapterReply, func([]byte) []byte {
		polls.Lock()
		defer polls.Unlock()
		if n++; n == 1 {
			return []byte(`{"outcome":"indeterminate","error_code":"inventory.still_processing"}`)
		}
		return []byte(`{"outcome":"confirmed","evidence_refs":["inventory:ledger/adj_77"]}`)
	})
	p := inventory(t, "wire-provider", map[string]any{"quantity": 20})
	testenv.Set(p, "intent.external_spend", map[string]any{"currency": "EUR", "amount_minor": 1250})
	testenv.Granted(t, p, "sku-1001", time.Now())
	publish(t, env, jsonschema.Proposal, p)
	o := env.Recorder.Wait(t, "wire-provider", testenv.Kind(schema.KindConfirmed))
	outs := env.Recorder.Outcomes("wire-provider")
	if len(outs) < 2 || outs[0].Kind != schema.KindAcknowledged {
		t.Fatalf("outcomes %+v", outs)
	}
	checkRecorded(t, env)
	checkActivity(t, env, *o.Fingerprint)
}

// TestWireFailures: a provider that rejects, and a proposal that names an
// unknown provider, another that does not ground: failure outcomes with
// receipts and incidents, and their events.
func TestWireFailures(t *testing.T) {
	env := testenv.New(t)
	serve(t, env.NC, env.Subjects.ProviderDispatch("inventory"), jsonschema.DispatchRequest, jsonschema.AdapterReply, func([]byte) []byte {
		return []byte(`{"outcome":"rejected","error_code":"inventory.out_of_stock"}`)
	})
	p := inventory(t, "wire-rejected", map[string]any{"quantity": 9000})
	testenv.Granted(t, p, "sku-1001", time.Now())
	publish(t, env, jsonschema.Proposal, p)
	if o := env.Recorder.Wait(t, "wire-rejected", testenv.Terminal); o.Kind != schema.KindRejected {
		t.Fatalf("outcome %+v", o)
	}
	unknown := testenv.Set(testenv.Lumber("wire-unknown"), "intent.provider", "nowhere")
	publish(t, env, jsonschema.Proposal, unknown)
	env.Recorder.Wait(t, "wire-unknown", testenv.Kind(schema.KindDenied))
	ambiguous := testenv.Lumber("wire-ambiguous")
	testenv.Set(ambiguous, "grounding.subject", "lumber")
	publish(t, env, jsonschema.Proposal, ambiguous)
	env.Recorder.Wait(t, "wire-ambiguous", testenv.Kind(schema.KindNeedsClarification))
	checkRecorded(t, env)
}

// TestWireApproval: a parked proposal resumed by a standalone grant, and
// another declined.
func TestWireApproval(t *testing.T) {
	env := testenv.New(t)
	p := testenv.Lumber("wire-approve")
	testenv.Set(p, "intent.payload", map[string]any{"quantity": 21})
	publish(t, env, jsonschema.Proposal, p)
	parked := env.Recorder.Wait(t, "wire-approve", testenv.Kind(schema.KindNeedsApproval))
	checkActivity(t, env, *parked.Fingerprint)
	g := testenv.Grant(*parked.Fingerprint, time.Now(), nil)
	g["proposal_id"] = "wire-approve"
	publish(t, env, jsonschema.Grant, g)
	o := env.Recorder.Wait(t, "wire-approve", testenv.Kind(schema.KindConfirmed))
	checkActivity(t, env, *o.Fingerprint)

	d := testenv.Lumber("wire-decline")
	testenv.Set(d, "intent.payload", map[string]any{"quantity": 22})
	publish(t, env, jsonschema.Proposal, d)
	parked = env.Recorder.Wait(t, "wire-decline", testenv.Kind(schema.KindNeedsApproval))
	publish(t, env, jsonschema.Decline, map[string]any{
		"schema": schema.SchemaDecline, "proposal_id": "wire-decline", "intent_fingerprint": *parked.Fingerprint, "declined_by": "actor:demo",
	})
	o = env.Recorder.Wait(t, "wire-decline", testenv.Kind(schema.KindDenied))
	if len(o.Incidents) != 1 || o.Incidents[0].Code != schema.CodeApprovalDeclined {
		t.Fatalf("outcome %+v", o)
	}
	checkActivity(t, env, *o.Fingerprint)
	checkRecorded(t, env)
}

// TestWireDisclosure: the resolver's request and answer, the dispatch
// request carrying the values; and a refusal.
func TestWireDisclosure(t *testing.T) {
	env := testenv.New(t)
	serve(t, env.NC, env.Subjects.ProviderDispatch("inventory"), jsonschema.DispatchRequest, jsonschema.AdapterReply, func(req []byte) []byte {
		var r schema.DispatchRequest
		if err := json.Unmarshal(req, &r); err != nil || r.ProtectedDisclosure == nil || len(r.ProtectedDisclosure.Values) != 3 {
			t.Errorf("dispatch request without its values: %v", err)
		}
		return []byte(`{"outcome":"confirmed","provider_action_id":"bk_1"}`)
	})
	plan := map[string]any{
		"field_classes": []string{"legal_identity", "contact_details", "travel_documents"}, "recipient": "Duffel",
		"purpose": "Create the exact approved order.", "source": "fictional_test_fixture", "require_reauthentication": true,
	}
	answer := inventory(t, "wire-disclose", map[string]any{"offer_id": "off_1"})
	testenv.Set(answer, "intent.protected_disclosure", plan)
	testenv.Granted(t, answer, "sku-1001", time.Now())
	refuse := inventory(t, "wire-refuse", map[string]any{"offer_id": "off_2"})
	testenv.Set(refuse, "intent.protected_disclosure", plan)
	testenv.Granted(t, refuse, "sku-1001", time.Now())
	refuseFP := testenv.FingerprintOf(t, refuse, "sku-1001")
	values := map[string]any{
		"legal_identity":   map[string]any{"given_name": "Ada", "family_name": "Lovelace", "middle_names": []string{"Augusta"}, "gender": "f"},
		"contact_details":  map[string]any{"email": "ada@example.org", "phone": "+44 20 0000 0000", "address": map[string]any{"line1": "1 St James's Sq", "city": "London", "postal_code": "SW1Y 4JU", "country_code": "GB"}},
		"travel_documents": []any{map[string]any{"document_type": "passport", "issuing_country": "GB", "number": "123456789", "expiry_date": "2031-12-31", "nationality": "GB"}},
	}
	serve(t, env.NC, env.Subjects.DisclosureResolve(), jsonschema.DisclosureRequest, jsonschema.DisclosureReply, func(data []byte) []byte {
		var req schema.DisclosureRequest
		if err := json.Unmarshal(data, &req); err != nil {
			t.Error(err)
		}
		if req.Fingerprint == refuseFP {
			return []byte(`{"refused":true,"reason_code":"user_declined"}`)
		}
		reply := schema.DisclosureReply{
			Schema: schema.SchemaDisclosure, Fingerprint: req.Fingerprint, Provider: req.Provider, Operation: req.Operation,
			Environment: req.Environment, Recipient: req.Recipient, Purpose: req.Purpose, FieldClasses: req.FieldClasses,
			Source: req.Source, AuthenticationAssurance: schema.AssuranceBiometric, ProtectedValues: map[string]jsontext.Value{},
		}
		for c, v := range values {
			reply.ProtectedValues[c] = testenv.Body(t, v)
		}
		return schema.MustMarshal(reply)
	})
	publish(t, env, jsonschema.Proposal, answer)
	o := env.Recorder.Wait(t, "wire-disclose", testenv.Terminal)
	if o.Kind != schema.KindConfirmed || o.Receipt.Disclosure == nil {
		t.Fatalf("outcome %+v", o)
	}
	checkActivity(t, env, *o.Fingerprint)
	publish(t, env, jsonschema.Proposal, refuse)
	o = env.Recorder.Wait(t, "wire-refuse", testenv.Terminal)
	if o.Kind != schema.KindDenied || o.Incidents[0].Code != schema.CodeDisclosureRefused {
		t.Fatalf("outcome %+v", o)
	}
	checkRecorded(t, env)
}

// TestWireCandidateSource: the grounding stage's request to a candidate
// source and the source's answer.
func TestWireCandidateSource(t *testing.T) {
	env := testenv.New(t)
	serve(t, env.NC, env.Subjects.Candidates("catalog"), jsonschema.CandidateRequest, jsonschema.CandidateReply, func([]byte) []byte {
		return []byte(`{"candidates":[
 {"referent":"sku-1001","source":"authoritative","attributes":{"resource":"Lumber: Cedar-8ft-GradeA","grade":"A"},"evidence_refs":["catalog:12#sku-1001"]},
 {"referent":"sku-1002","source":"authoritative","attributes":{"resource":"Lumber: Cedar-10ft-GradeA"},"evidence_refs":[]}],
 "observation_ref":"catalog:12"}`)
	})
	p := testenv.Lumber("wire-sourced")
	testenv.Delete(p, "grounding.candidates")
	testenv.Set(p, "grounding.candidate_source", "catalog")
	testenv.Set(p, "intent.payload", map[string]any{"quantity": 23})
	testenv.Granted(t, p, "sku-1001", time.Now())
	publish(t, env, jsonschema.Proposal, p)
	o := env.Recorder.Wait(t, "wire-sourced", testenv.Terminal)
	if o.Kind != schema.KindConfirmed || *o.Referent != "sku-1001" {
		t.Fatalf("outcome %+v", o)
	}
	checkRecorded(t, env)
	if !slices.Contains(jsonschema.Messages(), jsonschema.CandidateReply) {
		t.Fatal("candidate_reply is not a message kind")
	}
}
