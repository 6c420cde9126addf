package grounding_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// stageMessages returns the envelopes a stage received, by proposal id.
func stageMessages(t *testing.T, env *testenv.Env, stage string) map[string]schema.Envelope {
	t.Helper()
	out := map[string]schema.Envelope{}
	for _, e := range env.StageEnvelopes(t, stage, 0) {
		if _, dup := out[e.Proposal.ProposalID]; dup {
			t.Errorf("%s received %s twice", stage, e.Proposal.ProposalID)
		}
		out[e.Proposal.ProposalID] = e
	}
	return out
}

// forwarded returns the proposal's envelope once the pipeline is idle, and
// fails unless it reached authorization.
func forwarded(t *testing.T, env *testenv.Env, pid string) schema.Envelope {
	t.Helper()
	env.Quiesce(t)
	e, ok := stageMessages(t, env, subjects.StageAuthorization)[pid]
	if !ok {
		t.Fatalf("%s did not reach authorization; outcomes: %+v", pid, env.Recorder.Outcomes(pid))
	}
	return e
}

// notForwarded asserts that none of the proposals reached authorization
// or dispatch, once the pipeline is idle.
func notForwarded(t *testing.T, env *testenv.Env, pids ...string) {
	t.Helper()
	env.Quiesce(t)
	for _, stage := range []string{subjects.StageAuthorization, subjects.StageDispatch} {
		got := stageMessages(t, env, stage)
		for _, pid := range pids {
			if _, ok := got[pid]; ok {
				t.Errorf("%s reached %s", pid, stage)
			}
		}
	}
}

func keys(t *testing.T, raw []byte) []string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// rawOutcome returns the bytes of the proposal's last outcome as published.
func rawOutcome(t *testing.T, env *testenv.Env, pid string) []byte {
	t.Helper()
	var last []byte
	for _, raw := range env.Recorder.Raw() {
		var o struct {
			Schema     string `json:"schema"`
			ProposalID string `json:"proposal_id"`
		}
		if json.Unmarshal(raw, &o) == nil && o.Schema == schema.SchemaOutcome && o.ProposalID == pid {
			last = raw
		}
	}
	if last == nil {
		t.Fatalf("no outcome bytes for %s", pid)
	}
	return last
}

// assertFailure checks a grounding failure end to end: kind, code,
// NOT_DISPATCHED, terminal, nothing else set, incidents with exactly
// phase, code and dispatch_boundary, the matching event, nothing forwarded.
func assertFailure(t *testing.T, env *testenv.Env, pid string, kind schema.Kind, code schema.Code) {
	t.Helper()
	o := env.Recorder.Wait(t, pid, testenv.Terminal)
	want := schema.Incident{Phase: schema.PhaseGrounding, Code: code, DispatchBoundary: schema.BoundaryNotInvoked}
	if o.Kind != kind || o.EffectTruth != schema.TruthNotDispatched || !o.Terminal || len(o.Incidents) != 1 || o.Incidents[0] != want {
		t.Errorf("%s: outcome = %+v, want %s/%s", pid, o, kind, code)
	}
	if o.Fingerprint != nil || o.Referent != nil || o.Receipt != nil || o.Approval != nil || o.AtMs == 0 {
		t.Errorf("%s: outcome fields = %+v", pid, o)
	}
	if n := len(env.Recorder.Outcomes(pid)); n != 1 {
		t.Errorf("%s: %d outcomes, want 1", pid, n)
	}
	var wire struct {
		Incidents []jsontext.Value `json:"incidents"`
	}
	if err := jsonv2.Unmarshal(rawOutcome(t, env, pid), &wire); err != nil {
		t.Fatal(err)
	}
	for _, inc := range wire.Incidents {
		if got := keys(t, inc); !slices.Equal(got, []string{"code", "dispatch_boundary", "phase"}) {
			t.Errorf("%s: incident keys = %v", pid, got)
		}
	}
	env.Recorder.WaitEvent(t, schema.PhaseGrounding, code)
	notForwarded(t, env, pid)
}

// assertEventShapes checks that every incident event has exactly the four
// keys of SPEC §2.5.
func assertEventShapes(t *testing.T, env *testenv.Env) {
	t.Helper()
	for _, raw := range env.Recorder.Raw() {
		if strings.Contains(string(raw), `"schema":"actions.outcome.v1"`) {
			continue
		}
		if got := keys(t, raw); !slices.Equal(got, []string{"at_ms", "code", "dispatch_boundary", "phase"}) {
			t.Errorf("incident event keys = %v", got)
		}
	}
}

func candidate(referent string, attrs any) map[string]any {
	return map[string]any{"referent": referent, "source": "authoritative", "attributes": attrs, "evidence_refs": []any{}}
}

// TestFailureMatrix is seed 000's executable failure matrix against a real
// server: wrong scope, missing discriminator, mismatch, ambiguity.
func TestFailureMatrix(t *testing.T) {
	env := testenv.New(t)
	const subject = "lumber: cedar-8ft-gradea"
	cases := []struct {
		name       string
		scope      string
		candidates []any
		kind       schema.Kind
		code       schema.Code
	}{
		{"wrongScope", "policy-scope:inventory", []any{candidate("one", map[string]any{"resource": subject})},
			schema.KindDenied, schema.CodeGroundingScopeMismatch},
		{"missing", testenv.SecurityDomain, []any{candidate("one", map[string]any{})},
			schema.KindNeedsClarification, schema.CodeDiscriminatorMissing},
		{"mismatch", testenv.SecurityDomain, []any{candidate("one", map[string]any{"resource": "lumber:pine"})},
			schema.KindNeedsClarification, schema.CodeDiscriminatorMismatch},
		{"ambiguous", testenv.SecurityDomain, []any{
			candidate("one", map[string]any{"resource": " LUMBER:\tCEDAR-8FT-GRADEA "}),
			candidate("two", map[string]any{"resource": "lumber: cedar-8ft-gradea"}),
		}, schema.KindNeedsClarification, schema.CodeDiscriminationAmbiguous},
	}
	for _, c := range cases {
		p := testenv.Lumber("matrix-" + c.name)
		testenv.Set(p, "grounding.subject", subject)
		testenv.Set(p, "grounding.scope", c.scope)
		testenv.Set(p, "grounding.observation_ref", "catalog:12")
		testenv.Set(p, "grounding.candidates", c.candidates)
		env.PublishSigned(t, p, env.Host)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assertFailure(t, env, "matrix-"+c.name, c.kind, c.code)
		})
	}
	assertEventShapes(t, env)
	// Exactly one event per case, counted in the metrics.
	for _, c := range cases {
		n := 0
		for _, e := range env.Recorder.Events() {
			if e.Code == c.code {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d events", c.code, n)
		}
	}
	if got := scrape(t, env); !strings.Contains(got, `actions_incidents_total{code="GROUNDING_RESOURCE_DISCRIMINATION_AMBIGUOUS",phase="grounding"} 1`) {
		t.Errorf("incident metric missing")
	}
	if s := stageMessages(t, env, subjects.StageAuthorization); len(s) != 0 {
		t.Errorf("authorization received %d proposals", len(s))
	}
}

func TestMalformedSubjects(t *testing.T) {
	env := testenv.New(t)
	cases := map[string]func(map[string]any){
		"absent": func(p map[string]any) { testenv.Delete(p, "grounding.subject") },
		"null":   func(p map[string]any) { testenv.Set(p, "grounding.subject", nil) },
		"empty":  func(p map[string]any) { testenv.Set(p, "grounding.subject", "") },
		"blank":  func(p map[string]any) { testenv.Set(p, "grounding.subject", " \t\u00a0\u3000 ") },
		"number": func(p map[string]any) { testenv.Set(p, "grounding.subject", 1001) },
		"bool":   func(p map[string]any) { testenv.Set(p, "grounding.subject", false) },
		"object": func(p map[string]any) {
			testenv.Set(p, "grounding.subject", map[string]any{"resource": "lumber: cedar-8ft-gradea"})
		},
		"array":    func(p map[string]any) { testenv.Set(p, "grounding.subject", []any{"lumber: cedar-8ft-gradea"}) },
		"control":  func(p map[string]any) { testenv.Set(p, "grounding.subject", "lumber\x00cedar") },
		"too-long": func(p map[string]any) { testenv.Set(p, "grounding.subject", strings.Repeat("x", 1025)) },
		"also-wrong-scope": func(p map[string]any) {
			testenv.Set(p, "grounding.subject", nil)
			testenv.Set(p, "grounding.scope", "policy-scope:inventory")
		},
		"also-no-candidates": func(p map[string]any) {
			testenv.Set(p, "grounding.subject", 7)
			testenv.Set(p, "grounding.candidates", []any{})
		},
	}
	for name, edit := range cases {
		p := testenv.Lumber("subject-" + name)
		edit(p)
		env.PublishSigned(t, p, env.Host)
	}
	for name := range cases {
		t.Run(name, func(t *testing.T) {
			assertFailure(t, env, "subject-"+name, schema.KindIntegrationFailure, schema.CodeProjectionUnavailable)
		})
	}
	assertEventShapes(t, env)
}

func TestUnboundedInline(t *testing.T) {
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) { c.Grounding.MaxCandidates = 2 }))
	p := testenv.Lumber("prop-unbounded")
	three := []any{
		candidate("a", map[string]any{"resource": "lumber: cedar-8ft-gradea"}),
		candidate("b", map[string]any{"resource": "lumber: pine"}),
		candidate("c", map[string]any{}),
	}
	testenv.Set(p, "grounding.candidates", three)
	env.PublishSigned(t, p, env.Host)
	ok := testenv.Lumber("prop-bounded")
	testenv.Set(ok, "grounding.candidates", three[:2])
	env.PublishSigned(t, ok, env.Host)
	assertFailure(t, env, "prop-unbounded", schema.KindNeedsClarification, schema.CodeCandidatesUnbounded)
	if e := forwarded(t, env, "prop-bounded"); e.Grounded.Referent != "a" {
		t.Errorf("grounded = %+v", e.Grounded)
	}
}

// paymentsVector loads the payments proposal of fingerprint/testdata, whose
// fingerprint an independent JCS implementation computed.
func paymentsVector(t *testing.T, name string) (proposal map[string]any, referent, fp string) {
	t.Helper()
	data, err := os.ReadFile("../../fingerprint/testdata/fingerprints.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []struct {
		Name        string         `json:"name"`
		Referent    string         `json:"referent"`
		Proposal    map[string]any `json:"proposal"`
		Fingerprint string         `json:"fingerprint"`
	}
	if err := json.Unmarshal(data, &vs); err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if v.Name == name {
			return v.Proposal, v.Referent, v.Fingerprint
		}
	}
	t.Fatalf("no vector %s", name)
	return nil, "", ""
}

func withInfra(c *config.Config) {
	c.Admission.AllowUnsigned = true
	c.Providers = append(c.Providers, config.Provider{Name: "infra", Adapter: adapters.KindNATS, Timeout: 2 * time.Second, UnavailableRetry: 2 * time.Second, MaxInFlight: 16})
}

// TestPaymentsAPIExample is seed 000's example end to end: the service
// catalog holds production and staging records of "the payments API".
func TestPaymentsAPIExample(t *testing.T) {
	env := testenv.New(t, testenv.WithConfig(withInfra))
	prod, prodRef, prodFP := paymentsVector(t, "payments-production")
	staging, stagingRef, stagingFP := paymentsVector(t, "payments-staging")
	if prodRef != "svc:payments-prod" || stagingRef != "svc:payments-staging" {
		t.Fatal("vectors changed")
	}
	// The vectors share a delivery id; admission would take the second for
	// a repeat. Delivery ids are not fingerprinted.
	testenv.Set(prod, "context.delivery.delivery_id", "delivery:restart-1")
	testenv.Set(staging, "context.delivery.delivery_id", "delivery:restart-2")
	env.Publish(t, prod)
	env.Publish(t, staging)

	// Vague requests. With these catalog records ("payments-api
	// (production)", "payments-api (staging)") a vague subject equals
	// neither resource after normalization: zero matches, MISMATCH. Had the
	// catalog named both records "payments-api", the same subject would
	// match both: AMBIGUOUS. Either way the user is asked; production is
	// never picked for being likelier.
	vague := map[string]string{
		"vague-the-payments-api": "the payments API",
		"vague-payments-api":     "payments-api",
		"vague-prod-abbrev":      "payments-api (prod)",
	}
	for id, subject := range vague {
		p, _, _ := paymentsVector(t, "payments-production")
		testenv.Set(p, "proposal_id", id)
		testenv.Set(p, "context.delivery.delivery_id", "delivery:"+id)
		testenv.Set(p, "grounding.subject", subject)
		env.Publish(t, p)
	}
	same, _, _ := paymentsVector(t, "payments-production")
	testenv.Set(same, "proposal_id", "vague-same-names")
	testenv.Set(same, "context.delivery.delivery_id", "delivery:vague-same-names")
	testenv.Set(same, "grounding.subject", "payments-api")
	cands := same["grounding"].(map[string]any)["candidates"].([]any)
	for _, c := range cands {
		c.(map[string]any)["attributes"].(map[string]any)["resource"] = "payments-api"
	}
	env.Publish(t, same)

	// The exact subject grounds to production, with the fingerprint the
	// independent implementation computed.
	e := forwarded(t, env, "prop-restart-1")
	if e.Grounded == nil || e.Grounded.Referent != "svc:payments-prod" || e.Grounded.Fingerprint != prodFP ||
		e.Grounded.IdempotencyKey != fingerprint.Key(prodFP) || e.Grounded.ObservationRef != "catalog:svc@r981" {
		t.Errorf("production: grounded = %+v, want %s", e.Grounded, prodFP)
	}
	if e.Proposal.Grounding.Candidates != nil || e.Proposal.Grounding.CandidateSource != "" {
		t.Errorf("candidates travelled on: %+v", e.Proposal.Grounding)
	}
	// "Payments-API  (Staging)" differs from its resource only in format.
	s := forwarded(t, env, "prop-restart-2")
	if s.Grounded == nil || s.Grounded.Referent != "svc:payments-staging" || s.Grounded.Fingerprint != stagingFP || stagingFP == prodFP {
		t.Errorf("staging: grounded = %+v, want %s", s.Grounded, stagingFP)
	}
	for id := range vague {
		assertFailure(t, env, id, schema.KindNeedsClarification, schema.CodeDiscriminatorMismatch)
	}
	assertFailure(t, env, "vague-same-names", schema.KindNeedsClarification, schema.CodeDiscriminationAmbiguous)
}

// catalog serves a candidate source on env's connection.
type catalog struct {
	requests atomic.Int32
	last     atomic.Value // []byte
}

func serveSource(t *testing.T, env *testenv.Env, name string, reply func(req []byte) (data []byte, hdr nats.Header, ok bool)) *catalog {
	t.Helper()
	c := &catalog{}
	sub, err := env.NC.Subscribe(env.Subjects.Candidates(name), func(m *nats.Msg) {
		c.requests.Add(1)
		c.last.Store(append([]byte(nil), m.Data...))
		data, hdr, ok := reply(m.Data)
		if !ok {
			return // never answers
		}
		r := nats.NewMsg(m.Reply)
		r.Data = data
		for k, v := range hdr {
			r.Header[k] = v
		}
		_ = m.RespondMsg(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return c
}

func fixed(body string) func([]byte) ([]byte, nats.Header, bool) {
	return func([]byte) ([]byte, nats.Header, bool) { return []byte(body), nil, true }
}

const servicesReply = `{"candidates":[
 {"referent":"svc:payments-prod","source":"service-catalog","attributes":{"resource":"payments-api (production)"},"evidence_refs":["catalog:svc@r982#prod"]},
 {"referent":"svc:payments-staging","source":"service-catalog","attributes":{"resource":"payments-api (staging)"},"evidence_refs":["catalog:svc@r982#staging"]}],
 "observation_ref":"catalog:svc@r982"}`

func sourced(id, source, subject string) map[string]any {
	p := testenv.Lumber(id)
	g := p["grounding"].(map[string]any)
	delete(g, "candidates")
	g["candidate_source"] = source
	g["subject"] = subject
	return p
}

func TestCandidateSources(t *testing.T) {
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) {
		c.Grounding.MaxCandidates = 2
		c.Grounding.SourceTimeout = 300 * time.Millisecond
	}))
	services := serveSource(t, env, "services", fixed(servicesReply))
	serveSource(t, env, "silent", func([]byte) ([]byte, nats.Header, bool) { return nil, nil, false })
	serveSource(t, env, "garbled", fixed(`{"candidates":[{"referent":"x"}],"observation_ref":"c","extra":true}`))
	serveSource(t, env, "failing", func([]byte) ([]byte, nats.Header, bool) {
		h := nats.Header{}
		h.Set("Nats-Service-Error", "catalog down")
		h.Set("Nats-Service-Error-Code", "503")
		return []byte(`{"candidates":[],"observation_ref":"c"}`), h, true
	})
	serveSource(t, env, "crowded", fixed(`{"candidates":[
 {"referent":"a","source":"s","attributes":{"resource":"payments-api (production)"},"evidence_refs":[]},
 {"referent":"b","source":"s","attributes":{"resource":"b"},"evidence_refs":[]},
 {"referent":"c","source":"s","attributes":{"resource":"c"},"evidence_refs":[]}],"observation_ref":"c"}`))
	serveSource(t, env, "unlabelled", fixed(`{"candidates":[
 {"referent":"a","source":"s","attributes":{"resource":"payments-api (production)"},"evidence_refs":[]},
 {"referent":"b","source":"s","attributes":{"name":"payments-api (production)"},"evidence_refs":[]}],"observation_ref":"c"}`))
	serveSource(t, env, "empty", fixed(`{"candidates":[],"observation_ref":"c"}`))

	env.PublishSigned(t, sourced("src-ok", "services", "Payments-API (Production)"), env.Host)
	env.PublishSigned(t, sourced("src-vague", "services", "payments API"), env.Host)
	env.PublishSigned(t, sourced("src-nobody", "nobody-home", "payments-api (production)"), env.Host)
	env.PublishSigned(t, sourced("src-silent", "silent", "payments-api (production)"), env.Host)
	env.PublishSigned(t, sourced("src-garbled", "garbled", "payments-api (production)"), env.Host)
	env.PublishSigned(t, sourced("src-failing", "failing", "payments-api (production)"), env.Host)
	env.PublishSigned(t, sourced("src-crowded", "crowded", "payments-api (production)"), env.Host)
	env.PublishSigned(t, sourced("src-unlabelled", "unlabelled", "payments-api (production)"), env.Host)
	env.PublishSigned(t, sourced("src-empty", "empty", "payments-api (production)"), env.Host)

	e := forwarded(t, env, "src-ok")
	want, err := fingerprint.Of(&e.Proposal, "svc:payments-prod")
	if err != nil {
		t.Fatal(err)
	}
	if e.Grounded == nil || e.Grounded.Referent != "svc:payments-prod" || e.Grounded.ObservationRef != "catalog:svc@r982" ||
		e.Grounded.Fingerprint != want.Fingerprint || e.Proposal.Grounding.CandidateSource != "" || e.Proposal.Grounding.Candidates != nil {
		t.Errorf("grounded from source = %+v / %+v", e.Grounded, e.Proposal.Grounding)
	}
	assertFailure(t, env, "src-vague", schema.KindNeedsClarification, schema.CodeDiscriminatorMismatch)
	for _, id := range []string{"src-nobody", "src-silent", "src-garbled", "src-failing"} {
		assertFailure(t, env, id, schema.KindIntegrationFailure, schema.CodeGroundingSourceUnavailable)
	}
	assertFailure(t, env, "src-crowded", schema.KindNeedsClarification, schema.CodeCandidatesUnbounded)
	assertFailure(t, env, "src-unlabelled", schema.KindNeedsClarification, schema.CodeDiscriminatorMissing)
	assertFailure(t, env, "src-empty", schema.KindNeedsClarification, schema.CodeDiscriminatorMismatch)

	// The request carries exactly subject (raw) and scope.
	var req map[string]any
	if err := json.Unmarshal(services.last.Load().([]byte), &req); err != nil {
		t.Fatal(err)
	}
	if len(req) != 2 || req["scope"] != testenv.SecurityDomain || req["subject"] != "payments API" && req["subject"] != "Payments-API (Production)" {
		t.Errorf("source request = %v", req)
	}
	if n := services.requests.Load(); n != 2 {
		t.Errorf("services asked %d times, want 2", n)
	}
	assertEventShapes(t, env)
}

// TestSourceNotAskedBeforeRules12: a wrong scope or a malformed subject
// ends the proposal before any source query.
func TestSourceNotAskedBeforeRules12(t *testing.T) {
	env := testenv.New(t)
	src := serveSource(t, env, "services", fixed(servicesReply))
	wrong := sourced("src-wrong-scope", "services", "payments-api (production)")
	testenv.Set(wrong, "grounding.scope", "policy-scope:inventory")
	env.PublishSigned(t, wrong, env.Host)
	bad := sourced("src-bad-subject", "services", "")
	testenv.Set(bad, "grounding.subject", map[string]any{"q": "payments"})
	env.PublishSigned(t, bad, env.Host)
	assertFailure(t, env, "src-wrong-scope", schema.KindDenied, schema.CodeGroundingScopeMismatch)
	assertFailure(t, env, "src-bad-subject", schema.KindIntegrationFailure, schema.CodeProjectionUnavailable)
	if n := src.requests.Load(); n != 0 {
		t.Errorf("source asked %d times", n)
	}
}

// TestGiveUp: an input grounding cannot read ends PROCESSING_FAILED under
// its subject's id, or as an event alone when the id is unreadable.
func TestGiveUp(t *testing.T) {
	env := testenv.New(t)
	env.PublishInternal(t, env.Subjects.Stage(subjects.StageGrounding, subjects.KindProposal, "frontdesk.prop-garbage"), []byte(`{"schema":`))
	env.PublishInternal(t, env.Subjects.Stage(subjects.StageGrounding, subjects.KindProposal, "frontdesk.bad~id"), []byte(`{}`))
	// An envelope whose proposal id differs from its subject's.
	other := testenv.Lumber("prop-inner")
	var p schema.Proposal
	if err := schema.Decode(testenv.Body(t, other), &p); err != nil {
		t.Fatal(err)
	}
	data := schema.MustMarshal(schema.Envelope{Schema: schema.SchemaEnvelope, Proposal: p, Host: testenv.HostName})
	env.PublishInternal(t, env.Subjects.Stage(subjects.StageGrounding, subjects.KindProposal, "frontdesk.prop-outer"), data)

	for _, id := range []string{"prop-garbage", "prop-outer"} {
		o := env.Recorder.Wait(t, id, testenv.Terminal)
		if o.Kind != schema.KindIntegrationFailure || len(o.Incidents) != 1 || o.Incidents[0].Code != schema.CodeProcessingFailed || o.Incidents[0].Phase != schema.PhaseGrounding {
			t.Errorf("%s: outcome = %+v", id, o)
		}
	}
	env.Quiesce(t)
	n := 0
	for _, e := range env.Recorder.Events() {
		if e.Code == schema.CodeProcessingFailed {
			n++
		}
	}
	if n != 3 {
		t.Errorf("PROCESSING_FAILED events = %d, want 3", n)
	}
	notForwarded(t, env, "prop-garbage", "prop-outer", "prop-inner")
}

func scrape(t *testing.T, env *testenv.Env) string {
	t.Helper()
	resp, err := http.Get("http://" + env.Processor().MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPrivacy plants unique strings in every value grounding reads or
// passes by, drives every grounding path, and checks that none appears in
// an incident event, an outcome, a metric or a log line.
func TestPrivacy(t *testing.T) {
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) {
		c.Admission.AllowUnsigned = true
		c.Grounding.SourceTimeout = 300 * time.Millisecond
	}))
	const (
		tenant   = "tenant:PLANTtenant7f1"
		domain   = "security-domain:PLANTdomain7f1"
		actor    = "actor:PLANTactor7f1"
		attr     = "PLANTattr7f1"
		resource = "PLANTresource7f1"
		evidence = "catalog:PLANTevidence7f1"
		subject  = "PLANTsubject7f1"
		sourced  = "PLANTsourced7f1"
	)
	planted := []string{"PLANTtenant", "PLANTdomain", "PLANTactor", "PLANTattr", "PLANTresource", "PLANTevidence", "PLANTsubject", "PLANTsourced"}
	serveSource(t, env, "planted", fixed(`{"candidates":[{"referent":"r1","source":"s","attributes":{"resource":"`+sourced+`","note":"`+attr+`"},"evidence_refs":["`+evidence+`"]}],"observation_ref":"obs:1"}`))
	serveSource(t, env, "planted-bad", fixed(`{"candidates":[{"referent":"r1","source":"s","attributes":{"resource":"`+sourced+`"},"evidence_refs":["`+evidence+`"],"`+attr+`":1}],"observation_ref":"obs:1"}`))

	mk := func(id string, f func(p map[string]any)) {
		p := testenv.Lumber(id)
		testenv.Set(p, "context.tenant.tenant_ref", tenant)
		testenv.Set(p, "context.tenant.security_domain_ref", domain)
		testenv.Set(p, "context.actor.actor_ref", actor)
		testenv.Set(p, "grounding.scope", domain)
		testenv.Set(p, "grounding.subject", subject)
		testenv.Set(p, "grounding.candidates", []any{map[string]any{
			"referent": "r1", "source": "authoritative",
			"attributes":    map[string]any{"resource": resource, "colour": attr},
			"evidence_refs": []any{evidence},
		}})
		f(p)
		env.Publish(t, p)
	}
	mk("priv-mismatch", func(map[string]any) {})
	mk("priv-scope", func(p map[string]any) { testenv.Set(p, "grounding.scope", domain+"x") })
	mk("priv-missing", func(p map[string]any) {
		testenv.Set(p, "grounding.candidates", []any{candidate("r1", map[string]any{"name": resource, attr: attr})})
	})
	mk("priv-ambiguous", func(p map[string]any) {
		testenv.Set(p, "grounding.subject", resource)
		c := candidate("r2", map[string]any{"resource": resource})
		c["evidence_refs"] = []any{evidence}
		testenv.Set(p, "grounding.candidates", append(p["grounding"].(map[string]any)["candidates"].([]any), c))
	})
	mk("priv-subject", func(p map[string]any) { testenv.Set(p, "grounding.subject", map[string]any{subject: attr}) })
	mk("priv-grounded", func(p map[string]any) { testenv.Set(p, "grounding.subject", resource) })
	for _, src := range []string{"planted", "planted-bad", "planted-nobody"} {
		mk("priv-src-"+src, func(p map[string]any) {
			g := p["grounding"].(map[string]any)
			delete(g, "candidates")
			g["candidate_source"] = src
			g["subject"] = sourced
		})
	}
	for _, id := range []string{"priv-mismatch", "priv-scope", "priv-missing", "priv-ambiguous", "priv-subject", "priv-src-planted-bad", "priv-src-planted-nobody"} {
		env.Recorder.Wait(t, id, testenv.Terminal)
	}
	for _, id := range []string{"priv-grounded", "priv-src-planted"} {
		forwarded(t, env, id)
	}
	check := func(where, text string) {
		for _, s := range planted {
			if strings.Contains(text, s) {
				t.Errorf("%s contains planted %s", where, s)
			}
		}
	}
	for _, raw := range env.Recorder.Raw() {
		check("outcome or event", string(raw))
	}
	check("metrics", scrape(t, env))
	check("logs", string(env.Logs.Bytes()))
	// Candidates and their attributes and evidence stop here: the
	// authorization hand-off does not carry them.
	for id, e := range stageMessages(t, env, subjects.StageAuthorization) {
		data := string(schema.MustMarshal(e))
		for _, s := range []string{"PLANTattr", "PLANTevidence"} {
			if strings.Contains(data, s) {
				t.Errorf("hand-off of %s carries %s", id, s)
			}
		}
	}
}
