package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/client"
	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/mcp"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/policy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const quantitySchema = `{"type": "object", "properties": {"quantity": {"type": "integer", "minimum": 1, "maximum": 1000}}, "required": ["quantity"], "additionalProperties": false}`

const reasonSchema = `{"type": "object", "properties": {"reason": {"type": "string", "minLength": 1, "maxLength": 200}}, "required": ["reason"], "additionalProperties": false}`

// restart is the demo's restart_service on the fake provider "demo":
// "payments API" is two services (production and staging, each with the
// words users say for it), "search API" one.
func restart(name, approval string) config.MCPTool {
	return config.MCPTool{Name: name, Description: "Restart one service.", Provider: "demo", Capability: "ops.restart", Operation: "restart",
		Environment: "test", AccountRef: "ops:demo", Approval: approval,
		Candidates: []config.MCPCandidate{
			{Referent: "svc:payments-prod", Resource: "payments API", Summary: "payments API — production", Aliases: []string{"production payments API"}},
			{Referent: "svc:payments-staging", Resource: "payments API", Summary: "payments API — staging", Aliases: []string{"staging payments API"}},
			{Referent: "svc:search", Resource: "search API", Summary: "search API — production"},
		},
		PayloadSchema: reasonSchema, Summary: "Restart", SummaryFields: []string{"reason"}}
}

// catalogue is the test's MCP configuration: tools on the fake providers
// of testenv, speaking as testenv's host for its tenant.
func catalogue() *config.MCP {
	lumber := []config.MCPCandidate{
		{Referent: "sku-1001", Resource: "Lumber: Cedar-8ft-GradeA", Summary: "Cedar board, 8 ft, grade A"},
		{Referent: "sku-2001", Resource: "Lumber: Pine-8ft", Summary: "Pine board, 8 ft, aisle 4"},
		{Referent: "sku-2002", Resource: "Lumber: Pine-8ft", Summary: "Pine board, 8 ft, yard"},
	}
	tool := func(name, provider, env, approval string) config.MCPTool {
		return config.MCPTool{Name: name, Description: "Adjust the stock of one lumber item.", Provider: provider,
			Capability: "inventory.adjust", Operation: "adjust_stock", Environment: env, AccountRef: "inventory:fixture",
			Approval: approval, Candidates: lumber, PayloadSchema: quantitySchema, Summary: "Adjust stock", SummaryFields: []string{"quantity"}}
	}
	return &config.MCP{
		Host: testenv.HostName, TenantRef: testenv.Tenant, SecurityDomainRef: testenv.SecurityDomain, ActorRef: "actor:demo",
		ActorAssurance: config.DefaultMCPActorAssurance, ScopeRef: config.DefaultMCPScopeRef, PolicyRevision: config.DefaultMCPPolicyRevision,
		ApproverAssurance: schema.AssuranceSession, GrantLifetime: time.Minute, Wait: 20 * time.Second,
		Tools: []config.MCPTool{
			tool("adjust_stock", "demo", "test", config.MCPApprovePolicy),
			tool("adjust_stock_asking", "demo", "test", config.MCPApproveUser),
			tool("adjust_stock_live", "demo", "live", config.MCPApprovePolicy),
			tool("adjust_stock_slow", "slow", "test", config.MCPApprovePolicy),
			restart("restart_service", config.MCPApproveUser),
			restart("restart_service_policy", config.MCPApprovePolicy),
		},
	}
}

type fixture struct {
	env *testenv.Env
	srv *mcp.Server
	log *testenv.LogBuffer // the MCP server's log
}

// start runs testenv with authentication on (the MCP server logs in as the
// host), a provider "slow" that times out, and a managed policy that
// forbids live actions.
func start(t testing.TB) *fixture {
	t.Helper()
	return startWith(t, catalogue())
}

// startWith is start serving the catalogue m.
func startWith(t testing.TB, m *config.MCP) *fixture {
	t.Helper()
	env := testenv.New(t, testenv.WithAuth(), testenv.WithConfig(func(c *config.Config) {
		c.Providers = append(c.Providers, config.Provider{Name: "slow", Adapter: adapters.KindFake, Timeout: 2 * time.Second,
			UnavailableRetry: 2 * time.Second, MaxInFlight: 4, Settings: adapters.FakeScript{}})
		c.Policies = append(c.Policies, policy.ManagedPolicy{Name: "no-live", LiveActionsForbidden: true})
		c.MCP = m
	}))
	env.Fakes["slow"].TimeOut()
	if err := env.Config.Validate(); err != nil {
		t.Fatalf("the test configuration with its mcp block: %v", err)
	}
	nc, err := client.Connect(env.Server.ClientURL(), env.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	host, err := client.NewHost(nc, client.HostConfig{Name: testenv.HostName, PollInterval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	logs := &testenv.LogBuffer{}
	srv, err := mcp.New(env.Config.MCP, host, mcp.Options{Log: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the MCP server's log:\n%s", logs.Bytes())
		}
	})
	return &fixture{env: env, srv: srv, log: logs}
}

// agent is an MCP client session; answer, when not nil, plays the user
// answering elicitations.
type agent struct {
	cs        *sdk.ClientSession
	asked     atomic.Int32
	mu        sync.Mutex
	questions []string
	progress  atomic.Int32
	values    []float64 // progress values, in the order the client handled them
}

func (f *fixture) connect(t testing.TB, answer func(*sdk.ElicitParams) *sdk.ElicitResult) *agent {
	t.Helper()
	return f.connectVersion(t, "", answer)
}

// connectVersion connects a client of an MCP protocol version ("": the
// latest, with multi round-trip requests; "2025-11-25": elicitation
// requests within the call).
func (f *fixture) connectVersion(t testing.TB, version string, answer func(*sdk.ElicitParams) *sdk.ElicitResult) *agent {
	t.Helper()
	ctx := context.Background()
	ct := f.pipe(t)
	a := &agent{}
	opts := &sdk.ClientOptions{
		Capabilities: &sdk.ClientCapabilities{},
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			a.progress.Add(1)
			a.mu.Lock()
			a.values = append(a.values, req.Params.Progress)
			a.mu.Unlock()
		},
	}
	if answer != nil {
		opts.ElicitationHandler = func(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			a.asked.Add(1)
			a.mu.Lock()
			a.questions = append(a.questions, req.Params.Message)
			a.mu.Unlock()
			return answer(req.Params), nil
		}
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test-agent", Version: "1"}, opts).Connect(ctx, ct, &sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	a.cs = cs
	return a
}

// pipe connects a new session of the server over an in-memory transport
// and returns the client's end; the session is awaited when the test ends
// (after the client's cleanups close it).
func (f *fixture) pipe(t testing.TB) *sdk.InMemoryTransport {
	t.Helper()
	ct, st := sdk.NewInMemoryTransports()
	ss, err := f.srv.MCP().Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Wait() })
	return ct
}

// result is the structured content of a tool result.
type result struct {
	Status      string `json:"status"`
	Kind        string `json:"kind"`
	EffectTruth string `json:"effect_truth"`
	ProposalID  string `json:"proposal_id"`
	Code        string `json:"code"`
	ReceiptID   string `json:"receipt_id"`
	Summary     string `json:"summary"`
	Record      *struct {
		Referent, Summary string
	} `json:"record"`
	Candidates []struct {
		Choice, Summary string
	} `json:"candidates"`
	Clarification string `json:"clarification"`
	WhatToDo      string `json:"what_to_do"`
}

func (a *agent) call(t *testing.T, tool string, args map[string]any) (result, *sdk.CallToolResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	params := &sdk.CallToolParams{Name: tool, Arguments: args}
	params.SetProgressToken("p-" + tool)
	res, err := a.cs.CallTool(ctx, params)
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	conforms(t, a.cs, tool, res)
	raw, _ := json.Marshal(res.StructuredContent)
	var r result
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("structured content %s: %v", raw, err)
	}
	return r, res
}

func cedar(q int) map[string]any {
	return map[string]any{"target": "lumber: cedar-8ft-gradea", "payload": map[string]any{"quantity": q}}
}

func accept(approve bool) func(*sdk.ElicitParams) *sdk.ElicitResult {
	return func(*sdk.ElicitParams) *sdk.ElicitResult {
		return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": approve}}
	}
}

// An unambiguous action under the configuration's standing approval ends
// CONFIRMED with its receipt; the same call again is answered from the
// first (the same receipt), and the provider is called once.
func TestConfirmedAndRepeated(t *testing.T) {
	f := start(t)
	a := f.connect(t, nil)
	tools, err := a.cs.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) != 7 {
		t.Fatalf("tools: %v %v", tools, err)
	}
	r, res := a.call(t, "adjust_stock", cedar(20))
	if r.Status != "confirmed" || r.Kind != "CONFIRMED" || r.EffectTruth != "PRESENT" || r.ReceiptID == "" || res.IsError {
		t.Fatalf("first call: %+v", r)
	}
	if a.progress.Load() == 0 {
		t.Error("no progress notification while waiting")
	}
	again, _ := a.call(t, "adjust_stock", cedar(20))
	if again.Status != "confirmed" || again.ReceiptID != r.ReceiptID || again.ProposalID == r.ProposalID {
		t.Errorf("repeated call: %+v, want the receipt %s under a new proposal", again, r.ReceiptID)
	}
	f.env.Quiesce(t)
	if n := f.env.Fakes["demo"].Dispatches(); n != 1 {
		t.Errorf("the provider was called %d times, want 1", n)
	}
	if err := f.env.Fakes["demo"].AtMostOnce(); err != nil {
		t.Error(err)
	}
}

// An ambiguous target asks the user to choose (elicitation) among the
// matching candidates' summaries; the user's choice becomes the next
// proposal's one candidate, which needs the user's approval, and ends
// CONFIRMED.
// Both ways of eliciting are served: multi round-trip requests (protocol
// 2026-07-28) and elicitation requests within the call (older clients).
func TestClarificationThenApproval(t *testing.T) {
	f := start(t)
	for i, version := range []string{"", "2025-11-25"} {
		t.Run("protocol "+version, func(t *testing.T) { clarifyThenApprove(t, f, version, i+1) })
	}
}

func clarifyThenApprove(t *testing.T, f *fixture, version string, dispatched int) {
	a := f.connectVersion(t, version, func(p *sdk.ElicitParams) *sdk.ElicitResult {
		if strings.Contains(p.Message, "Which one") {
			return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"target": "Pine board, 8 ft, yard (sku-2002)"}}
		}
		return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}
	})
	r, _ := a.call(t, "adjust_stock_asking", map[string]any{"target": "Lumber: Pine-8ft", "payload": map[string]any{"quantity": dispatched}})
	if r.Status != "confirmed" || r.ReceiptID == "" {
		t.Fatalf("after choosing and approving: %+v", r)
	}
	if a.asked.Load() != 2 || !strings.Contains(a.questions[0], "Which one") ||
		!strings.Contains(a.questions[1], "Adjust stock: Pine board, 8 ft, yard (sku-2002)") || !strings.Contains(a.questions[1], fmt.Sprintf("quantity: %d", dispatched)) {
		t.Errorf("questions: %q", a.questions)
	}
	f.env.Quiesce(t)
	if k := f.env.Fakes["demo"].Delivered(); len(k) != dispatched {
		t.Errorf("delivered: %v", k)
	}
}

// Without elicitation a clarification is a result listing the candidates'
// summaries and choices and the clarification token; calling again with
// the user's choice and the token grounds to exactly that candidate.
func TestClarificationWithoutElicitation(t *testing.T) {
	f := start(t)
	a := f.connect(t, nil)
	args := map[string]any{"target": "lumber: pine-8ft", "payload": map[string]any{"quantity": 4}}
	r, res := a.call(t, "adjust_stock", args)
	if r.Status != "needs_clarification" || r.Kind != "NEEDS_CLARIFICATION" || r.Code != "GROUNDING_RESOURCE_DISCRIMINATION_AMBIGUOUS" || res.IsError {
		t.Fatalf("ambiguous: %+v", r)
	}
	if len(r.Candidates) != 2 || r.Candidates[0].Summary != "Pine board, 8 ft, aisle 4" || r.Candidates[1].Choice != "sku-2002" {
		t.Fatalf("candidates: %+v", r.Candidates)
	}
	args["choice"], args["clarification"] = "sku-2002", r.Clarification
	r, _ = a.call(t, "adjust_stock", args)
	if r.Status != "confirmed" {
		t.Fatalf("with the user's choice: %+v", r)
	}
	o, _ := f.env.StoredOutcome(t, r.ProposalID)
	if o.Referent == nil || *o.Referent != "sku-2002" {
		t.Errorf("grounded to %v, want sku-2002", o.Referent)
	}
	// A choice the tool did not offer is refused before anything is sent.
	args["choice"] = "sku-9999"
	if r, res := a.call(t, "adjust_stock", args); r.Status != "bad_arguments" || !res.IsError || !strings.Contains(r.WhatToDo, "choice") {
		t.Errorf("an invented choice: %+v", r)
	}
}

// The user approves: the host's grant, CONFIRMED. The user declines:
// DENIED/APPROVAL_DECLINED as a tool error, nothing dispatched.
func TestApprovalAcceptedAndDeclined(t *testing.T) {
	f := start(t)
	yes := f.connect(t, accept(true))
	r, _ := yes.call(t, "adjust_stock_asking", cedar(7))
	if r.Status != "confirmed" || yes.asked.Load() != 1 {
		t.Fatalf("accepted: %+v (asked %d)", r, yes.asked.Load())
	}
	before := f.env.Fakes["demo"].Dispatches()
	no := f.connect(t, func(*sdk.ElicitParams) *sdk.ElicitResult { return &sdk.ElicitResult{Action: "decline"} })
	r, res := no.call(t, "adjust_stock_asking", cedar(8))
	if r.Status != "denied" || r.Code != "APPROVAL_DECLINED" || !res.IsError || !strings.Contains(r.WhatToDo, "declined") {
		t.Fatalf("declined: %+v", r)
	}
	unticked := f.connect(t, accept(false))
	if r, _ := unticked.call(t, "adjust_stock_asking", cedar(9)); r.Code != "APPROVAL_DECLINED" {
		t.Fatalf("accepted the form without approving: %+v", r)
	}
	f.env.Quiesce(t)
	if n := f.env.Fakes["demo"].Dispatches(); n != before {
		t.Errorf("declined actions dispatched: %d → %d", before, n)
	}
}

// A client without elicitation gets a pending result for an action that
// needs the user's approval, and the status tool reports it parked; no tool
// approves it.
func TestApprovalUnsupported(t *testing.T) {
	f := start(t)
	a := f.connect(t, nil)
	r, res := a.call(t, "adjust_stock_asking", cedar(11))
	if r.Status != "pending_approval" || r.Kind != "NEEDS_APPROVAL" || res.IsError || !strings.Contains(r.WhatToDo, "cannot approve") {
		t.Fatalf("pending: %+v", r)
	}
	if !strings.Contains(r.Summary, "quantity: 11") {
		t.Errorf("summary %q", r.Summary)
	}
	s, _ := a.call(t, "portcullis_status", map[string]any{"proposal_id": r.ProposalID})
	if s.Status != "pending_approval" || s.ProposalID != r.ProposalID {
		t.Errorf("status: %+v", s)
	}
	f.env.Quiesce(t)
	if n := f.env.Fakes["demo"].Dispatches(); n != 0 {
		t.Errorf("dispatched %d without approval", n)
	}
	if o, _ := f.env.StoredOutcome(t, r.ProposalID); o.Kind != schema.KindNeedsApproval {
		t.Errorf("stored: %+v", o)
	}
}

// A managed policy refuses the action: a tool error with the closed code.
func TestDeniedByPolicy(t *testing.T) {
	f := start(t)
	a := f.connect(t, accept(true))
	r, res := a.call(t, "adjust_stock_live", cedar(5))
	if r.Status != "denied" || r.Code != "LIVE_ACTIONS_FORBIDDEN" || !res.IsError || !strings.Contains(r.WhatToDo, "Do not retry") {
		t.Fatalf("live action under a policy forbidding it: %+v", r)
	}
}

// A provider that times out leaves the effect unknown: the result says so
// and that the call must not be repeated; repeating it anyway dispatches
// nothing again.
func TestProviderTimeoutIsEffectUnknown(t *testing.T) {
	f := start(t)
	a := f.connect(t, nil)
	r, res := a.call(t, "adjust_stock_slow", cedar(6))
	if r.Status != "effect_unknown" || r.Kind != "RECONCILIATION_REQUIRED" || r.EffectTruth != "INDETERMINATE" || res.IsError {
		t.Fatalf("timeout: %+v", r)
	}
	if !strings.Contains(r.WhatToDo, "UNKNOWN") || !strings.Contains(r.WhatToDo, "Do NOT call this tool again") {
		t.Errorf("what to do: %q", r.WhatToDo)
	}
	again, _ := a.call(t, "adjust_stock_slow", cedar(6))
	if again.Kind != "RECONCILIATION_REQUIRED" {
		t.Errorf("repeated: %+v", again)
	}
	if n := f.env.Fakes["slow"].Dispatches(); n != 1 {
		t.Errorf("dispatched %d times, want 1", n)
	}
}

// Arguments that break the schema, and a model setting the tenant or the
// actor, get a tool error naming the field; nothing is published.
func TestBadArgumentsPublishNothing(t *testing.T) {
	f := start(t)
	a := f.connect(t, accept(true))
	cases := []struct {
		name string
		args map[string]any
		want string
	}{
		{"quantity out of range", cedar(5000), "payload/quantity"},
		{"quantity missing", map[string]any{"target": "x", "payload": map[string]any{}}, "quantity"},
		{"wrong type", map[string]any{"target": 7, "payload": map[string]any{"quantity": 1}}, "target"},
		{"no target", map[string]any{"payload": map[string]any{"quantity": 1}}, "target"},
		{"unknown argument", map[string]any{"target": "x", "payload": map[string]any{"quantity": 1}, "priority": "high"}, "priority"},
		{"tenant", map[string]any{"target": "x", "payload": map[string]any{"quantity": 1}, "tenant_ref": "tenant:other"}, "tenant_ref: not an argument"},
		{"actor", map[string]any{"target": "x", "payload": map[string]any{"quantity": 1}, "actor": map[string]any{"actor_ref": "actor:root"}}, "actor: not an argument"},
		{"security domain", map[string]any{"target": "x", "payload": map[string]any{"quantity": 1}, "security_domain_ref": "security-domain:other"}, "security_domain_ref: not an argument"},
		{"approval", map[string]any{"target": "x", "payload": map[string]any{"quantity": 1}, "approved": true}, "approved: not an argument"},
	}
	for _, c := range cases {
		r, res := a.call(t, "adjust_stock_asking", c.args)
		if r.Status != "bad_arguments" || !res.IsError || !strings.Contains(r.WhatToDo, c.want) || r.ProposalID != "" {
			t.Errorf("%s: %+v, want a tool error naming %q", c.name, r, c.want)
		}
	}
	f.env.Quiesce(t)
	if n := len(f.env.StoredHistory(t)); n != 0 {
		t.Errorf("%d proposals got outcomes; bad arguments must publish nothing", n)
	}
	if a.asked.Load() != 0 {
		t.Error("the user was asked about bad arguments")
	}
	// The status tool reads only this server's proposal ids.
	if r, res := a.call(t, "portcullis_status", map[string]any{"proposal_id": "prop-1"}); !res.IsError || r.Status != "bad_arguments" {
		t.Errorf("status of a foreign id: %+v", r)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// BenchmarkToolCall measures one tool call end to end: MCP over the
// in-memory transport, a signed proposal through every stage to the fake
// provider (approved by the catalogue: NEEDS_APPROVAL, the host's grant,
// CONFIRMED), the outcome mapped. Distinct intents for the first 1000
// iterations, then repeats answered from their receipts.
func BenchmarkToolCall(b *testing.B) {
	f := start(b)
	a := f.connect(b, nil)
	b.ResetTimer()
	for i := range b.N {
		res, err := a.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "adjust_stock", Arguments: cedar(i%1000 + 1)})
		if err != nil || res.IsError {
			b.Fatalf("call: %v %+v", err, res)
		}
	}
}
