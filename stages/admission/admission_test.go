package admission_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/admission"
	"github.com/portcullis/portcullis/subjects"
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

// Each admission refusal is logged with its code and, value-free, the
// field path and rule that earned it; secrets planted in the refused
// proposals (values, member names, tenant and actor ids, payloads) appear
// in no log line, nor anywhere else Portcullis writes.
func TestRefusalsAreLoggedValueFree(t *testing.T) {
	env := testenv.New(t)
	const (
		tenant  = "SECRET-TENANT-41a"
		actor   = "SECRET-ACTOR-42b"
		payload = "SECRET-PAYLOAD-43c"
		env_    = "SECRET-ENV-44d"
		member  = "SECRET-MEMBER-45e"
		domain  = "SECRET-DOMAIN-46f"
		amount  = "SECRET-AMOUNT-47a"
		unsign  = "SECRET-UNSIGNED-48b"
		reuse   = "SECRET-REUSE-49c"
		dupkey  = "SECRET-DUPKEY-50d"
	)
	plant := func(id string) map[string]any {
		p := testenv.Lumber(id)
		testenv.Set(p, "context.actor.actor_ref", actor)
		return testenv.Set(p, "intent.payload", map[string]any{"note": payload})
	}
	dupBody := strings.Replace(string(testenv.Body(t, plant("log-dup"))), `"note":"`+payload+`"`,
		`"`+dupkey+`":1,"`+dupkey+`":2`, 1)
	cases := []struct {
		id, path string
		rule     schema.Rule
		code     schema.Code
		body     []byte
	}{
		{"log-env", "/intent/environment", schema.RuleEnvironment, schema.CodeAdmissionMalformed,
			testenv.Body(t, testenv.Set(plant("log-env"), "intent.environment", env_))},
		{"log-member", "/intent", schema.RuleUnknownMember, schema.CodeAdmissionMalformed,
			testenv.Body(t, testenv.Set(plant("log-member"), "intent."+member, payload))},
		{"log-amount", "/intent/external_spend/amount_minor", schema.RuleInteger, schema.CodeAdmissionMalformed,
			testenv.Body(t, testenv.Set(plant("log-amount"), "intent.external_spend", map[string]any{"currency": "EUR", "amount_minor": amount}))},
		{"log-dup", "/intent/payload", schema.RuleDuplicateIn, schema.CodeAdmissionMalformed, []byte(dupBody)},
		{"log-incomplete", "/context/tenant/security_domain_ref", schema.RuleRequired, schema.CodeAdmissionContextIncomplete,
			testenv.Body(t, testenv.Set(testenv.Set(plant("log-incomplete"), "context.tenant.security_domain_ref", ""), "context.tenant.tenant_ref", tenant))},
		{"log-tenant", "/context/tenant/tenant_ref", admission.RuleTenantForeign, schema.CodeAdmissionTenantNotPermitted,
			testenv.Body(t, testenv.Set(plant("log-tenant"), "context.tenant.tenant_ref", tenant))},
		{"log-domain", "/context/tenant/security_domain_ref", admission.RuleDomainForeign, schema.CodeAdmissionTenantNotPermitted,
			testenv.Body(t, testenv.Set(testenv.Set(plant("log-domain"), "context.tenant.security_domain_ref", domain), "grounding.scope", domain))},
		{"log-provider", "/intent/provider", admission.RuleProviderUnknown, schema.CodeAdmissionProviderUnknown,
			testenv.Body(t, testenv.Set(plant("log-provider"), "intent.provider", "secret-provider-51e"))},
	}
	for _, tc := range cases {
		env.PublishSigned(t, tc.body, env.Host)
	}
	env.Publish(t, testenv.Set(plant("log-unsigned"), "intent.payload", map[string]any{"note": unsign}))
	// An id taken by an admitted proposal, reused with another body.
	env.PublishSigned(t, testenv.Lumber("log-reused"), env.Host)
	env.Recorder.Wait(t, "log-reused", testenv.Count(1))
	// (A new delivery id: the same one again would be a repeat.)
	reused := testenv.Set(plant("log-reused"), "intent.payload", map[string]any{"note": reuse})
	env.PublishSigned(t, testenv.Set(reused, "context.delivery.delivery_id", "delivery:log-reused-2"), env.Host)
	for _, tc := range cases {
		env.Recorder.Wait(t, tc.id, testenv.Terminal)
	}
	env.Recorder.WaitEvent(t, schema.PhaseAdmission, schema.CodeAdmissionUnauthenticated)
	env.Recorder.WaitEvent(t, schema.PhaseAdmission, schema.CodeAdmissionProposalIDReused)

	type line struct {
		Level, Msg, Code, Host, Path, Rule, Check string
		ProposalID                                string `json:"proposal_id"`
	}
	var lines []line
	for _, raw := range bytes.Split(env.Logs.Bytes(), []byte("\n")) {
		var l line
		if json.Unmarshal(raw, &l) == nil && strings.HasPrefix(l.Msg, "admission:") {
			lines = append(lines, l)
		}
	}
	find := func(id string) (line, bool) {
		for _, l := range lines {
			if l.ProposalID == id && l.Msg == "admission: proposal refused" {
				return l, true
			}
		}
		return line{}, false
	}
	for _, tc := range cases {
		l, ok := find(tc.id)
		if !ok {
			t.Errorf("%s: no refusal logged", tc.id)
			continue
		}
		level := "INFO"
		if tc.code == schema.CodeAdmissionTenantNotPermitted {
			level = "WARN"
		}
		if l.Code != string(tc.code) || l.Path != tc.path || l.Rule != string(tc.rule) || l.Host != testenv.HostName || l.Level != level {
			t.Errorf("%s: logged %+v, want code %s path %s rule %q at %s", tc.id, l, tc.code, tc.path, tc.rule, level)
		}
	}
	if l, ok := find("log-reused"); !ok || l.Code != string(schema.CodeAdmissionProposalIDReused) || l.Path != "/proposal_id" || l.Level != "WARN" {
		t.Errorf("reused id: logged %+v (found %v)", l, ok)
	}
	if !slices.ContainsFunc(lines, func(l line) bool {
		return l.Code == string(schema.CodeAdmissionUnauthenticated) && l.Check == "no signature" && l.Level == "WARN"
	}) {
		t.Errorf("no unauthenticated refusal logged: %+v", lines)
	}
	env.AssertNowhere(t, tenant, actor, payload, env_, member, domain, amount, unsign, reuse, dupkey, "secret-provider-51e")
}
