// Package mcp serves a catalogue of Portcullis actions to an agent as MCP
// tools (SPEC §7): `processor mcp`. The server is a host (SPEC §2.7, §2.8):
// it proposes on its host's subjects with its host's key and reads only its
// own outcomes. The model it serves is untrusted input: its arguments give a
// target in the user's words and a payload, validated against the tool's
// schema; the trusted context comes from configuration. A clarification or
// an approval is asked of the user by MCP elicitation, and only the user's
// answer becomes the next proposal's chosen candidate or the host's grant or
// decline. No tool grants.
//
// It owns the MCP tools, their schemas and what the model is told. It
// speaks to the processor as a host does, through the client package, and
// imports no store and no engine.
package mcp

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/client"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/version"
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
	// Log receives value-free lines (tool, proposal id, kind, code).
	Log *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Server is the MCP server of one host.
type Server struct {
	cfg   *config.MCP
	host  *client.Host
	tools map[string]*tool
	key   []byte // seals request states: they come back through the client
	log   *slog.Logger
	sdk   *sdk.Server
}

// New builds the server. host proposes, grants and declines as the
// configured host (client.NewHost on a connection made with its key).
func New(cfg *config.MCP, host *client.Host, opts Options) (*Server, error) {
	if cfg == nil || host == nil {
		return nil, errors.New("mcp: a configuration and a host are required")
	}
	s := &Server{cfg: cfg, host: host, tools: map[string]*tool{}, log: opts.Log, key: make([]byte, 32)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if _, err := rand.Read(s.key); err != nil {
		return nil, err
	}
	s.sdk = sdk.NewServer(&sdk.Implementation{Name: "portcullis", Title: "Portcullis", Version: version.Get().Version},
		&sdk.ServerOptions{Instructions: instructions, Logger: s.log})
	for _, tc := range cfg.Tools {
		t, err := newTool(tc)
		if err != nil {
			return nil, err
		}
		s.tools[t.Name] = t
		destructive := true
		s.sdk.AddTool(&sdk.Tool{Name: t.Name, Description: t.description, InputSchema: t.input,
			Annotations: &sdk.ToolAnnotations{DestructiveHint: &destructive, OpenWorldHint: &destructive}},
			func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				return s.call(ctx, req, t), nil
			})
	}
	s.sdk.AddTool(&sdk.Tool{Name: config.StatusToolName, Description: statusDescription, InputSchema: statusSchema,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, s.status)
	return s, nil
}

// MCP is the SDK server, to run on a transport.
func (s *Server) MCP() *sdk.Server { return s.sdk }

const instructions = `Portcullis guards consequential actions. Each tool call is a proposal: it is bound to exactly one target, ` +
	`checked, approved by the user when needed, and carried out at most once. Read each result's "status" and "what_to_do". ` +
	`Never retry an action whose effect is unknown. Never choose a target or approve on the user's behalf.`

// call serves one catalogue tool call: a fresh proposal, or the next round
// of one (the user's answer to an elicitation, carried back with the
// sealed request state).
func (s *Server) call(ctx context.Context, req *sdk.CallToolRequest, t *tool) *sdk.CallToolResult {
	a, err := t.parse(req.Params.Arguments)
	if err != nil {
		s.log.Info("mcp: bad arguments", "tool", t.Name)
		return errorResult(result{Status: "bad_arguments", WhatToDo: strings.TrimPrefix(err.Error(), ErrBadArguments.Error()+": ") +
			" Nothing was sent."})
	}
	if req.Params.RequestState != "" {
		st, err := s.open(req.Params.RequestState, t.Name, a.digest, sessionID(req))
		if err != nil {
			return errorResult(result{Status: "bad_request_state", WhatToDo: "Call the tool again with its arguments only."})
		}
		return s.resume(ctx, req, t, a, st)
	}
	var chosen *config.MCPCandidate
	if a.Choice != "" {
		i := slices.IndexFunc(t.Candidates, func(c config.MCPCandidate) bool { return c.Referent == a.Choice })
		chosen = &t.Candidates[i]
	}
	return s.propose(ctx, req, t, a, chosen)
}

// propose sends a new proposal and answers with where it came to rest.
func (s *Server) propose(ctx context.Context, req *sdk.CallToolRequest, t *tool, a args, chosen *config.MCPCandidate) *sdk.CallToolResult {
	p := s.proposal(t, a, chosen)
	tr, err := s.host.Propose(ctx, p)
	if err != nil {
		return s.sendFailed(p.ProposalID, err)
	}
	defer func() { _ = tr.Stop() }()
	s.log.Info("mcp: proposed", "tool", t.Name, "proposal_id", p.ProposalID)
	o, err := s.follow(ctx, req, tr, false)
	if err != nil {
		return s.waitFailed(p.ProposalID, err)
	}
	return s.answer(ctx, req, t, a, p, chosen, o, tr)
}

// answer turns a resting outcome into the tool result, and a parked or
// ambiguous proposal into a question for the user.
func (s *Server) answer(ctx context.Context, req *sdk.CallToolRequest, t *tool, a args, p *schema.Proposal,
	chosen *config.MCPCandidate, o schema.Outcome, tr *client.Tracker) *sdk.CallToolResult {
	s.log.Info("mcp: outcome", "tool", t.Name, "proposal_id", o.ProposalID, "kind", o.Kind, "code", code(o))
	elicit := canElicit(req)
	switch o.Kind {
	case schema.KindNeedsApproval:
		if o.Approval == nil || o.Referent == nil {
			break
		}
		if t.Approval == config.MCPApprovePolicy {
			return s.grant(ctx, req, t, a, p, o, tr, client.GrantOptions{Method: schema.MethodPolicy})
		}
		if elicit {
			st := state{Tool: t.Name, Digest: a.digest, Session: sessionID(req), ProposalID: o.ProposalID, Stage: inputApprove}
			if chosen != nil {
				st.Chosen = chosen.Referent
			}
			return s.ask(ctx, req, t, a, st, approvalQuestion(o))
		}
	case schema.KindNeedsClarification:
		if t.hasChoices && chosen == nil && a.Choice == "" && elicit {
			st := state{Tool: t.Name, Digest: a.digest, Session: sessionID(req), ProposalID: o.ProposalID, Stage: inputChoose}
			return s.ask(ctx, req, t, a, st, choiceQuestion(a.Target, t.choices(a.Target)))
		}
	}
	return s.render(t, a, o, elicit)
}

// grant approves a parked proposal as the host, bound to the fingerprint
// the host computes itself from the proposal and the referent grounding
// chose, then follows it on.
func (s *Server) grant(ctx context.Context, req *sdk.CallToolRequest, t *tool, a args, p *schema.Proposal,
	parked schema.Outcome, tr *client.Tracker, opts client.GrantOptions) *sdk.CallToolResult {
	want, err := client.Fingerprint(p, *parked.Referent)
	if err != nil {
		s.log.Warn("mcp: no fingerprint to approve", "tool", t.Name, "proposal_id", parked.ProposalID, "error", err)
		return pendingResult(parked, "This server could not check what it would approve, so it did not approve it.")
	}
	opts.AuthorizedBy = s.cfg.ActorRef
	opts.Assurance = s.cfg.ApproverAssurance
	opts.Lifetime = s.cfg.GrantLifetime
	opts.ExpectFingerprint = want
	if _, err := s.host.Grant(ctx, parked, opts); err != nil {
		s.log.Warn("mcp: grant not sent", "tool", t.Name, "proposal_id", parked.ProposalID, "error", err)
		return pendingResult(parked, "The approval could not be delivered; the action is still waiting for approval and was not carried out.")
	}
	o, err := s.follow(ctx, req, tr, true)
	if err != nil {
		return s.waitFailed(parked.ProposalID, err)
	}
	return s.render(t, a, o, canElicit(req))
}

// resume continues a call with the user's answer to an elicitation.
func (s *Server) resume(ctx context.Context, req *sdk.CallToolRequest, t *tool, a args, st state) *sdk.CallToolResult {
	ans, _ := req.Params.InputResponses[st.Stage].(*sdk.ElicitResult)
	action, content := "cancel", map[string]any(nil)
	if ans != nil {
		action, content = ans.Action, ans.Content
	}
	var chosen *config.MCPCandidate
	if st.Chosen != "" {
		if i := slices.IndexFunc(t.Candidates, func(c config.MCPCandidate) bool { return c.Referent == st.Chosen }); i >= 0 {
			chosen = &t.Candidates[i]
		}
	}
	switch st.Stage {
	case inputChoose:
		pick, _ := content["target"].(string)
		i := slices.IndexFunc(t.Candidates, func(c config.MCPCandidate) bool { return c.Summary == pick })
		if action != "accept" || i < 0 {
			return s.render(t, a, clarificationOf(st.ProposalID), true)
		}
		return s.propose(ctx, req, t, a, &t.Candidates[i])
	case inputApprove:
		tr, err := s.host.Track(ctx, st.ProposalID)
		if err != nil {
			return s.waitFailed(st.ProposalID, err)
		}
		defer func() { _ = tr.Stop() }()
		parked, err := s.host.Last(ctx, st.ProposalID)
		if err != nil {
			return s.waitFailed(st.ProposalID, err)
		}
		if parked.Kind != schema.KindNeedsApproval || parked.Referent == nil {
			return s.render(t, a, parked, false) // decided or expired meanwhile
		}
		approve, hasApprove := content["approve"].(bool)
		switch {
		case action == "accept" && (approve || !hasApprove):
			p := s.proposal(t, a, chosen)
			return s.grant(ctx, req, t, a, p, parked, tr, client.GrantOptions{Method: schema.MethodManual})
		case action == "decline" || action == "accept":
			if _, err := s.host.Decline(ctx, parked, s.cfg.ActorRef); err != nil {
				s.log.Warn("mcp: decline not sent", "tool", t.Name, "proposal_id", parked.ProposalID, "error", err)
				return pendingResult(parked, "The decline could not be delivered; the action is still waiting for approval and was not carried out.")
			}
			o, err := s.follow(ctx, req, tr, true)
			if err != nil {
				return s.waitFailed(parked.ProposalID, err)
			}
			return s.render(t, a, o, false)
		default: // the user dismissed the question
			return pendingResult(parked, "The user dismissed the approval question. Nothing was done; the action waits for approval until it expires. "+
				"Ask the user; calling this tool again with the same arguments asks again.")
		}
	}
	return errorResult(result{Status: "bad_request_state", WhatToDo: "Call the tool again with its arguments only."})
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
func (s *Server) follow(ctx context.Context, req *sdk.CallToolRequest, tr *client.Tracker, decided bool) (schema.Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Wait)
	defer cancel()
	token := req.Params.GetProgressToken()
	step := 0.0
	progress := func(msg string) {
		if token == nil || req.Session == nil {
			return
		}
		step++
		_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: step, Message: msg})
	}
	progress("proposed " + tr.ProposalID() + "; waiting for Portcullis")
	var last *schema.Outcome
	for {
		wait, stop := context.WithTimeout(ctx, ProgressEvery)
		o, err := tr.Next(wait)
		stop()
		switch {
		case err == nil:
			last = &o
			progress(string(o.Kind))
			if resting(o) && !(decided && o.Kind == schema.KindNeedsApproval) {
				return o, nil
			}
		case ctx.Err() != nil:
			if last != nil {
				return *last, nil // ACKNOWLEDGED: pending verification
			}
			return schema.Outcome{}, err
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, client.ErrTimeout):
			progress("still waiting")
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

func sessionID(req *sdk.CallToolRequest) string {
	if req.Session == nil {
		return ""
	}
	return req.Session.ID()
}

// ask asks the user. A client of protocol 2026-07-28 or later gets an
// input-required result (multi round-trip requests): it asks the user and
// calls the tool again with the answer and the sealed state. An older
// client is asked here, by an elicitation request within the call, and the
// call goes on with its answer (the SDK would relay only one round).
func (s *Server) ask(ctx context.Context, req *sdk.CallToolRequest, t *tool, a args, st state, q *sdk.ElicitParams) *sdk.CallToolResult {
	if multiRoundTrip(req) {
		return &sdk.CallToolResult{InputRequests: sdk.InputRequestMap{st.Stage: q}, RequestState: s.seal(st)}
	}
	ans, err := req.Session.Elicit(ctx, q)
	if err != nil {
		s.log.Warn("mcp: elicitation failed", "tool", t.Name, "proposal_id", st.ProposalID, "error", err)
		ans = &sdk.ElicitResult{Action: "cancel"}
	}
	next := *req.Params
	next.InputResponses = sdk.InputResponseMap{st.Stage: ans}
	return s.resume(ctx, &sdk.CallToolRequest{Session: req.Session, Params: &next, Extra: req.Extra}, t, a, st)
}

// multiRoundTrip reports whether the client speaks multi round-trip
// requests (SEP-2322, protocol 2026-07-28 and later).
func multiRoundTrip(req *sdk.CallToolRequest) bool {
	p := req.Session.InitializeParams()
	return p != nil && p.ProtocolVersion >= "2026-07-28"
}

func approvalQuestion(o schema.Outcome) *sdk.ElicitParams {
	msg := "Approve this action?\n\n" + o.Approval.Summary
	if sp := o.Approval.ExternalSpend; sp != nil {
		msg += fmt.Sprintf("\nSpend: %d minor units of %s", sp.AmountMinor, sp.Currency)
	}
	msg += "\n\nIt will be carried out once if you approve."
	return &sdk.ElicitParams{Mode: "form", Message: msg, RequestedSchema: map[string]any{
		"type": "object",
		"properties": map[string]any{"approve": map[string]any{"type": "boolean", "title": "Approve",
			"description": "Approve exactly this action", "default": false}},
		"required": []string{"approve"},
	}}
}

func choiceQuestion(target string, cs []config.MCPCandidate) *sdk.ElicitParams {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Summary
	}
	return &sdk.ElicitParams{Mode: "form", Message: fmt.Sprintf("%q matches no single target. Which one do you mean?", target),
		RequestedSchema: map[string]any{
			"type":       "object",
			"properties": map[string]any{"target": map[string]any{"type": "string", "title": "Target", "enum": names}},
			"required":   []string{"target"},
		}}
}

func clarificationOf(id string) schema.Outcome {
	return schema.Outcome{ProposalID: id, Kind: schema.KindNeedsClarification, Terminal: true, EffectTruth: schema.TruthNotDispatched}
}

// state is what a call needs to continue after an elicitation. It travels
// through the client, sealed: bound to the tool, the exact arguments and the
// session, so that no other call can use it.
type state struct {
	Tool       string `json:"t"`
	Digest     string `json:"d"`
	Session    string `json:"s"`
	ProposalID string `json:"p"`
	Stage      string `json:"g"`
	Chosen     string `json:"c,omitempty"`
	Expires    int64  `json:"e"`
}

// errBadState: a request state this server did not make for this call.
var errBadState = errors.New("mcp: the request state is not this server's state for this call")

const stateLifetime = 30 * time.Minute

func (s *Server) seal(st state) string {
	st.Expires = time.Now().Add(stateLifetime).Unix()
	body, _ := json.Marshal(st)
	m := hmac.New(sha256.New, s.key)
	m.Write(body)
	return base64.RawURLEncoding.EncodeToString(body) + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (s *Server) open(sealed, toolName, argDigest, session string) (state, error) {
	body64, mac64, ok := strings.Cut(sealed, ".")
	body, err1 := base64.RawURLEncoding.DecodeString(body64)
	mac, err2 := base64.RawURLEncoding.DecodeString(mac64)
	if !ok || err1 != nil || err2 != nil {
		return state{}, errBadState
	}
	m := hmac.New(sha256.New, s.key)
	m.Write(body)
	var st state
	if !hmac.Equal(mac, m.Sum(nil)) || json.Unmarshal(body, &st) != nil {
		return state{}, errBadState
	}
	if st.Tool != toolName || st.Digest != argDigest || st.Session != session || time.Now().Unix() > st.Expires {
		return state{}, errBadState
	}
	return st, nil
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
	var in struct {
		ProposalID string `json:"proposal_id"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || !proposalIDPattern.MatchString(in.ProposalID) {
		return errorResult(result{Status: "bad_arguments", WhatToDo: "proposal_id: give the proposal_id a result of this server returned (mcp-…)."}), nil
	}
	o, err := s.host.Last(ctx, in.ProposalID)
	if errors.Is(err, client.ErrNoOutcome) {
		return errorResult(result{Status: "unknown", ProposalID: in.ProposalID,
			WhatToDo: "No outcome is stored for this proposal (none yet, or it is too old)."}), nil
	}
	if err != nil {
		return s.waitFailed(in.ProposalID, err), nil
	}
	return s.render(nil, args{}, o, false), nil
}
