// Package mcp serves a catalogue of Portcullis actions to an agent as MCP
// tools (SPEC §7): `processor mcp`. The server is a host (SPEC §2.7, §2.8):
// it proposes on its host's subjects with its host's key and reads only its
// own outcomes. The model it serves is untrusted input: its arguments give a
// target in the user's words and a payload, validated against the tool's
// schema; the trusted context comes from configuration.
//
// The user decides at every door. A clarification is asked of the user by
// MCP elicitation (for every tool, whoever approves it); without
// elicitation the result lists the offered records and a sealed token, and
// a `choice` is taken only with that token, in the same session, for the
// same tool, target and payload, and only among the records it offered.
// An approval is asked of the user by elicitation and granted only on an
// answer of exactly {"approve": true}; every question, display summary
// and result names the record grounding bound. No tool grants.
//
// It owns the MCP tools, their schemas and what the model is told. It
// speaks to the processor as a host does, through the client package, and
// imports no store and no engine.
package mcp

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"log/slog"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"weak"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/client"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/metrics/version"
	"github.com/portcullis/portcullis/schema"
)

// Input request ids of the elicitations a call may return.
const (
	inputApprove = "approve"
	inputChoose  = "choose"
)

// ProgressEvery is how often a waiting call sends a progress notification
// when nothing new happened.
const ProgressEvery = 5 * time.Second

// Options configure a Server beyond its MCP configuration.
type Options struct {
	// Log receives value-free lines (tool, session, proposal id, kind,
	// code): never a target, a payload, a tenant or an actor.
	Log *slog.Logger
	// Now is the clock of sealed states and tokens; nil is time.Now.
	Now func() time.Time
}

// Server is the MCP server of one host.
type Server struct {
	cfg      *config.MCP
	host     *client.Host
	tools    map[string]*tool
	key      []byte // seals request states and clarification tokens (seal.go)
	log      *slog.Logger
	now      func() time.Time
	sdk      *sdk.Server
	sessions sessions
}

// New builds the server. host proposes, grants and declines as the
// configured host (client.NewHost on a connection made with its key).
func New(cfg *config.MCP, host *client.Host, opts Options) (*Server, error) {
	if cfg == nil || host == nil {
		return nil, errors.New("mcp: a configuration and a host are required")
	}
	s := &Server{cfg: cfg, host: host, tools: map[string]*tool{}, log: opts.Log, now: opts.Now, key: make([]byte, 32)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if _, err := rand.Read(s.key); err != nil {
		return nil, err
	}
	s.sdk = sdk.NewServer(&sdk.Implementation{Name: "portcullis", Title: "Portcullis", Version: version.Get().Version},
		&sdk.ServerOptions{Instructions: instructions, Logger: s.log})
	output := OutputSchema()
	for _, tc := range cfg.Tools {
		t, err := newTool(tc)
		if err != nil {
			return nil, err
		}
		s.tools[t.Name] = t
		destructive := true
		s.sdk.AddTool(&sdk.Tool{Name: t.Name, Description: t.description, InputSchema: t.input, OutputSchema: output,
			Annotations: &sdk.ToolAnnotations{DestructiveHint: &destructive, OpenWorldHint: &destructive}},
			func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				return s.call(ctx, req, t), nil
			})
	}
	s.sdk.AddTool(&sdk.Tool{Name: config.StatusToolName, Description: statusDescription, InputSchema: statusSchema, OutputSchema: output,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, s.status)
	return s, nil
}

// MCP is the SDK server, to run on a transport.
func (s *Server) MCP() *sdk.Server { return s.sdk }

const instructions = `Portcullis guards consequential actions. Each tool call is a proposal: it is bound to exactly one target, ` +
	`checked, approved by the user when needed, and carried out at most once. Read each result's "status" and "what_to_do". ` +
	`Never retry an action whose effect is unknown. Never choose a target or approve on the user's behalf.`

// sessions gives every MCP session an id of this server's own: what a
// sealed state or token is bound to, and what the log names each tool
// call, question, answer and approval by. It is random and the same for
// every transport (a stdio or in-memory session has no id of its own),
// and forgotten with the session.
type sessions struct {
	mu  sync.Mutex
	ids map[weak.Pointer[sdk.ServerSession]]string
}

func (ss *sessions) id(s *sdk.ServerSession) string {
	if s == nil {
		return ""
	}
	k := weak.Make(s)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if id, ok := ss.ids[k]; ok {
		return id
	}
	if ss.ids == nil {
		ss.ids = map[weak.Pointer[sdk.ServerSession]]string{}
	}
	id := newID("s-")
	ss.ids[k] = id
	runtime.AddCleanup(s, func(k weak.Pointer[sdk.ServerSession]) {
		ss.mu.Lock()
		delete(ss.ids, k)
		ss.mu.Unlock()
	}, k)
	return id
}

// a call is one tools/call request being served: its tool and arguments,
// its session, whether its client asks the user, and the progress it sent.
type call struct {
	s       *Server
	req     *sdk.CallToolRequest
	t       *tool
	a       args
	session string
	elicit  bool
	step    float64 // the last progress value sent
}

// call serves one catalogue tool call: a fresh proposal, the user's choice
// after a clarification this server gave, or the next round of one (the
// user's answer to an input request, carried back with the sealed state).
func (s *Server) call(ctx context.Context, req *sdk.CallToolRequest, t *tool) *sdk.CallToolResult {
	c := &call{s: s, req: req, t: t, session: s.sessions.id(req.Session), elicit: canElicit(req)}
	s.log.Info("mcp: tool call", "tool", t.Name, "session", c.session)
	a, err := t.parse(req.Params.Arguments)
	if err != nil {
		s.log.Info("mcp: bad arguments", "tool", t.Name, "session", c.session)
		return badArguments(strings.TrimPrefix(err.Error(), ErrBadArguments.Error()+": "))
	}
	c.a = a
	if req.Params.RequestState != "" {
		st, err := s.open(req.Params.RequestState, t.Name, a.digest, c.session)
		if err != nil {
			s.log.Info("mcp: request state refused", "tool", t.Name, "session", c.session)
			return errorResult(result{Status: StatusBadRequestState, WhatToDo: "Call the tool again with its arguments only."})
		}
		c.step = st.Progress
		return c.resume(ctx, st)
	}
	var chosen *config.MCPCandidate
	if a.Choice != "" || a.Clarification != "" {
		if chosen, err = c.choice(); err != nil {
			s.log.Info("mcp: choice refused", "tool", t.Name, "session", c.session)
			return badArguments(err.Error())
		}
	}
	return c.propose(ctx, chosen)
}

// choice checks a call's `choice`: the answer to a clarification this
// server gave this session, for this tool, target and payload, naming one
// of the records it offered.
func (c *call) choice() (*config.MCPCandidate, error) {
	a := c.a
	switch {
	case a.Choice == "":
		return nil, errors.New("clarification: only with `choice`, the record the user picked from that clarification's candidates")
	case a.Clarification == "" && c.elicit:
		return nil, errors.New("choice: only as the user's answer to a clarification, which this client's user is asked directly: call again without `choice`, and the user is asked which record they mean")
	case a.Clarification == "":
		return nil, errors.New("choice: only as the answer to a clarification of this server: call again without `choice` (a clarification then lists the records), and pass the user's pick as `choice` with that result's `clarification`")
	}
	offered, err := c.s.openClarification(a.Clarification, c.t, a, c.session)
	if err != nil {
		return nil, errors.New("clarification: not one this server gave in this session for this tool, target and payload, or it expired: call again without `choice` and `clarification`, and the user is asked again")
	}
	i := slices.IndexFunc(offered, func(x config.MCPCandidate) bool { return x.Referent == a.Choice })
	if i < 0 {
		return nil, errors.New("choice: not one of the records the clarification offered: pass the `choice` of one of its candidates, the one the user picked")
	}
	if u := c.t.unique(a.Target); u != nil && u.Referent != a.Choice {
		return nil, errors.New("choice: the target names another record than the choice: call again without `choice` and `clarification`")
	}
	return &offered[i], nil
}

// propose sends a new proposal and answers with where it came to rest.
func (c *call) propose(ctx context.Context, chosen *config.MCPCandidate) *sdk.CallToolResult {
	s := c.s
	p, rec := s.proposal(c.t, c.a, chosen)
	tr, err := s.host.Propose(ctx, p)
	if err != nil {
		return s.sendFailed(p.ProposalID, err)
	}
	defer func() { _ = tr.Stop() }()
	s.log.Info("mcp: proposed", "tool", c.t.Name, "session", c.session, "proposal_id", p.ProposalID, "chosen", chosen != nil)
	o, err := c.follow(ctx, tr, false)
	if err != nil {
		return s.waitFailed(p.ProposalID, err)
	}
	return c.answer(ctx, p, rec, chosen, o, tr)
}

// answer turns a resting outcome into the tool result, and a parked or
// ambiguous proposal into a question for the user.
func (c *call) answer(ctx context.Context, p *schema.Proposal, rec *bound, chosen *config.MCPCandidate, o schema.Outcome, tr *client.Tracker) *sdk.CallToolResult {
	s, t := c.s, c.t
	s.log.Info("mcp: outcome", "tool", t.Name, "session", c.session, "proposal_id", o.ProposalID, "kind", o.Kind, "code", code(o))
	v := view{summary: p.Intent.Display.Summary, record: rec}
	switch o.Kind {
	case schema.KindNeedsApproval:
		if o.Approval == nil || o.Referent == nil {
			break
		}
		bound := t.record(*o.Referent)
		v.record = &bound
		if rec != nil && *o.Referent != rec.Referent {
			// Grounding bound another record than the one the user picked
			// and the display summary names: never approve it.
			s.log.Warn("mcp: grounding bound another record than the proposal names", "tool", t.Name, "session", c.session, "proposal_id", o.ProposalID)
			return pendingResult(o, &bound, "Portcullis bound this action to another record than the one its summary names, so this server did not approve it.")
		}
		if t.Approval == config.MCPApprovePolicy {
			return c.grant(ctx, p, o, tr, bound, schema.MethodPolicy)
		}
		if c.elicit {
			st := state{Tool: t.Name, Digest: c.a.digest, Session: c.session, ProposalID: o.ProposalID, Stage: inputApprove, Bound: *o.Referent}
			if chosen != nil {
				st.Chosen = chosen.Referent
			}
			return c.ask(ctx, st, approvalQuestion(t, bound, c.a, o))
		}
	case schema.KindNeedsClarification:
		if !t.hasChoices || chosen != nil {
			break
		}
		offered := t.choices(c.a.Target)
		v.offered = choices(offered)
		if c.elicit {
			st := state{Tool: t.Name, Digest: c.a.digest, Session: c.session, ProposalID: o.ProposalID, Stage: inputChoose}
			for _, x := range offered {
				st.Offered = append(st.Offered, x.Referent)
			}
			return c.ask(ctx, st, choiceQuestion(c.a.Target, offered, len(t.matches(c.a.Target)) > 1))
		}
		v.clarification = s.clarification(t, c.a, c.session, offered)
	}
	return render(o, v)
}

func choices(cs []config.MCPCandidate) []choice {
	out := make([]choice, len(cs))
	for i, x := range cs {
		out[i] = choice{Choice: x.Referent, Summary: x.Summary}
	}
	return out
}

// grant approves a parked proposal as the host, bound to the fingerprint
// the host computes itself from the proposal and the referent grounding
// chose, then follows it on.
func (c *call) grant(ctx context.Context, p *schema.Proposal, parked schema.Outcome, tr *client.Tracker, rec bound, method string) *sdk.CallToolResult {
	s := c.s
	want, err := client.Fingerprint(p, *parked.Referent)
	if err != nil {
		s.log.Warn("mcp: no fingerprint to approve", "tool", c.t.Name, "session", c.session, "proposal_id", parked.ProposalID, "error", err)
		return pendingResult(parked, &rec, "This server could not check what it would approve, so it did not approve it.")
	}
	opts := client.GrantOptions{Method: method, AuthorizedBy: s.cfg.ActorRef, Assurance: s.cfg.ApproverAssurance,
		Lifetime: s.cfg.GrantLifetime, ExpectFingerprint: want}
	if _, err := s.host.Grant(ctx, parked, opts); err != nil {
		s.log.Warn("mcp: grant not sent", "tool", c.t.Name, "session", c.session, "proposal_id", parked.ProposalID, "error", err)
		return pendingResult(parked, &rec, "The approval could not be delivered; the action is still waiting for approval and was not carried out.")
	}
	s.log.Info("mcp: approved", "tool", c.t.Name, "session", c.session, "proposal_id", parked.ProposalID, "method", method)
	o, err := c.follow(ctx, tr, true)
	if err != nil {
		return s.waitFailed(parked.ProposalID, err)
	}
	return render(o, view{summary: p.Intent.Display.Summary, record: &rec})
}

// resume continues a call with the user's answer to an elicitation.
func (c *call) resume(ctx context.Context, st state) *sdk.CallToolResult {
	s, t := c.s, c.t
	var chosen *config.MCPCandidate
	if st.Chosen != "" {
		if i := slices.IndexFunc(t.Candidates, func(x config.MCPCandidate) bool { return x.Referent == st.Chosen }); i >= 0 {
			chosen = &t.Candidates[i]
		}
	}
	ans := c.req.Params.InputResponses[st.Stage]
	switch st.Stage {
	case inputChoose:
		var offered []config.MCPCandidate
		for _, ref := range st.Offered {
			if i := slices.IndexFunc(t.Candidates, func(x config.MCPCandidate) bool { return x.Referent == ref }); i >= 0 {
				offered = append(offered, t.Candidates[i])
			}
		}
		verdict, content := choiceQuestion(c.a.Target, offered, false).judge(ans)
		pick := (*config.MCPCandidate)(nil)
		if verdict == answerAccepted {
			pick = picked(content, offered)
		}
		s.log.Info("mcp: clarification answered", "tool", t.Name, "session", c.session, "proposal_id", st.ProposalID,
			"answer", verdict.String(), "picked", pick != nil)
		if pick == nil {
			return render(clarificationOf(st.ProposalID), view{offered: choices(offered), asked: true})
		}
		return c.propose(ctx, pick)
	case inputApprove:
		tr, err := s.host.Track(ctx, st.ProposalID)
		if err != nil {
			return s.waitFailed(st.ProposalID, err)
		}
		defer func() { _ = tr.Stop() }()
		parked, err := s.stored(ctx, st.ProposalID)
		if err != nil {
			return s.waitFailed(st.ProposalID, err)
		}
		rec := t.record(st.Bound)
		if parked.Kind != schema.KindNeedsApproval || parked.Referent == nil || *parked.Referent != st.Bound {
			return render(parked, view{record: &rec}) // decided or expired meanwhile
		}
		p, _ := s.proposal(t, c.a, chosen)
		verdict, content := approvalQuestion(t, rec, c.a, parked).judge(ans)
		if verdict == answerAccepted && !approved(content) {
			verdict = answerDeclined // {"approve": false}: the user said no
		}
		s.log.Info("mcp: approval answered", "tool", t.Name, "session", c.session, "proposal_id", st.ProposalID, "answer", verdict.String())
		switch verdict {
		case answerAccepted:
			return c.grant(ctx, p, parked, tr, rec, schema.MethodManual)
		case answerDeclined:
			if _, err := s.host.Decline(ctx, parked, s.cfg.ActorRef); err != nil {
				s.log.Warn("mcp: decline not sent", "tool", t.Name, "session", c.session, "proposal_id", parked.ProposalID, "error", err)
				return pendingResult(parked, &rec, "The decline could not be delivered; the action is still waiting for approval and was not carried out.")
			}
			s.log.Info("mcp: declined", "tool", t.Name, "session", c.session, "proposal_id", parked.ProposalID)
			o, err := c.follow(ctx, tr, true)
			if err != nil {
				return s.waitFailed(parked.ProposalID, err)
			}
			return render(o, view{record: &rec})
		case answerDismissed:
			return pendingResult(parked, &rec, "The user dismissed the approval question. Nothing was done; the action waits for approval until it expires. "+
				"Ask the user; calling this tool again with the same arguments asks again.")
		default:
			return pendingResult(parked, &rec, "The answer to the approval question was not a valid answer (only accepting it with approve set to true approves), "+
				"so nothing was approved: the action waits for approval until it expires. Ask the user; calling this tool again with the same arguments asks again.")
		}
	}
	return errorResult(result{Status: StatusBadRequestState, WhatToDo: "Call the tool again with its arguments only."})
}

// storedWait bounds how long a call waits for an outcome it saw live to
// be stored.
const storedWait = 5 * time.Second

// stored reads the last stored outcome of a proposal this server saw
// parked. An outcome reaches subscribers a moment before the stream has
// stored it, and an answer can come back that fast (a client answering
// without a person): not stored yet is then not "none".
func (s *Server) stored(ctx context.Context, id string) (schema.Outcome, error) {
	deadline := time.Now().Add(storedWait)
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		o, err := s.host.Last(ctx, id)
		if !errors.Is(err, client.ErrNoOutcome) || time.Now().After(deadline) {
			return o, err
		}
		select {
		case <-ctx.Done():
			return o, err
		case <-time.After(wait):
		}
	}
}

// progress sends a progress notification of the call: its value rises
// with every one the call sent (also across its proposals and rounds), and
// every one is written before the call returns its result.
func (c *call) progress(ctx context.Context, msg string) {
	token := c.req.Params.GetProgressToken()
	if token == nil || c.req.Session == nil {
		return
	}
	c.step++
	_ = c.req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: c.step, Message: msg})
}

// follow waits for the proposal to come to rest: a terminal outcome,
// NEEDS_APPROVAL (someone must decide) or RECONCILIATION_REQUIRED (the
// effect is unknown: there is nothing a caller can do but wait). An
// ACKNOWLEDGED outcome is followed on until the configured wait ends.
// Progress notifications go out as outcomes arrive and every
// ProgressEvery while nothing does.
//
// decided is set after a grant or decline: NEEDS_APPROVAL is then the
// outcome before it (a Tracker from Track hands out the stored one first),
// not a resting point.
func (c *call) follow(ctx context.Context, tr *client.Tracker, decided bool) (schema.Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, c.s.cfg.Wait)
	defer cancel()
	c.progress(ctx, "proposed "+tr.ProposalID()+"; waiting for Portcullis")
	var last *schema.Outcome
	for {
		wait, stop := context.WithTimeout(ctx, ProgressEvery)
		o, err := tr.Next(wait)
		stop()
		switch {
		case err == nil:
			last = &o
			c.progress(ctx, string(o.Kind))
			if resting(o) && !(decided && o.Kind == schema.KindNeedsApproval) {
				return o, nil
			}
		case ctx.Err() != nil:
			if last != nil {
				return *last, nil // ACKNOWLEDGED: pending verification
			}
			return schema.Outcome{}, err
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, client.ErrTimeout):
			c.progress(ctx, "still waiting")
		default:
			return schema.Outcome{}, err
		}
	}
}

func resting(o schema.Outcome) bool {
	return o.Terminal || o.Kind == schema.KindNeedsApproval || o.Kind == schema.KindReconciliationRequired
}

func canElicit(req *sdk.CallToolRequest) bool {
	if req.Session == nil {
		return false
	}
	p := req.Session.InitializeParams()
	return p != nil && p.Capabilities != nil && p.Capabilities.Elicitation != nil
}

// ask asks the user. A client of protocol 2026-07-28 or later gets an
// input-required result (multi round-trip requests): it asks the user and
// calls the tool again with the answer and the sealed state. An older
// client is asked here, by an elicitation request within the call, and the
// call goes on with its answer (the SDK would relay only one round).
// Either way, resume judges the answer against the question.
func (c *call) ask(ctx context.Context, st state, q question) *sdk.CallToolResult {
	c.s.log.Info("mcp: asking the user", "tool", c.t.Name, "session", c.session, "proposal_id", st.ProposalID, "question", st.Stage)
	if multiRoundTrip(c.req) {
		st.Progress = c.step
		return &sdk.CallToolResult{InputRequests: sdk.InputRequestMap{st.Stage: q.params}, RequestState: c.s.seal(st)}
	}
	var ans sdk.InputResponse
	if got, err := c.req.Session.Elicit(ctx, q.params); err != nil {
		// A failed elicitation, or an answer the SDK found outside the
		// requested schema: no answer. (The error may quote the answer,
		// which the client wrote: it is not logged.)
		c.s.log.Warn("mcp: elicitation failed or its answer broke the question's schema", "tool", c.t.Name, "session", c.session, "proposal_id", st.ProposalID)
	} else {
		ans = got
	}
	next := *c.req.Params
	next.InputResponses = sdk.InputResponseMap{st.Stage: ans}
	c.req = &sdk.CallToolRequest{Session: c.req.Session, Params: &next, Extra: c.req.Extra}
	return c.resume(ctx, st)
}

// multiRoundTrip reports whether the client speaks multi round-trip
// requests (SEP-2322, protocol 2026-07-28 and later).
func multiRoundTrip(req *sdk.CallToolRequest) bool {
	p := req.Session.InitializeParams()
	return p != nil && p.ProtocolVersion >= "2026-07-28"
}

func clarificationOf(id string) schema.Outcome {
	return schema.Outcome{ProposalID: id, Kind: schema.KindNeedsClarification, Terminal: true, EffectTruth: schema.TruthNotDispatched}
}

func sum(b []byte) []byte { h := sha256.Sum256(b); return h[:] }

// The status tool: the last outcome of one of this server's proposals. It
// only reads; it never approves.
const statusDescription = `The current state of an action proposed earlier through this server, by the proposal_id its result gave. ` +
	`Use it for an action that was pending (waiting for approval, verification, or reconciliation). It only reads: it cannot approve anything.`

var statusSchema = map[string]any{
	"type":                 "object",
	"properties":           map[string]any{"proposal_id": map[string]any{"type": "string", "pattern": `^mcp-[0-9a-f]{24}$`}},
	"required":             []string{"proposal_id"},
	"additionalProperties": false,
}

var proposalIDPattern = regexp.MustCompile(`^mcp-[0-9a-f]{24}$`)

func (s *Server) status(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	session := s.sessions.id(req.Session)
	s.log.Info("mcp: tool call", "tool", config.StatusToolName, "session", session)
	var in struct {
		ProposalID string `json:"proposal_id"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || !proposalIDPattern.MatchString(in.ProposalID) {
		return badArguments("proposal_id: give the proposal_id a result of this server returned (mcp-…)."), nil
	}
	o, err := s.host.Last(ctx, in.ProposalID)
	if errors.Is(err, client.ErrNoOutcome) {
		return errorResult(result{Status: StatusUnknown, ProposalID: in.ProposalID,
			WhatToDo: "No outcome is stored for this proposal (none yet, or it is too old)."}), nil
	}
	if err != nil {
		return s.waitFailed(in.ProposalID, err), nil
	}
	return render(o, view{}), nil
}
