package mcp

import (
	"errors"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/client"
	"github.com/portcullis/portcullis/schema"
)

// result is the structured content of every tool result: what a model
// reads. Status is one closed word per situation (the README's table);
// WhatToDo says, in a sentence for a model, what it may do next.
type result struct {
	Status      string   `json:"status"`
	Kind        string   `json:"kind,omitempty"`
	EffectTruth string   `json:"effect_truth,omitempty"`
	Terminal    bool     `json:"terminal"`
	ProposalID  string   `json:"proposal_id,omitempty"`
	Code        string   `json:"code,omitempty"`
	Phase       string   `json:"phase,omitempty"`
	ReceiptID   string   `json:"receipt_id,omitempty"`
	Summary     string   `json:"summary,omitempty"`
	Candidates  []choice `json:"candidates,omitempty"`
	WhatToDo    string   `json:"what_to_do"`
}

// choice is one candidate a clarification offers: what to show the user,
// and what to pass back as `choice` once the user picked it.
type choice struct {
	Choice  string `json:"choice"`
	Summary string `json:"summary"`
}

// Statuses.
const (
	StatusConfirmed          = "confirmed"
	StatusVerifying          = "accepted_pending_verification"
	StatusNeedsClarification = "needs_clarification"
	StatusPendingApproval    = "pending_approval"
	StatusDenied             = "denied"
	StatusRejected           = "rejected"
	StatusFailed             = "failed"
	StatusEffectUnknown      = "effect_unknown"
)

func code(o schema.Outcome) string {
	if len(o.Incidents) == 0 {
		return ""
	}
	return string(o.Incidents[len(o.Incidents)-1].Code)
}

// render maps an outcome for a model. t is nil for the status tool (no
// candidates to offer).
func (s *Server) render(t *tool, a args, o schema.Outcome, elicited bool) *sdk.CallToolResult {
	r := result{Kind: string(o.Kind), EffectTruth: string(o.EffectTruth), Terminal: o.Terminal, ProposalID: o.ProposalID, Code: code(o)}
	if len(o.Incidents) > 0 {
		r.Phase = string(o.Incidents[len(o.Incidents)-1].Phase)
	}
	if o.Receipt != nil {
		r.ReceiptID = o.Receipt.ReceiptID
	}
	if o.Approval != nil {
		r.Summary = o.Approval.Summary
	}
	isError := false
	switch o.Kind {
	case schema.KindConfirmed:
		r.Status = StatusConfirmed
		r.WhatToDo = "Done: the effect exists (receipt " + r.ReceiptID + "). Tell the user. Do not call again for the same action: it would be answered with this same receipt."
	case schema.KindAcknowledged:
		r.Status = StatusVerifying
		r.WhatToDo = "The provider accepted the action; its effect is being verified. Do not call again. Check later with " + statusTool + "."
	case schema.KindNeedsApproval:
		r.Status = StatusPendingApproval
		r.WhatToDo = "Nothing was done yet: the action waits for a person to approve it, and you cannot approve it. " +
			"Tell the user it needs their approval; check later with " + statusTool + "."
	case schema.KindNeedsClarification:
		r.Status = StatusNeedsClarification
		r.WhatToDo = clarify(t, a, &r, elicited)
	case schema.KindReconciliationRequired:
		r.Status = StatusEffectUnknown
		r.WhatToDo = "The effect is UNKNOWN: the action may or may not have happened, and Portcullis is finding out from the provider. " +
			"Do NOT call this tool again for it (it would not be carried out twice, and would only report this again). " +
			"Tell the user the outcome is unknown; check later with " + statusTool + "."
		if o.Terminal {
			r.WhatToDo = "The effect is UNKNOWN and automatic checks gave up: an operator has to establish what happened. " +
				"Do NOT call this tool again for it. Tell the user."
		}
	case schema.KindDenied:
		r.Status, isError = StatusDenied, true
		r.WhatToDo = denied(schema.Code(r.Code))
	case schema.KindRejected:
		r.Status, isError = StatusRejected, true
		r.WhatToDo = "The provider declined the action; it had no effect. Do not retry the same action; tell the user."
	case schema.KindFailedBeforeDispatch:
		r.Status, isError = StatusFailed, true
		r.WhatToDo = "The provider could not be reached; nothing was done. You may try again later if the user still wants it."
	case schema.KindIntegrationFailure:
		r.Status, isError = StatusFailed, true
		r.WhatToDo = "A system Portcullis depends on failed or the proposal was malformed; nothing was done. Tell the user; an operator may need to look."
	default:
		r.Status, isError = StatusFailed, true
		r.WhatToDo = "Unexpected outcome; nothing is known to have been done."
	}
	text := fmt.Sprintf("%s (%s", r.Status, o.Kind)
	if r.Code != "" {
		text += " " + r.Code
	}
	text += ")"
	if r.ProposalID != "" {
		text += ", proposal " + r.ProposalID
	}
	text += ". " + r.WhatToDo
	for _, c := range r.Candidates {
		text += fmt.Sprintf("\n- %s (choice: %s)", c.Summary, c.Choice)
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}, StructuredContent: r, IsError: isError}
}

const statusTool = "portcullis_status with this proposal_id"

func clarify(t *tool, a args, r *result, elicited bool) string {
	if t == nil || !t.hasChoices {
		return "Nothing was done: the target did not match exactly one record. Ask the user to name the target exactly, then call again with their words as `target`."
	}
	for _, c := range t.choices(a.Target) {
		r.Candidates = append(r.Candidates, choice{Choice: c.Referent, Summary: c.Summary})
	}
	if elicited {
		return "Nothing was done: the user did not pick a target. Ask the user which one they mean, then call again with the same arguments and `choice` set to the one THEY picked."
	}
	return "Nothing was done: the target matches no single record. Show the user these candidates and ask which one they mean; " +
		"then call again with the same arguments and `choice` set to the choice THEY picked. Never pick one yourself."
}

func denied(c schema.Code) string {
	switch {
	case c == schema.CodeApprovalDeclined:
		return "The user declined this action; nothing was done. Do not try again unless the user asks for it anew."
	case c == schema.CodeApprovalTimedOut:
		return "Nobody approved the action in time; nothing was done. Call again only if the user still wants it."
	case strings.HasPrefix(string(c), "ADMISSION_") || c == schema.CodeGroundingScopeMismatch:
		return "Portcullis refused the proposal itself (this server's configuration does not fit the processor's); nothing was done. Tell the user; an operator must fix it. Do not retry."
	case strings.Contains(string(c), "DISCLOSURE"):
		return "The personal data this action needs was not released; nothing was done. Tell the user."
	default:
		return "Policy does not allow this action; nothing was done. Do not retry; tell the user which rule refused it (" + string(c) + ")."
	}
}

func errorResult(r result) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: r.Status + ": " + r.WhatToDo}}, StructuredContent: r, IsError: true}
}

func pendingResult(o schema.Outcome, what string) *sdk.CallToolResult {
	r := result{Status: StatusPendingApproval, Kind: string(o.Kind), EffectTruth: string(o.EffectTruth), ProposalID: o.ProposalID,
		WhatToDo: what + " Check later with " + statusTool + "."}
	if o.Approval != nil {
		r.Summary = o.Approval.Summary
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: r.Status + ", proposal " + r.ProposalID + ". " + r.WhatToDo}}, StructuredContent: r}
}

// sendFailed answers a proposal that could not be sent. A timeout is an
// unknown: it may have been stored, and its outcome may still come.
func (s *Server) sendFailed(id string, err error) *sdk.CallToolResult {
	s.log.Warn("mcp: propose failed", "proposal_id", id, "error", err)
	if errors.Is(err, client.ErrTimeout) {
		return &sdk.CallToolResult{StructuredContent: result{Status: "unknown", ProposalID: id,
			WhatToDo: "Portcullis did not confirm receiving the proposal in time: it may or may not have been received. Do not call again; check with " + statusTool + "."},
			Content: []sdk.Content{&sdk.TextContent{Text: "unknown: the proposal " + id + " may or may not have been received. Do not call again; check with " + statusTool + "."}}}
	}
	r := result{Status: StatusFailed, ProposalID: id, WhatToDo: "The proposal could not be sent; nothing was done. Tell the user Portcullis is unavailable."}
	return errorResult(r)
}

// waitFailed answers a call whose proposal was sent but whose outcome this
// server could not read: it says so, and how to follow it.
func (s *Server) waitFailed(id string, err error) *sdk.CallToolResult {
	s.log.Warn("mcp: no outcome", "proposal_id", id, "error", err)
	r := result{Status: "unknown", ProposalID: id,
		WhatToDo: "The proposal was sent but no outcome arrived in time. Do not call again; check with " + statusTool + "."}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "unknown, proposal " + id + ". " + r.WhatToDo}}, StructuredContent: r}
}
