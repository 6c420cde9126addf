package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	sjs "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// The attacks of issue 31, replayed from outside the server: a model (or
// whatever speaks for the client) sends what it likes as arguments, and
// answers elicitations with what it likes — through the Go SDK, and as
// raw input responses that no SDK validated.

// sent makes the fake provider "demo" confirm every dispatch and returns
// the referents it was asked to act on, in order.
func (f *fixture) sent() func() []string {
	var mu sync.Mutex
	var got []string
	f.env.Fakes["demo"].OnDispatch(func(_ context.Context, r schema.DispatchRequest) (schema.AdapterReply, error) {
		mu.Lock()
		got = append(got, r.Referent)
		mu.Unlock()
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed}, nil
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// nothingSent checks, once the pipeline is idle, that the provider was
// asked nothing and that proposals proposals got outcomes.
func (f *fixture) nothingSent(t *testing.T, sent func() []string, proposals int) {
	t.Helper()
	f.env.Quiesce(t)
	if got := sent(); len(got) != 0 {
		t.Errorf("dispatched to %v", got)
	}
	if n := len(f.env.StoredHistory(t)); n != proposals {
		t.Errorf("%d proposals got outcomes, want %d", n, proposals)
	}
}

// conforms checks a tool result against the outputSchema the tool
// declares (MCP: a tool with an output schema returns structured content
// that conforms to it).
func conforms(t testing.TB, cs *sdk.ClientSession, tool string, res *sdk.CallToolResult) {
	t.Helper()
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(tools.Tools, func(x *sdk.Tool) bool { return x.Name == tool })
	if i < 0 {
		return // an unknown tool: the protocol error is the caller's to check
	}
	if tools.Tools[i].OutputSchema == nil {
		t.Errorf("tool %s declares no outputSchema", tool)
		return
	}
	if err := validateAgainst(tools.Tools[i].OutputSchema, res.StructuredContent); err != nil {
		t.Errorf("tool %s: the result does not conform to its outputSchema: %v", tool, err)
	}
}

func validateAgainst(schemaDoc, value any) error {
	raw, err := json.Marshal(schemaDoc)
	if err != nil {
		return err
	}
	doc, err := sjs.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	c := sjs.NewCompiler()
	if err := c.AddResource("output.json", doc); err != nil {
		return err
	}
	sch, err := c.Compile("output.json")
	if err != nil {
		return err
	}
	v, err := json.Marshal(value)
	if err != nil {
		return err
	}
	inst, err := sjs.UnmarshalJSON(bytes.NewReader(v))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

func reason(r string) map[string]any { return map[string]any{"reason": r} }

// A choice on a call that no clarification of this server answered is
// refused before anything is sent, whatever target it comes with: the
// model cannot pick the record, with or without a client that asks the
// user (which would then approve whatever the summary said).
func TestAttackFirstCallChoice(t *testing.T) {
	f := start(t)
	sent := f.sent()
	attacks := []struct {
		tool string
		args map[string]any
	}{
		{"restart_service", map[string]any{"target": "staging payments API (safe, test only)", "choice": "svc:payments-prod", "payload": reason("r")}},
		{"restart_service_policy", map[string]any{"target": "staging payments API", "choice": "svc:payments-prod", "payload": reason("r")}},
		{"adjust_stock", map[string]any{"target": "Lumber: Pine-8ft", "choice": "sku-2002", "payload": map[string]any{"quantity": 1}}},
		{"adjust_stock", map[string]any{"target": "Oak, aisle 9", "choice": "sku-2001", "payload": map[string]any{"quantity": 2}}},
	}
	for _, who := range []struct {
		name   string
		answer func(*sdk.ElicitParams) *sdk.ElicitResult
	}{{"a client that asks its user (who approves)", accept(true)}, {"a client without elicitation", nil}} {
		a := f.connect(t, who.answer)
		for _, at := range attacks {
			r, res := a.call(t, at.tool, at.args)
			if r.Status != "bad_arguments" || !res.IsError || r.ProposalID != "" || !strings.Contains(r.WhatToDo, "clarification") {
				t.Errorf("%s, %s %v: %+v; want bad_arguments naming the clarification, nothing proposed", who.name, at.tool, at.args, r)
			}
		}
		if n := a.asked.Load(); n != 0 {
			t.Errorf("%s: the user was asked %d questions about refused calls", who.name, n)
		}
	}
	f.nothingSent(t, sent, 0)
}

// Without elicitation, a clarification lists the offered choices and a
// token the next call must carry: the choice the user picked among them,
// the same target words and payload, in the same session and tool. Any
// other use of the token is refused; the right one grounds to exactly the
// record picked, and the result names it.
func TestClarificationToken(t *testing.T) {
	f := start(t)
	sent := f.sent()
	a := f.connect(t, nil)
	args := map[string]any{"target": "payments API", "payload": reason("token")}
	r, _ := a.call(t, "restart_service_policy", args)
	if r.Status != "needs_clarification" || len(r.Candidates) != 2 || r.Candidates[0].Choice != "svc:payments-prod" ||
		r.Candidates[1].Choice != "svc:payments-staging" || r.Clarification == "" {
		t.Fatalf("clarification: %+v; want the two payments services offered and a clarification token", r)
	}
	token := r.Clarification
	with := func(edit func(m map[string]any)) map[string]any {
		m := map[string]any{"target": "payments API", "payload": reason("token"), "choice": "svc:payments-staging", "clarification": token}
		edit(m)
		return m
	}
	other := f.connect(t, nil)
	for _, c := range []struct {
		name  string
		agent *agent
		tool  string
		args  map[string]any
	}{
		{"a choice that was not offered", a, "restart_service_policy", with(func(m map[string]any) { m["choice"] = "svc:search" })},
		{"a choice without the token", a, "restart_service_policy", with(func(m map[string]any) { delete(m, "clarification") })},
		{"the token without a choice", a, "restart_service_policy", with(func(m map[string]any) { delete(m, "choice") })},
		{"a target naming another record than the choice", a, "restart_service_policy", with(func(m map[string]any) { m["target"] = "production payments API" })},
		{"other target words", a, "restart_service_policy", with(func(m map[string]any) { m["target"] = "payments api (staging)" })},
		{"another payload", a, "restart_service_policy", with(func(m map[string]any) { m["payload"] = reason("other") })},
		{"another tool", a, "restart_service", with(func(map[string]any) {})},
		{"another session", other, "restart_service_policy", with(func(map[string]any) {})},
		{"a forged token", a, "restart_service_policy", with(func(m map[string]any) { m["clarification"] = token[:len(token)-2] + "AA" })},
	} {
		r, res := c.agent.call(t, c.tool, c.args)
		if r.Status != "bad_arguments" || !res.IsError || r.ProposalID != "" {
			t.Errorf("%s: %+v; want it refused, nothing proposed", c.name, r)
		}
	}
	f.env.Quiesce(t)
	if got := sent(); len(got) != 0 {
		t.Fatalf("dispatched to %v before the right call", got)
	}
	r, _ = a.call(t, "restart_service_policy", with(func(map[string]any) {}))
	if r.Status != "confirmed" || r.Record == nil || r.Record.Referent != "svc:payments-staging" || r.Record.Summary != "payments API — staging" ||
		!strings.Contains(r.Summary, "payments API — staging") || !strings.Contains(r.Summary, "svc:payments-staging") {
		t.Fatalf("the user's choice: %+v; want CONFIRMED naming payments API — staging (svc:payments-staging)", r)
	}
	f.env.Quiesce(t)
	if got := sent(); !slices.Equal(got, []string{"svc:payments-staging"}) {
		t.Errorf("dispatched to %v, want exactly svc:payments-staging", got)
	}
}

// With elicitation the user is asked to choose, and only an answer naming
// a record the question offered is taken — also for a tool the
// configuration approves. An answer naming another record (raw, past any
// SDK's validation) proposes nothing.
func TestAttackChoiceNotOffered(t *testing.T) {
	f := start(t)
	sent := f.sent()
	for _, pick := range []string{"search API — production (svc:search)", "search API — production", "svc:search"} {
		// The input-request round (protocol 2026-07-28): the answer is
		// whatever the client puts in inputResponses.
		a := f.rawRounds(t)
		res := a.call(t, "restart_service_policy", map[string]any{"target": "payments API", "payload": reason("offered " + pick)})
		if res.InputRequests["choose"] == nil {
			t.Fatalf("a tool the configuration approves did not ask the user to choose: %+v", res)
		}
		res = a.retry(t, res, "choose", `{"action":"accept","content":{"target":`+quote(pick)+`}}`)
		r := decode(t, res)
		if r.Status != "needs_clarification" || len(res.InputRequests) != 0 {
			t.Errorf("input round, the answer %q: %+v %v; want needs_clarification, nothing proposed", pick, r, res.InputRequests)
		}
		// The elicitation request within the call (older protocols).
		w := f.wire(t, "2025-11-25")
		out := w.call(t, "restart_service_policy", map[string]any{"target": "payments API", "payload": reason("in call " + pick)},
			func(map[string]any) string { return `{"action":"accept","content":{"target":` + quote(pick) + `}}` })
		if out.result.Status != "needs_clarification" {
			t.Errorf("in the call, the answer %q: %+v; want needs_clarification", pick, out.result)
		}
	}
	f.nothingSent(t, sent, 6) // the first calls' clarifications only
}

// Only "accept" with content exactly {"approve": true} approves. Every
// other answer — sent raw, in both protocol styles — approves nothing: the
// action stays parked (pending_approval) and nothing is dispatched;
// {"approve": false} and "decline" decline it.
func TestAttackLooseApprovals(t *testing.T) {
	f := start(t)
	sent := f.sent()
	loose := map[string]string{
		"accept without content":    `{"action":"accept"}`,
		"accept, content null":      `{"action":"accept","content":null}`,
		"accept {}":                 `{"action":"accept","content":{}}`,
		`approve "no"`:              `{"action":"accept","content":{"approve":"no"}}`,
		`approve "true"`:            `{"action":"accept","content":{"approve":"true"}}`,
		"approve 0":                 `{"action":"accept","content":{"approve":0}}`,
		"approve 1":                 `{"action":"accept","content":{"approve":1}}`,
		"approve true and more":     `{"action":"accept","content":{"approve":true,"also":"x"}}`,
		"an action nobody defined":  `{"action":"approve","content":{"approve":true}}`,
		"no action":                 `{"content":{"approve":true}}`,
		"cancel with approve: true": `{"action":"cancel","content":{"approve":true}}`,
	}
	n := 0
	for name, answer := range loose {
		n++
		args := map[string]any{"target": "search API", "payload": reason(name)}
		a := f.rawRounds(t)
		res := a.call(t, "restart_service", args)
		if res.InputRequests["approve"] == nil {
			t.Fatalf("not asked to approve: %+v", res)
		}
		r := decode(t, a.retry(t, res, "approve", answer))
		if r.Status != "pending_approval" || r.Kind != "NEEDS_APPROVAL" {
			t.Errorf("input round, %s: %+v; want pending_approval, nothing approved", name, r)
		}
		args["payload"] = reason(name + " (in the call)")
		w := f.wire(t, "2025-11-25")
		out := w.call(t, "restart_service", args, func(map[string]any) string { return answer })
		if out.result.Status != "pending_approval" {
			t.Errorf("in the call, %s: %+v; want pending_approval, nothing approved", name, out.result)
		}
	}
	f.env.Quiesce(t)
	if got := sent(); len(got) != 0 {
		t.Fatalf("loose answers dispatched %v", got)
	}
	for _, c := range []struct{ answer, status, code string }{
		{`{"action":"accept","content":{"approve":true}}`, "confirmed", ""},
		{`{"action":"accept","content":{"approve":false}}`, "denied", "APPROVAL_DECLINED"},
		{`{"action":"decline"}`, "denied", "APPROVAL_DECLINED"},
	} {
		a := f.rawRounds(t)
		res := a.call(t, "restart_service", map[string]any{"target": "search API", "payload": reason("strict " + c.answer)})
		r := decode(t, a.retry(t, res, "approve", c.answer))
		w := f.wire(t, "2025-11-25")
		out := w.call(t, "restart_service", map[string]any{"target": "search API", "payload": reason("strict in call " + c.answer)},
			func(map[string]any) string { return c.answer })
		for _, got := range []result{r, out.result} {
			if got.Status != c.status || got.Code != c.code {
				t.Errorf("%s: %+v; want %s %s", c.answer, got, c.status, c.code)
			}
		}
	}
	f.env.Quiesce(t)
	if got := sent(); !slices.Equal(got, []string{"svc:search", "svc:search"}) {
		t.Errorf("dispatched %v, want the two accepted restarts of svc:search", got)
	}
}

// After a clarification, the approval question, the proposal's display
// summary and the result name the record the user picked (its summary
// and referent), the operation and the payload's summary fields — in
// both protocol styles.
func TestApprovalNamesTheBoundRecord(t *testing.T) {
	f := start(t)
	sent := f.sent()
	for _, version := range []string{"", "2025-11-25"} {
		a := f.connectVersion(t, version, func(p *sdk.ElicitParams) *sdk.ElicitResult {
			if strings.Contains(p.Message, "Which") {
				// Pick by the label the question offers for staging.
				enum, _ := p.RequestedSchema.(map[string]any)["properties"].(map[string]any)["target"].(map[string]any)["enum"].([]any)
				for _, e := range enum {
					if s, _ := e.(string); strings.Contains(s, "staging") {
						return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"target": s}}
					}
				}
				return &sdk.ElicitResult{Action: "cancel"}
			}
			return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}
		})
		why := strings.TrimSpace("bound " + version)
		r, _ := a.call(t, "restart_service", map[string]any{"target": "payments API", "payload": reason(why)})
		if r.Status != "confirmed" || r.Record == nil || r.Record.Referent != "svc:payments-staging" || !strings.Contains(r.Summary, "payments API — staging") {
			t.Errorf("protocol %q: %+v; want CONFIRMED naming payments API — staging", version, r)
		}
		if len(a.questions) != 2 {
			t.Fatalf("protocol %q: asked %q", version, a.questions)
		}
		q := a.questions[1]
		for _, want := range []string{"payments API — staging", "svc:payments-staging", "restart", "reason: " + why} {
			if !strings.Contains(q, want) {
				t.Errorf("protocol %q: the approval question %q does not name %q", version, q, want)
			}
		}
		if strings.Contains(q, "production") {
			t.Errorf("protocol %q: the approval question names the record not picked: %q", version, q)
		}
		var parked schema.Outcome
		for _, o := range f.env.Recorder.WaitAll(t, r.ProposalID, testenv.Kind(schema.KindNeedsApproval)) {
			if o.Kind == schema.KindNeedsApproval {
				parked = o
			}
		}
		if parked.Approval == nil || !strings.Contains(parked.Approval.Summary, "payments API — staging (svc:payments-staging)") {
			t.Errorf("protocol %q: the display summary approvers see: %+v", version, parked.Approval)
		}
	}
	f.env.Quiesce(t)
	if got := sent(); !slices.Equal(got, []string{"svc:payments-staging", "svc:payments-staging"}) {
		t.Errorf("dispatched %v", got)
	}
}

// Progress notifications of one call rise strictly — also across the
// proposals of a clarification and an approval answered within it — and
// none is sent after the call's result.
func TestProgressRisesAndStopsBeforeResult(t *testing.T) {
	f := start(t)
	w := f.wire(t, "2025-11-25")
	out := w.call(t, "restart_service", map[string]any{"target": "payments API", "payload": reason("progress")}, func(p map[string]any) string {
		if strings.Contains(p["message"].(string), "Which") {
			return `{"action":"accept","content":{"target":"` + stagingLabel(p) + `"}}`
		}
		return `{"action":"accept","content":{"approve":true}}`
	})
	if out.result.Status != "confirmed" {
		t.Fatalf("result: %+v", out.result)
	}
	if len(out.progress) < 4 {
		t.Errorf("progress %v: want notifications for both proposals", out.progress)
	}
	for i := 1; i < len(out.progress); i++ {
		if out.progress[i] <= out.progress[i-1] {
			t.Errorf("progress does not rise: %v", out.progress)
			break
		}
	}
	if out.late != 0 {
		t.Errorf("%d progress notifications after the result", out.late)
	}
}

// Across the rounds of an input request (protocol 2026-07-28), the
// progress of one call goes on rising: each round carries the last value
// in its sealed state.
func TestProgressRisesAcrossRounds(t *testing.T) {
	f := start(t)
	a := f.connectVersion(t, "", func(p *sdk.ElicitParams) *sdk.ElicitResult {
		if strings.Contains(p.Message, "Which") {
			return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"target": "payments API — staging (svc:payments-staging)"}}
		}
		return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}
	})
	if r, _ := a.call(t, "restart_service", map[string]any{"target": "payments API", "payload": reason("rounds")}); r.Status != "confirmed" {
		t.Fatalf("%+v", r)
	}
	testenv.WaitFor(t, "the progress notifications", func() bool { return a.progress.Load() >= 4 })
	a.mu.Lock()
	defer a.mu.Unlock()
	got := slices.Clone(a.values)
	slices.Sort(got) // the client hands notifications to its handler concurrently
	if got := slices.Compact(got); len(got) != len(a.values) {
		t.Errorf("progress values repeat across the rounds: %v", a.values)
	}
}

func stagingLabel(p map[string]any) string {
	enum := p["requestedSchema"].(map[string]any)["properties"].(map[string]any)["target"].(map[string]any)["enum"].([]any)
	for _, e := range enum {
		if s := e.(string); strings.Contains(s, "staging") {
			return s
		}
	}
	return ""
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// rounds is a client of protocol 2026-07-28 that answers input requests
// itself, with raw JSON no SDK validated.
type rounds struct {
	cs *sdk.ClientSession
}

func (f *fixture) rawRounds(t *testing.T) *rounds {
	t.Helper()
	ct := f.pipe(t)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "raw-rounds", Version: "1"}, &sdk.ClientOptions{
		Capabilities:   &sdk.ClientCapabilities{},
		MultiRoundTrip: &sdk.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			t.Error("an elicitation request within the call on protocol 2026-07-28")
			return &sdk.ElicitResult{Action: "cancel"}, nil
		},
	}).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return &rounds{cs: cs}
}

func (r *rounds) call(t *testing.T, tool string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	return r.send(t, &sdk.CallToolParams{Name: tool, Arguments: args})
}

func (r *rounds) send(t *testing.T, p *sdk.CallToolParams) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := r.cs.CallTool(ctx, p)
	if err != nil {
		t.Fatalf("call %s: %v", p.Name, err)
	}
	if len(res.InputRequests) == 0 {
		conforms(t, r.cs, p.Name, res)
	}
	res.Meta = sdk.Meta{"tool": p.Name, "arguments": p.Arguments}
	return res
}

// retry answers the input request id of prev with raw (an elicitation
// result as JSON), the request state echoed.
func (r *rounds) retry(t *testing.T, prev *sdk.CallToolResult, id, raw string) *sdk.CallToolResult {
	t.Helper()
	var ans sdk.ElicitResult
	if err := json.Unmarshal([]byte(raw), &ans); err != nil {
		t.Fatal(err)
	}
	return r.send(t, &sdk.CallToolParams{Name: prev.Meta["tool"].(string), Arguments: prev.Meta["arguments"],
		InputResponses: sdk.InputResponseMap{id: &ans}, RequestState: prev.RequestState})
}

func decode(t *testing.T, res *sdk.CallToolResult) result {
	t.Helper()
	raw, _ := json.Marshal(res.StructuredContent)
	var r result
	_ = json.Unmarshal(raw, &r)
	return r
}

// wire is a client that speaks raw JSON-RPC on the server's stdio framing:
// no SDK validates what it sends, and it sees every message in the order
// the server wrote it.
type wire struct {
	conn net.Conn
	in   chan map[string]any
	next int
}

func (f *fixture) wire(t *testing.T, version string) *wire {
	t.Helper()
	srvEnd, cliEnd := net.Pipe()
	ss, err := f.srv.MCP().Connect(context.Background(), &sdk.IOTransport{Reader: srvEnd, Writer: srvEnd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := &wire{conn: cliEnd, in: make(chan map[string]any, 256)}
	done := make(chan struct{})
	go func() {
		defer close(w.in)
		dec := json.NewDecoder(cliEnd)
		for {
			var m map[string]any
			if dec.Decode(&m) != nil {
				return
			}
			select {
			case w.in <- m:
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() { close(done); _ = cliEnd.Close(); _ = ss.Wait() })
	w.request(t, "initialize", map[string]any{"protocolVersion": version, "clientInfo": map[string]any{"name": "wire", "version": "1"},
		"capabilities": map[string]any{"elicitation": map[string]any{}}}, nil)
	w.write(t, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	return w
}

func (w *wire) write(t *testing.T, m map[string]any) {
	t.Helper()
	b, _ := json.Marshal(m)
	_ = w.conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := w.conn.Write(append(b, '\n')); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// request sends a request and reads until its response, passing every
// other message to seen. It answers elicitation requests with answer's
// raw JSON.
func (w *wire) request(t *testing.T, method string, params map[string]any, seen func(map[string]any)) map[string]any {
	t.Helper()
	w.next++
	id := float64(w.next)
	w.write(t, map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	timeout := time.After(90 * time.Second)
	for {
		select {
		case m, ok := <-w.in:
			if !ok {
				t.Fatalf("%s: the connection closed", method)
			}
			if m["id"] == id && m["method"] == nil {
				if m["error"] != nil {
					t.Fatalf("%s: %v", method, m["error"])
				}
				return m["result"].(map[string]any)
			}
			if seen != nil {
				seen(m)
			}
		case <-timeout:
			t.Fatalf("%s: no response", method)
		}
	}
}

type wireCall struct {
	result   result
	progress []float64 // the call's progress values, as they arrived
	late     int       // progress notifications after the result
}

// call calls a tool with a progress token, answering the elicitation
// requests within the call with answer(params)'s raw JSON.
func (w *wire) call(t *testing.T, tool string, args map[string]any, answer func(map[string]any) string) wireCall {
	t.Helper()
	var out wireCall
	const token = "progress-1"
	progress := func(m map[string]any, after bool) {
		if m["method"] != "notifications/progress" {
			return
		}
		p := m["params"].(map[string]any)
		if p["progressToken"] != token {
			return
		}
		if after {
			out.late++
		}
		out.progress = append(out.progress, p["progress"].(float64))
	}
	res := w.request(t, "tools/call", map[string]any{"name": tool, "arguments": args, "_meta": map[string]any{"progressToken": token}},
		func(m map[string]any) {
			progress(m, false)
			if m["method"] == "elicitation/create" {
				raw := `{"action":"cancel"}`
				if answer != nil {
					raw = answer(m["params"].(map[string]any))
				}
				w.write(t, map[string]any{"jsonrpc": "2.0", "id": m["id"], "result": json.RawMessage(raw)})
			}
		})
	// A ping's answer follows anything the server wrote before it.
	w.request(t, "ping", map[string]any{}, func(m map[string]any) { progress(m, true) })
	raw, _ := json.Marshal(res["structuredContent"])
	if err := json.Unmarshal(raw, &out.result); err != nil {
		t.Fatalf("structured content %s: %v", raw, err)
	}
	return out
}

// The server's log names who did what — each tool call, question, answer
// and approval with its session — and nothing a model or client wrote:
// targets, payloads and elicitation answers (even one the SDK refused,
// whose error quotes it) stay out of it, and out of the processor's log.
func TestLogNamesSessionsNotValues(t *testing.T) {
	f := start(t)
	w := f.wire(t, "2025-11-25")
	w.call(t, "restart_service", map[string]any{"target": "payments API SECRET-TARGET-1", "payload": reason("SECRET-PAYLOAD-2")},
		func(map[string]any) string { return `{"action":"accept","content":{"target":"SECRET-ANSWER-3"}}` })
	w.call(t, "restart_service", map[string]any{"target": "search API", "payload": reason("SECRET-PAYLOAD-4")},
		func(map[string]any) string { return `{"action":"accept","content":{"approve":"SECRET-ANSWER-5"}}` })
	a := f.connect(t, accept(true))
	a.call(t, "restart_service", map[string]any{"target": "search API", "payload": reason("SECRET-PAYLOAD-6")})
	f.env.Quiesce(t)
	for name, log := range map[string][]byte{"the MCP server's log": f.log.Bytes(), "the processor's log": f.env.Logs.Bytes()} {
		if bytes.Contains(log, []byte("SECRET")) {
			t.Errorf("%s holds a value a model or client wrote:\n%s", name, log)
		}
	}
	sessions := map[string]bool{}
	for _, line := range strings.Split(string(f.log.Bytes()), "\n") {
		if !strings.Contains(line, `"msg":"mcp: `) || strings.Contains(line, "mcp: propose failed") || strings.Contains(line, "mcp: no outcome") {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		s, _ := m["session"].(string)
		if !strings.HasPrefix(s, "s-") {
			t.Errorf("a line without its session: %s", line)
		}
		sessions[s] = true
	}
	if len(sessions) != 2 {
		t.Errorf("sessions named: %v, want the two clients'", sessions)
	}
	for _, msg := range []string{"mcp: tool call", "mcp: asking the user", "mcp: clarification answered", "mcp: approval answered", "mcp: approved"} {
		if !bytes.Contains(f.log.Bytes(), []byte(`"msg":"`+msg+`"`)) {
			t.Errorf("no %q line", msg)
		}
	}
}
