package dispatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv"

	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/fault"
	"github.com/portcullis/portcullis/subjects"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// proposal is a signed-off lumber adjustment with an inline grant; payload
// names the case so a scripted provider can tell proposals apart.
func proposal(t *testing.T, id, kase string) map[string]any {
	t.Helper()
	p := testenv.Lumber(id)
	testenv.Set(p, "intent.payload", map[string]any{"quantity": 20, "case": kase})
	return testenv.Granted(t, p, "sku-1001", time.Now())
}

func caseOf(req schema.DispatchRequest) string {
	var p struct {
		Case string `json:"case"`
	}
	_ = json.Unmarshal(req.Payload, &p)
	return p.Case
}

func keyOf(t *testing.T, p map[string]any) string {
	return strings.TrimPrefix(testenv.FingerprintOf(t, p, "sku-1001"), "sha256:")
}

func TestConfirmedDispatch(t *testing.T) {
	env := testenv.New(t)
	p := proposal(t, "prop-1", "ok")
	env.PublishSigned(t, p, env.Host)
	o := env.Recorder.Wait(t, "prop-1", testenv.Terminal)
	if o.Kind != schema.KindConfirmed || o.EffectTruth != schema.TruthPresent || len(o.Incidents) != 0 {
		t.Fatalf("outcome = %+v", o)
	}
	key := keyOf(t, p)
	r := o.Receipt
	if r == nil || r.Status != schema.StatusConfirmed || r.IdempotencyKey != key || r.Fingerprint != "sha256:"+key ||
		r.Adapter != adapters.KindFake || !r.DispatchAttempted || r.NextAction != schema.NextNone ||
		r.ProviderActionID == "" || len(r.EvidenceRefs) != 1 || r.Provider != "demo" || r.Operation != "adjust_stock" ||
		!strings.HasPrefix(r.ReceiptID, "rcpt_") || r.Reconciliation != nil || r.Disclosure != nil {
		t.Errorf("receipt = %+v", r)
	}
	if *o.Referent != "sku-1001" || *o.Fingerprint != r.Fingerprint {
		t.Errorf("binding = %v %v", *o.Referent, *o.Fingerprint)
	}
	if n := env.Fakes["demo"].DeliveredFor(key); n != 1 {
		t.Errorf("provider saw the key %d times", n)
	}
	m := env.Processor().Metrics()
	if got := testutil.ToFloat64(m.Dispatches.WithLabelValues("demo", string(schema.StatusConfirmed))); got != 1 {
		t.Errorf("dispatches{demo,confirmed} = %v", got)
	}
	if n := testutil.CollectAndCount(m.DispatchDuration); n != 2 {
		t.Errorf("dispatch duration series = %d", n)
	}
	waitActivity(t, env, r.Fingerprint, func(a *schema.Activity) bool {
		return a.Status == string(schema.StatusConfirmed) && a.Receipt != nil && a.Receipt.ReceiptID == r.ReceiptID &&
			a.Dispatch != nil && a.Dispatch.Attempted && a.Dispatch.Adapter == "fake"
	})
}

// waitActivity returns the fingerprint's snapshot once the pipeline is
// idle (dispatch writes it after its outcome, before it acks) and fails
// unless ok holds for it.
func waitActivity(t *testing.T, env *testenv.Env, fp string, ok func(*schema.Activity) bool) *schema.Activity {
	t.Helper()
	env.Quiesce(t)
	a, err := env.Processor().Activity().Get(context.Background(), fp)
	if err != nil || !ok(a) {
		t.Fatalf("activity of %s: %+v %v", fp, a, err)
	}
	return a
}

// The same intent proposed twice — one after the other, and many at the
// same moment — reaches the provider once; every proposal gets the receipt.
func TestSameIntentReachesProviderOnce(t *testing.T) {
	env := testenv.New(t)
	fake := env.Fakes["demo"]
	var inCall atomic.Int32
	fake.OnDispatch(func(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
		if inCall.Add(1) > 1 {
			t.Error("two dispatch calls at once")
		}
		defer inCall.Add(-1)
		time.Sleep(200 * time.Millisecond) // widen the window for a racing twin
		return schema.AdapterReply{Outcome: "confirmed", ProviderActionID: "inv:" + req.IdempotencyKey[:8]}, nil
	})

	first := proposal(t, "prop-a", "twice")
	env.PublishSigned(t, first, env.Host)
	oa := env.Recorder.Wait(t, "prop-a", testenv.Terminal)
	second := proposal(t, "prop-b", "twice")
	env.PublishSigned(t, second, env.Host)
	ob := env.Recorder.Wait(t, "prop-b", testenv.Terminal)
	if oa.Receipt == nil || ob.Receipt == nil || oa.Receipt.ReceiptID != ob.Receipt.ReceiptID || ob.Kind != schema.KindConfirmed || *ob.Fingerprint != *oa.Fingerprint {
		t.Errorf("second proposal: %+v vs %+v", ob, oa)
	}

	const n = 12
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { env.PublishSigned(t, proposal(t, fmt.Sprintf("prop-c%02d", i), "together"), env.Host) })
	}
	wg.Wait()
	var receipt string
	for i := range n {
		o := env.Recorder.Wait(t, fmt.Sprintf("prop-c%02d", i), testenv.Terminal)
		if o.Kind != schema.KindConfirmed || o.Receipt == nil {
			t.Fatalf("outcome %+v", o)
		}
		if receipt == "" {
			receipt = o.Receipt.ReceiptID
		} else if o.Receipt.ReceiptID != receipt {
			t.Errorf("receipts differ: %s vs %s", o.Receipt.ReceiptID, receipt)
		}
	}
	for key, got := range fake.Delivered() {
		if got != 1 {
			t.Errorf("provider saw %s %d times", key, got)
		}
	}
	if got := fake.Dispatches(); got != 2 {
		t.Errorf("provider calls = %d, want 2 (one per intent)", got)
	}
	// A restart and a replay of the first proposal's delivery change nothing.
	env.Restart(t)
	env.PublishSigned(t, proposal(t, "prop-d", "twice"), env.Host)
	if o := env.Recorder.Wait(t, "prop-d", testenv.Terminal); o.Receipt == nil || o.Receipt.ReceiptID != oa.Receipt.ReceiptID {
		t.Errorf("after restart: %+v", o)
	}
	if got := fake.Dispatches(); got != 2 {
		t.Errorf("provider calls after restart = %d", got)
	}
}

// Every dispatch code of SPEC §2.5 that a provider's answer produces.
func TestProviderAnswers(t *testing.T) {
	env := testenv.New(t)
	env.Fakes["demo"].OnDispatch(func(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
		switch caseOf(req) {
		case "rejected":
			return schema.AdapterReply{Outcome: "rejected", ErrorCode: "out_of_stock"}, nil
		case "failed":
			return schema.AdapterReply{Outcome: "failed_before_dispatch"}, nil
		case "indeterminate":
			return schema.AdapterReply{Outcome: "indeterminate"}, nil
		case "acknowledged":
			return schema.AdapterReply{Outcome: "acknowledged", ProviderActionID: "inv:1"}, nil
		case "malformed":
			return schema.AdapterReply{Outcome: "done!"}, nil
		case "bad-evidence":
			return schema.AdapterReply{Outcome: "confirmed", EvidenceRefs: []string{"no colon"}}, nil
		case "timeout":
			return schema.AdapterReply{}, fmt.Errorf("inventory slow: %w", adapters.ErrTimeout)
		case "error":
			return schema.AdapterReply{}, errors.New("connection reset by peer")
		}
		return schema.AdapterReply{Outcome: "confirmed"}, nil
	})
	cases := []struct {
		kase     string
		kind     schema.Kind
		status   schema.Status
		code     schema.Code
		boundary schema.Boundary
	}{
		{"rejected", schema.KindRejected, schema.StatusRejected, schema.CodeProviderRejected, schema.BoundaryInvoked},
		{"failed", schema.KindFailedBeforeDispatch, schema.StatusFailedBeforeDispatch, schema.CodeProviderFailedBeforeDispatch, schema.BoundaryNotInvoked},
		{"indeterminate", schema.KindReconciliationRequired, schema.StatusReconciliationRequired, schema.CodeProviderIndeterminate, schema.BoundaryInvoked},
		{"acknowledged", schema.KindAcknowledged, schema.StatusAcknowledged, "", ""},
		{"malformed", schema.KindReconciliationRequired, schema.StatusReconciliationRequired, schema.CodeMalformedAdapterResult, schema.BoundaryInvoked},
		{"bad-evidence", schema.KindReconciliationRequired, schema.StatusReconciliationRequired, schema.CodeMalformedAdapterResult, schema.BoundaryInvoked},
		{"timeout", schema.KindReconciliationRequired, schema.StatusReconciliationRequired, schema.CodeAdapterTimeout, schema.BoundaryUnknown},
		{"error", schema.KindReconciliationRequired, schema.StatusReconciliationRequired, schema.CodeAdapterError, schema.BoundaryUnknown},
	}
	for _, tc := range cases {
		env.PublishSigned(t, proposal(t, "prop-"+tc.kase, tc.kase), env.Host)
	}
	for _, tc := range cases {
		t.Run(tc.kase, func(t *testing.T) {
			o := env.Recorder.Wait(t, "prop-"+tc.kase, testenv.Kind(tc.kind))
			if o.Receipt == nil || o.Receipt.Status != tc.status {
				t.Fatalf("outcome %+v", o)
			}
			if tc.code == "" {
				if len(o.Incidents) != 0 {
					t.Errorf("incidents %+v", o.Incidents)
				}
			} else {
				want := schema.Incident{Phase: schema.PhaseDispatch, Code: tc.code, DispatchBoundary: tc.boundary}
				if len(o.Incidents) != 1 || o.Incidents[0] != want {
					t.Errorf("incidents %+v, want %+v", o.Incidents, want)
				}
				env.Recorder.WaitEvent(t, schema.PhaseDispatch, tc.code)
			}
			if tc.status == schema.StatusReconciliationRequired && o.Receipt.NextAction != schema.NextReconcile {
				t.Errorf("next action %s", o.Receipt.NextAction)
			}
			if tc.kase == "rejected" && o.Receipt.ErrorCode != "out_of_stock" {
				t.Errorf("error code %q: the provider's code is kept", o.Receipt.ErrorCode)
			}
		})
	}
	ind := testutil.ToFloat64(env.Processor().Metrics().Indeterminate)
	if ind < 4 {
		t.Errorf("actions_indeterminate_actions = %v, want ≥ 4", ind)
	}
}

// A connector that is not subscribed yet gets the dispatch once it is
// (inside unavailable_retry); one that never comes ends ADAPTER_UNAVAILABLE.
func TestConnectorNotYetThere(t *testing.T) {
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) {
		for i := range c.Providers {
			if c.Providers[i].Name == "inventory" {
				c.Providers[i].UnavailableRetry = 3 * time.Second
			}
		}
	}))
	late := proposal(t, "prop-late", "late")
	testenv.Set(late, "intent.provider", "inventory")
	late = testenv.Granted(t, late, "sku-1001", time.Now())
	env.PublishSigned(t, late, env.Host)
	// Several "no responders" meanwhile: each is a delayed redelivery the
	// runner counts as a retry.
	retries := env.Processor().Metrics().StageMessages.WithLabelValues(subjects.StageDispatch, metrics.ResultRetry)
	testenv.WaitFor(t, "three dispatches nobody received (retries)", func() bool { return testutil.ToFloat64(retries) >= 3 })
	if outs := env.Recorder.Outcomes("prop-late"); len(outs) != 0 {
		t.Fatalf("outcome before the connector came: %+v", outs)
	}
	connector := adapters.NewFake("inventory", adapters.FakeScript{})
	stop, err := connector.Serve(env.NC, env.Subjects)
	if err != nil {
		t.Fatal(err)
	}
	o := env.Recorder.Wait(t, "prop-late", testenv.Terminal)
	if o.Kind != schema.KindConfirmed || o.Receipt.Adapter != adapters.KindNATS {
		t.Errorf("outcome %+v", o)
	}
	if n := connector.DeliveredFor(keyOf(t, late)); n != 1 {
		t.Errorf("connector saw the dispatch %d times", n)
	}
	stop()

	never := proposal(t, "prop-never", "never")
	testenv.Set(never, "intent.provider", "inventory")
	never = testenv.Granted(t, never, "sku-1001", time.Now())
	start := time.Now()
	env.PublishSigned(t, never, env.Host)
	o = env.Recorder.Wait(t, "prop-never", testenv.Terminal)
	want := schema.Incident{Phase: schema.PhaseDispatch, Code: schema.CodeAdapterUnavailable, DispatchBoundary: schema.BoundaryNotInvoked}
	if o.Kind != schema.KindFailedBeforeDispatch || len(o.Incidents) != 1 || o.Incidents[0] != want || o.Receipt.DispatchAttempted {
		t.Errorf("outcome %+v", o)
	}
	if d := time.Since(start); d < 3*time.Second {
		t.Errorf("gave up after %s, inside the 3s window", d)
	}
}

// The grant window and managed policy are checked again at dispatch: a
// denial there ends that proposal and sends nothing, but does not bind the
// fingerprint (SPEC §3 step 3): a later proposal of the same intent with
// a fresh grant is judged afresh and dispatched. (Before, a grant that
// expired while dispatch was backlogged, or one a hostile tenant made
// expire on purpose, became the intent's answer forever.)
func TestDispatchTimeDenial(t *testing.T) {
	env := testenv.New(t)
	p := proposal(t, "prop-late-grant", "expired")
	fp := testenv.FingerprintOf(t, p, "sku-1001")
	past := time.Now().Add(-time.Hour)
	prop, err := schema.DecodeProposal(testenv.Body(t, p), 0)
	if err != nil {
		t.Fatal(err)
	}
	g := testenv.Grant(fp, past, nil)
	var grant schema.Grant
	if err := schema.Decode(testenv.Body(t, g), &grant); err != nil {
		t.Fatal(err)
	}
	prop.Grant = nil
	prop.Grounding.Candidates = nil
	e := schema.Envelope{
		Schema: schema.SchemaEnvelope, Proposal: *prop, Host: "frontdesk", AdmittedAtMs: past.UnixMilli(),
		Grounded:      &schema.Grounded{Referent: "sku-1001", Fingerprint: fp, IdempotencyKey: strings.TrimPrefix(fp, "sha256:"), ObservationRef: "catalog:12"},
		Authorization: &schema.AuthorizationRecord{Grant: grant, DecidedAtMs: past.UnixMilli()},
	}
	subject := env.Subjects.Stage(subjects.StageDispatch, subjects.KindProposal, "frontdesk.prop-late-grant")
	env.PublishInternal(t, subject, schema.MustMarshal(e))
	o := env.Recorder.Wait(t, "prop-late-grant", testenv.Terminal)
	want := schema.Incident{Phase: schema.PhaseAuthorization, Code: schema.CodeGrantExpired, DispatchBoundary: schema.BoundaryNotInvoked}
	if o.Kind != schema.KindDenied || len(o.Incidents) != 1 || o.Incidents[0] != want || o.Receipt != nil || o.Fingerprint == nil || *o.Fingerprint != fp {
		t.Errorf("outcome %+v", o)
	}
	if env.Fakes["demo"].Dispatches() != 0 {
		t.Error("a denied intent reached the provider")
	}
	// The denial is recorded on the intent (so that no processor deciding
	// the same proposal can dispatch it after this answer) but binds
	// nothing: no in-flight record, no receipt.
	var rec kv.Intent
	if found, _ := env.Processor().Store().Intent(fp, &rec); found && (rec.State != kv.StateNew || rec.Receipt != nil || len(rec.Proposals) != 0) {
		t.Errorf("the denial bound the fingerprint: %+v", rec)
	}
	// The same proposal handed on again (a redelivery after the stream's
	// duplicate window) gets the same answer, even with its grant now
	// judged at another time.
	m := e
	m.AdmittedAtMs++ // another message id
	env.PublishInternal(t, subject, schema.MustMarshal(m))
	outs := env.Recorder.WaitAll(t, "prop-late-grant", testenv.Count(2))
	if outs[1].Kind != schema.KindDenied || outs[1].Incidents[0] != want {
		t.Errorf("repeat of the denied proposal: %+v", outs[1])
	}
	// A later proposal of the same intent with a fresh grant is dispatched.
	env.PublishSigned(t, proposal(t, "prop-again", "expired"), env.Host) // the same intent, a fresh grant
	o2 := env.Recorder.Wait(t, "prop-again", testenv.Terminal)
	if o2.Kind != schema.KindConfirmed || o2.Fingerprint == nil || *o2.Fingerprint != fp {
		t.Errorf("second proposal %+v", o2)
	}
	if n := env.Fakes["demo"].Dispatches(); n != 1 {
		t.Errorf("dispatches = %d, want 1", n)
	}
}

// A failing in-flight write ends INTEGRATION_FAILURE/CHECKPOINT_FAILED and
// the provider is never called.
func TestCheckpointFailure(t *testing.T) {
	var armed atomic.Bool
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if armed.Load() && strings.HasSuffix(op.Path, ".log") && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return errorfs.ErrInjected
		}
		return nil
	}))
	restore := fault.Set(func(name string) {
		if name == fault.DispatchBeforeInFlight {
			armed.Store(true)
		}
	})
	defer restore()
	env := testenv.New(t, testenv.WithStoreFS(fs))
	env.PublishSigned(t, proposal(t, "prop-cp", "checkpoint"), env.Host)
	o := env.Recorder.Wait(t, "prop-cp", testenv.Terminal)
	want := schema.Incident{Phase: schema.PhaseDispatch, Code: schema.CodeCheckpointFailed, DispatchBoundary: schema.BoundaryNotInvoked}
	if o.Kind != schema.KindIntegrationFailure || len(o.Incidents) != 1 || o.Incidents[0] != want || o.Receipt != nil {
		t.Errorf("outcome %+v", o)
	}
	if n := env.Fakes["demo"].Dispatches(); n != 0 {
		t.Errorf("provider called %d times", n)
	}
	// The store refuses writes from now on: the processor stops itself.
	select {
	case <-env.Processor().Done():
	case <-time.After(testenv.WaitTimeout):
		t.Fatal("the processor kept running on a failed store")
	}
	if err := env.Processor().Close(); !errors.Is(err, pebble.ErrFailed) {
		t.Errorf("processor error = %v", err)
	}
	env.Forget()
}

// disclosureResolver answers the resolver subject with the values given, for
// the classes requested, echoing the bindings.
func disclosureResolver(t *testing.T, env *testenv.Env, assurance string, values map[string]any, refuse bool) {
	t.Helper()
	sub, err := env.NC.Subscribe(env.Subjects.DisclosureResolve(), func(m *nats.Msg) {
		var req schema.DisclosureRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("resolver request: %v", err)
			return
		}
		if refuse {
			m.Respond([]byte(`{"refused": true, "reason_code": "user_declined"}`))
			return
		}
		reply := map[string]any{
			"schema": schema.SchemaDisclosure, "fingerprint": req.Fingerprint, "provider": req.Provider,
			"operation": req.Operation, "environment": req.Environment, "recipient": req.Recipient,
			"purpose": req.Purpose, "field_classes": req.FieldClasses, "source": req.Source,
			"authentication_assurance": assurance, "protected_values": values,
		}
		b, _ := json.Marshal(reply)
		m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
}

func withDisclosure(t *testing.T, id string) map[string]any {
	t.Helper()
	p := testenv.Lumber(id)
	testenv.Set(p, "intent.payload", map[string]any{"offer_id": "off_SECRET-PAYLOAD-77", "case": id})
	testenv.Set(p, "intent.protected_disclosure", map[string]any{
		"field_classes": []string{"legal_identity", "birth_date"}, "recipient": "Duffel",
		"purpose": "Create the exact approved order.", "source": "fictional_test_fixture", "require_reauthentication": true,
	})
	return testenv.Granted(t, p, "sku-1001", time.Now())
}

// Protected values reach the adapter in memory only: the receipt keeps the
// value-free record, and no value or payload string is stored or emitted.
func TestProtectedDisclosure(t *testing.T) {
	env := testenv.New(t)
	var got schema.DispatchRequest
	var mu sync.Mutex
	env.Fakes["demo"].OnDispatch(func(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
		mu.Lock()
		got = req
		if req.ProtectedDisclosure != nil {
			// Copy what the test checks: the stage wipes the values after the call.
			got.ProtectedDisclosure = &schema.DispatchDisclosure{FieldClasses: req.ProtectedDisclosure.FieldClasses, Values: map[string]jsontext.Value{}}
			for k, v := range req.ProtectedDisclosure.Values {
				got.ProtectedDisclosure.Values[k] = append([]byte(nil), v...)
			}
		}
		mu.Unlock()
		return schema.AdapterReply{Outcome: "confirmed"}, nil
	})
	values := map[string]any{
		"legal_identity": map[string]any{"given_name": "SECRET-GIVEN-41", "family_name": "SECRET-FAMILY-42", "gender": "f"},
		"birth_date":     "1990-02-28",
	}
	disclosureResolver(t, env, "biometric", values, false)
	env.PublishSigned(t, withDisclosure(t, "prop-disc"), env.Host)
	o := env.Recorder.Wait(t, "prop-disc", testenv.Terminal)
	if o.Kind != schema.KindConfirmed || o.Receipt.Disclosure == nil {
		t.Fatalf("outcome %+v", o)
	}
	d := o.Receipt.Disclosure
	if d.Recipient != "Duffel" || d.Source != "fictional_test_fixture" || d.AuthenticationAssurance != "biometric" || len(d.FieldClasses) != 2 {
		t.Errorf("disclosure record %+v", d)
	}
	mu.Lock()
	if got.ProtectedDisclosure == nil || !strings.Contains(string(got.ProtectedDisclosure.Values["legal_identity"]), "SECRET-GIVEN-41") {
		t.Errorf("the adapter did not receive the values: %+v", got.ProtectedDisclosure)
	}
	mu.Unlock()
	waitActivity(t, env, *o.Fingerprint, func(a *schema.Activity) bool {
		return a.Disclosure != nil && a.Status == string(schema.StatusConfirmed)
	})
	env.AssertNowhere(t, "SECRET-GIVEN-41", "SECRET-FAMILY-42", "1990-02-28", "SECRET-PAYLOAD-77")
}

func TestDisclosureFailuresDispatchNothing(t *testing.T) {
	cases := []struct {
		name      string
		resolver  bool
		assurance string
		refuse    bool
		values    map[string]any
		code      schema.Code
	}{
		{"no resolver", false, "", false, nil, schema.CodeDisclosureUnavailable},
		{"refused", true, "biometric", true, nil, schema.CodeDisclosureRefused},
		{"weak assurance", true, "session", false, map[string]any{"legal_identity": map[string]any{"given_name": "A", "family_name": "B"}, "birth_date": "1990-01-01"}, schema.CodeDisclosureReauthRequired},
		{"missing class", true, "biometric", false, map[string]any{"birth_date": "1990-01-01"}, schema.CodeDisclosureFieldMismatch},
		{"bad value", true, "biometric", false, map[string]any{"legal_identity": map[string]any{"given_name": "A", "family_name": "B"}, "birth_date": "1990-02-30"}, schema.CodeDisclosureMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := testenv.New(t)
			if tc.resolver {
				disclosureResolver(t, env, tc.assurance, tc.values, tc.refuse)
			}
			env.PublishSigned(t, withDisclosure(t, "prop-d"), env.Host)
			o := env.Recorder.Wait(t, "prop-d", testenv.Terminal)
			want := schema.Incident{Phase: schema.PhaseDisclosure, Code: tc.code, DispatchBoundary: schema.BoundaryNotInvoked}
			if o.Kind != schema.KindDenied || len(o.Incidents) != 1 || o.Incidents[0] != want || o.Receipt != nil {
				t.Errorf("outcome %+v", o)
			}
			if n := env.Fakes["demo"].Dispatches(); n != 0 {
				t.Errorf("dispatched %d times", n)
			}
		})
	}
}

// The http adapter end to end: the provider receives the dispatch body once,
// with the Idempotency-Key header and the body's not_after_ms repeated in
// Actions-Not-After, and its reply becomes the receipt.
func TestHTTPProvider(t *testing.T) {
	var calls atomic.Int32
	var gotKey, notAfter atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/dispatch" || r.Method != http.MethodPost {
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		calls.Add(1)
		gotKey.Store(r.Header.Get("Idempotency-Key"))
		var req schema.DispatchRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Schema != schema.SchemaDispatch || req.Referent != "sku-1001" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		notAfter.Store(fmt.Sprint(r.Header.Get(schema.HeaderNotAfter) == fmt.Sprint(req.NotAfterMs), req.NotAfterMs > time.Now().UnixMilli()))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"outcome":"confirmed","provider_action_id":"stock:%s","evidence_refs":["ledger:%s"]}`, req.IdempotencyKey[:8], req.IdempotencyKey[:8])
	}))
	defer srv.Close()
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) {
		c.Providers = append(c.Providers, config.Provider{Name: "stock", Adapter: adapters.KindHTTP, Settings: adapters.HTTPSettings{BaseURL: srv.URL},
			Timeout: 2 * time.Second, UnavailableRetry: time.Second, MaxInFlight: 16})
	}))
	p := testenv.Lumber("prop-http")
	testenv.Set(p, "intent.provider", "stock")
	p = testenv.Granted(t, p, "sku-1001", time.Now())
	env.PublishSigned(t, p, env.Host)
	o := env.Recorder.Wait(t, "prop-http", testenv.Terminal)
	key := keyOf(t, p)
	if o.Kind != schema.KindConfirmed || o.Receipt.Adapter != adapters.KindHTTP || o.Receipt.ProviderActionID != "stock:"+key[:8] || o.Receipt.EvidenceRefs[0] != "ledger:"+key[:8] {
		t.Errorf("outcome %+v", o)
	}
	if calls.Load() != 1 || gotKey.Load() != key {
		t.Errorf("provider calls %d, Idempotency-Key %v", calls.Load(), gotKey.Load())
	}
	if notAfter.Load() != "true true" {
		t.Errorf("Actions-Not-After is the body's not_after_ms, in the future: %v", notAfter.Load())
	}
}

// SPEC §4: a connector that receives a dispatch after its not_after_ms
// does not act on it (the fake plays one whose clock runs an hour ahead,
// for the first request only). Nothing was done, and no other processor
// recorded the intent meanwhile: the dispatch is sent again, with a new
// lease, and confirmed — the provider acted once.
func TestLateRequestRefusedThenSentAgain(t *testing.T) {
	env := testenv.New(t)
	fake := env.Fakes["demo"]
	var calls atomic.Int32
	fake.SetClock(func() time.Time {
		if calls.Add(1) == 1 {
			return time.Now().Add(time.Hour)
		}
		return time.Now()
	})
	var got atomic.Pointer[schema.DispatchRequest]
	var sentAt atomic.Int64
	fake.OnDispatch(func(_ context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
		sentAt.Store(time.Now().UnixMilli())
		got.Store(&req)
		return schema.AdapterReply{Outcome: "confirmed"}, nil
	})
	p := proposal(t, "prop-late", "late")
	env.PublishSigned(t, p, env.Host)
	o := env.Recorder.Wait(t, "prop-late", testenv.Terminal)
	key := keyOf(t, p)
	if o.Kind != schema.KindConfirmed || len(env.Recorder.Outcomes("prop-late")) != 1 {
		t.Errorf("outcomes %+v", env.Recorder.Outcomes("prop-late"))
	}
	if fake.LateFor(key) != 1 || fake.DeliveredFor(key) != 1 || fake.DispatchesFor(key) != 1 {
		t.Errorf("late %d, delivered %d, dispatched %d: want 1, 1, 1", fake.LateFor(key), fake.DeliveredFor(key), fake.DispatchesFor(key))
	}
	// The request that was acted on carries its own lease, the one its
	// in-flight record (the second) keeps in the journal: the provider's
	// timeout (2s) and the margin (5s) from the in-flight write.
	req := got.Load()
	if lease := req.NotAfterMs - sentAt.Load(); lease <= 0 || lease > (2*time.Second+dispatchMargin).Milliseconds() {
		t.Errorf("not_after_ms %d is %dms after the call", req.NotAfterMs, lease)
	}
	rec, _, err := env.Processor().Journal().Load(*o.Fingerprint)
	if err != nil || rec.InFlightUntilMs != req.NotAfterMs || rec.InFlightUntilMs-rec.InFlightAtMs != (2*time.Second+dispatchMargin).Milliseconds() || rec.DispatchAttempts != 2 {
		t.Errorf("record in flight at %d until %d, %d attempts; the request's not_after_ms %d (%v)", rec.InFlightAtMs, rec.InFlightUntilMs, rec.DispatchAttempts, req.NotAfterMs, err)
	}
}

const dispatchMargin = 5 * time.Second // dispatch.DefaultLeaseMargin

// A processor that stalls between its in-flight record and the send for
// longer than the lease does not send the request: another processor may
// have declared the dispatch interrupted by then. Nothing was sent, so it
// dispatches again with a new lease (the manual clock jumps a minute at
// the stall, once).
func TestStalledProcessorDoesNotSendLate(t *testing.T) {
	clock := stages.NewManualClock(time.Now())
	var stalled atomic.Bool
	restore := fault.Set(func(name string) {
		if name == fault.DispatchAfterInFlight && stalled.CompareAndSwap(false, true) {
			clock.Advance(time.Minute)
		}
	})
	defer restore()
	env := testenv.New(t, testenv.WithClock(clock))
	p := testenv.Lumber("prop-stall")
	testenv.Set(p, "intent.payload", map[string]any{"quantity": 20, "case": "stall"})
	p = testenv.Granted(t, p, "sku-1001", clock.Now())
	env.PublishSigned(t, p, env.Host)
	o := env.Recorder.Wait(t, "prop-stall", testenv.Terminal)
	key := keyOf(t, p)
	fake := env.Fakes["demo"]
	if o.Kind != schema.KindConfirmed || !stalled.Load() {
		t.Errorf("outcome %+v (stalled: %v)", o, stalled.Load())
	}
	if fake.LateFor(key) != 0 || fake.DeliveredFor(key) != 1 {
		t.Errorf("late %d, delivered %d: want 0, 1", fake.LateFor(key), fake.DeliveredFor(key))
	}
	env.Logs.Wait(t, "the lease ended before the request could be sent")
}
