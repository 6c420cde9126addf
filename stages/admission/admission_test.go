package admission_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
	"github.com/portcullis/portcullis/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// groundingInbox waits for want hand-offs to grounding and returns their
// proposal ids in order.
func groundingInbox(t *testing.T, env *testenv.Env, want int) []string {
	t.Helper()
	return testenv.ProposalIDs(env.StageEnvelopes(t, subjects.StageGrounding, want))
}

func eventKeys(t *testing.T, raw []byte) []string {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func TestRefusalsEndToEnd(t *testing.T) {
	env := testenv.New(t)
	dup := strings.Replace(string(testenv.Body(t, testenv.Lumber("prop-dup"))), `"grant":null`, `"grant":null,"grant":null`, 1)
	dupAttr := strings.Replace(string(testenv.Body(t, testenv.Lumber("prop-dupattr"))), `"resource":"Lumber: Cedar-8ft-GradeA"`, `"resource":"a","resource":"b"`, 1)
	cases := []struct {
		id     string
		body   []byte
		signer string // "host", "other", ""
		kind   schema.Kind
		code   schema.Code
	}{
		{"prop-malformed", []byte(`{"proposal_id":"prop-malformed","schema":5}`), "host", schema.KindIntegrationFailure, schema.CodeAdmissionMalformed},
		{"prop-dup", []byte(dup), "host", schema.KindIntegrationFailure, schema.CodeAdmissionMalformed},
		{"prop-dupattr", []byte(dupAttr), "host", schema.KindIntegrationFailure, schema.CodeAdmissionMalformed},
		{"prop-unknown", testenv.Body(t, testenv.Set(testenv.Lumber("prop-unknown"), "intent.colour", "red")), "host", schema.KindIntegrationFailure, schema.CodeAdmissionMalformed},
		{"elsewhere/prop-other", testenv.Body(t, testenv.Lumber("prop-other")), "other", schema.KindDenied, schema.CodeAdmissionTenantNotPermitted},
		{"elsewhere/prop-other-domain", testenv.Body(t, testenv.Set(testenv.AsOtherTenant(testenv.Lumber("prop-other-domain")), "context.tenant.security_domain_ref", testenv.SecurityDomain)), "other", schema.KindDenied, schema.CodeAdmissionTenantNotPermitted},
		{"prop-incomplete", testenv.Body(t, testenv.Set(testenv.Lumber("prop-incomplete"), "context.actor.actor_ref", "")), "host", schema.KindDenied, schema.CodeAdmissionContextIncomplete},
		{"prop-provider", testenv.Body(t, testenv.Set(testenv.Lumber("prop-provider"), "intent.provider", "acme")), "host", schema.KindDenied, schema.CodeAdmissionProviderUnknown},
	}
	for _, tc := range cases {
		switch tc.signer {
		case "host":
			env.PublishSigned(t, tc.body, env.Host)
		case "other":
			env.PublishSigned(t, tc.body, env.OtherHost)
		default:
			env.Publish(t, tc.body)
		}
	}
	for _, tc := range cases {
		t.Run(tc.id, func(t *testing.T) {
			o := env.Recorder.Wait(t, tc.id, testenv.Terminal)
			want := schema.Incident{Phase: schema.PhaseAdmission, Code: tc.code, DispatchBoundary: schema.BoundaryNotInvoked}
			if o.Kind != tc.kind || o.EffectTruth != schema.TruthNotDispatched || !o.Terminal || len(o.Incidents) != 1 || o.Incidents[0] != want {
				t.Errorf("outcome = %+v", o)
			}
			if o.Fingerprint != nil || o.Referent != nil || o.Receipt != nil || o.Approval != nil || o.AtMs == 0 {
				t.Errorf("outcome fields = %+v", o)
			}
			env.Recorder.WaitEvent(t, schema.PhaseAdmission, tc.code)
		})
	}
	// Every event has exactly the four fields of SPEC §2.5.
	for _, raw := range env.Recorder.Raw() {
		if strings.Contains(string(raw), `"schema":"actions.outcome.v1"`) {
			continue
		}
		if got := eventKeys(t, raw); !slices.Equal(got, []string{"at_ms", "code", "dispatch_boundary", "phase"}) {
			t.Errorf("incident event keys = %v", got)
		}
	}
	if ids := groundingInbox(t, env, 0); len(ids) != 0 {
		t.Errorf("refused proposals reached grounding: %v", ids)
	}
}

// An unsigned proposal outside development mode gets only the incident
// event: nothing proves which host sent it (SPEC §2.7).
func TestUnauthenticatedGetsOnlyAnEvent(t *testing.T) {
	env := testenv.New(t)
	env.Publish(t, testenv.Lumber("prop-unsigned"))
	env.PublishSigned(t, testenv.Set(testenv.Lumber("prop-sync"), "intent.provider", "acme"), env.Host)
	env.Recorder.Wait(t, "prop-sync", testenv.Terminal)
	env.Recorder.WaitEvent(t, schema.PhaseAdmission, schema.CodeAdmissionUnauthenticated)
	if outs := env.Recorder.Outcomes("prop-unsigned"); len(outs) != 0 {
		t.Errorf("unauthenticated proposal got outcomes: %+v", outs)
	}
	if !bytes.Contains(env.Logs.Bytes(), []byte(`"check":"no signature"`)) {
		t.Errorf("the log does not say which check failed:\n%s", env.Logs.Bytes())
	}
}

func TestUnreadableIDGetsOnlyAnEvent(t *testing.T) {
	env := testenv.New(t)
	env.PublishSigned(t, []byte(`{"proposal_id":"p-1","proposal_id":"p-2"}`), env.Host)
	env.PublishSigned(t, []byte(`not json`), env.Host)
	env.PublishSigned(t, testenv.Set(testenv.Lumber("prop-ok"), "intent.provider", "acme"), env.Host) // an outcome at once
	env.Recorder.Wait(t, "prop-ok", testenv.Terminal)
	// Workers run concurrently: prop-ok may finish before the two above,
	// so judge once every one was handled rather than assume an order.
	env.Quiesce(t)
	if n := env.Recorder.CountEvents(schema.PhaseAdmission, schema.CodeAdmissionMalformed); n != 2 {
		t.Fatalf("malformed events = %d, want 2", n)
	}
	for _, id := range []string{"p-1", "p-2"} {
		if outs := env.Recorder.Outcomes(id); len(outs) != 0 {
			t.Errorf("ambiguous id %s got outcomes %+v", id, outs)
		}
	}
}

func TestAdmittedProposalReachesGrounding(t *testing.T) {
	env := testenv.New(t)
	env.PublishSigned(t, testenv.Lumber("prop-a"), env.Host)
	ids := groundingInbox(t, env, 1)
	if !slices.Equal(ids, []string{"prop-a"}) {
		t.Fatalf("grounding inbox = %v", ids)
	}
	for _, o := range env.Recorder.Outcomes("prop-a") {
		for _, inc := range o.Incidents {
			if inc.Phase == schema.PhaseAdmission {
				t.Errorf("admitted proposal got an admission outcome: %+v", o)
			}
		}
	}
}

func TestDeliveryIsProcessedOnce(t *testing.T) {
	env := testenv.New(t)
	// Two different bodies with one delivery id: the second is a repeat
	// (a retrying host) and must not reach grounding.
	first := testenv.Lumber("prop-d")
	env.PublishSigned(t, first, env.Host)
	groundingInbox(t, env, 1)
	env.PublishSigned(t, testenv.Set(testenv.Lumber("prop-d"), "intent.payload.quantity", 21), env.Host)

	// A denied delivery republishes its recorded outcome when repeated.
	denied := testenv.Set(testenv.Lumber("prop-x"), "intent.provider", "acme")
	env.PublishSigned(t, denied, env.Host)
	env.Recorder.Wait(t, "prop-x", testenv.Count(1))
	env.PublishSigned(t, denied, env.Host)
	outs := env.Recorder.WaitAll(t, "prop-x", testenv.Count(2))
	if outs[0].Kind != outs[1].Kind || outs[0].AtMs != outs[1].AtMs {
		t.Errorf("the repeat did not republish the recorded outcome: %+v", outs)
	}
	// Still exactly one hand-off, and one provider-unknown event.
	env.Quiesce(t)
	if ids := groundingInbox(t, env, 1); !slices.Equal(ids, []string{"prop-d"}) {
		t.Errorf("grounding inbox = %v", ids)
	}
	n := 0
	for _, e := range env.Recorder.Events() {
		if e.Code == schema.CodeAdmissionProviderUnknown {
			n++
		}
	}
	if n != 1 {
		t.Errorf("provider-unknown events = %d, want 1 (a repeat does nothing else)", n)
	}
	// The same delivery id from another host is another delivery.
	other := testenv.AsOtherTenant(testenv.Lumber("prop-t2"))
	testenv.Set(other, "context.delivery.delivery_id", "delivery:prop-d")
	env.PublishSigned(t, other, env.OtherHost)
	if ids := groundingInbox(t, env, 2); !slices.Equal(ids, []string{"prop-d", "prop-t2"}) {
		t.Errorf("grounding inbox = %v", ids)
	}
}

func TestRestartKeepsDeliveries(t *testing.T) {
	env := testenv.New(t)
	env.PublishSigned(t, testenv.Lumber("prop-r"), env.Host)
	groundingInbox(t, env, 1)
	env.Restart(t)
	env.PublishSigned(t, testenv.Lumber("prop-r"), env.Host)
	env.PublishSigned(t, testenv.Lumber("prop-s"), env.Host)
	if ids := groundingInbox(t, env, 2); !slices.Equal(ids, []string{"prop-r", "prop-s"}) {
		t.Errorf("grounding inbox = %v", ids)
	}
}

// Planted values in every field a proposal carries appear in no outcome,
// incident, log line, metric or Pebble record — refused or admitted.
func TestNothingLeaks(t *testing.T) {
	env := testenv.New(t)
	secrets := []string{"SECRET-TENANT-7c1", "SECRET-ACTOR-9d2", "SECRET-PAYLOAD-3e4", "SECRET-ATTR-5f6", "SECRET-EVIDENCE-8a9", "SECRET-DELIVERY-0b1", "SECRET-KEYNAME-2c3"}
	plant := func(id string) map[string]any {
		p := testenv.Lumber(id)
		testenv.Set(p, "context.tenant.tenant_ref", secrets[0])
		testenv.Set(p, "context.actor.actor_ref", secrets[1])
		testenv.Set(p, "intent.payload", map[string]any{"note": secrets[2]})
		testenv.Set(p, "context.delivery.delivery_id", secrets[5]+id)
		cands := p["grounding"].(map[string]any)["candidates"].([]any)
		cand := cands[0].(map[string]any)
		cand["attributes"] = map[string]any{"resource": secrets[3]}
		cand["evidence_refs"] = []any{secrets[4]}
		return p
	}
	env.Publish(t, plant("prop-unsigned"))                                                      // refused unread (not --dev)
	env.PublishSigned(t, plant("prop-tenant"), env.Host)                                        // tenant not permitted
	env.PublishSigned(t, testenv.Set(plant("prop-unknown"), "intent."+secrets[6], 1), env.Host) // unknown member named like a secret
	env.PublishSigned(t, testenv.Set(plant("prop-incomplete"), "context.host_invocation.invocation_id", ""), env.Host)
	for _, id := range []string{"prop-tenant", "prop-unknown", "prop-incomplete"} {
		env.Recorder.Wait(t, id, testenv.Terminal)
	}
	env.Recorder.WaitEvent(t, schema.PhaseAdmission, schema.CodeAdmissionUnauthenticated)
	env.AssertNowhere(t, secrets...)
}
