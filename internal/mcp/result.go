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
// reads. Status is one closed word per situation (docs/agents.md's table);
// WhatToDo says, in a sentence for a model, what it may do next. Every
// result of every path conforms to OutputSchema.
type result struct {
	Status      string `json:"status"`
	Kind        string `json:"kind,omitempty"`
	EffectTruth string `json:"effect_truth,omitempty"`
	Terminal    bool   `json:"terminal"`
	ProposalID  string `json:"proposal_id,omitempty"`
	Code        string `json:"code,omitempty"`
	Phase       string `json:"phase,omitempty"`
	ReceiptID   string `json:"receipt_id,omitempty"`
	// RecordedEarlier: the receipt is of an earlier proposal of the same
	// intent (PROTOCOL.md §2.4): this call did not cause the effect.
	RecordedEarlier bool `json:"recorded_earlier,omitzero"`
	// Summary is the proposal's display summary: the bound record, the
	// operation's summary and the payload's summary fields.
	Summary string `json:"summary,omitempty"`
	// Record is the record the action is bound to (grounding's referent,
	// with its candidate's summary), once known.
	Record *resultRecord `json:"record,omitempty"`
	// Candidates and Clarification: a clarification's offered choices
	// and, without elicitation, the token the next call must carry.
	Candidates    []choice `json:"candidates,omitempty"`
	Clarification string   `json:"clarification,omitempty"`
	WhatToDo      string   `json:"what_to_do"`
}

// resultRecord names the bound record.
type resultRecord struct {
	Referent string `json:"referent"`
	Summary  string `json:"summary,omitempty"`
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
	StatusUnknown            = "unknown"
	StatusBadArguments       = "bad_arguments"
	StatusBadRequestState    = "bad_request_state"
)

// Statuses lists every status a result may carry.
func Statuses() []string {
	return []string{StatusConfirmed, StatusVerifying, StatusNeedsClarification, StatusPendingApproval, StatusDenied, StatusRejected,
		StatusFailed, StatusEffectUnknown, StatusUnknown, StatusBadArguments, StatusBadRequestState}
}

// OutputSchema is the JSON Schema every tool declares as its outputSchema
// and every result's structured content conforms to. It is closed
// (additionalProperties false): a member added to result is added here.
func OutputSchema() map[string]any {
	str := func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	kinds := []any{}
	for _, k := range schema.Kinds() {
		kinds = append(kinds, string(k))
	}
	statuses := []any{}
	for _, s := range Statuses() {
		statuses = append(statuses, s)
	}
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"status":       map[string]any{"type": "string", "enum": statuses, "description": "where the action came to rest, in one word"},
			"kind":         map[string]any{"type": "string", "enum": kinds, "description": "the outcome kind (PROTOCOL.md §2.4)"},
			"effect_truth": map[string]any{"type": "string", "enum": []any{"NOT_DISPATCHED", "UNVERIFIED", "PRESENT", "ABSENT", "INDETERMINATE"}},
			"terminal":     map[string]any{"type": "boolean", "description": "no later outcome will change this one"},
			"proposal_id":  map[string]any{"type": "string", "pattern": "^[A-Za-z0-9_:-]{1,128}$", "description": "follow it with portcullis_status"},
			"code":         str("the closed incident code, when the outcome has one"),
			"phase":        str("the phase of that incident"),
			"receipt_id":   str("the provider receipt"),
			"recorded_earlier": map[string]any{"type": "boolean", "const": true,
				"description": "present when the receipt is of an earlier proposal of the same action: this call did not cause the effect, an earlier one did"},
			"summary": str("what the action does: the record it is bound to, the operation and the payload's summary fields"),
			"record": map[string]any{
				"type":                 "object",
				"description":          "the record the action is bound to",
				"properties":           map[string]any{"referent": str("the record's id"), "summary": str("how the user knows it")},
				"required":             []any{"referent"},
				"additionalProperties": false,
			},
			"candidates": map[string]any{
				"type":        "array",
				"description": "the records a clarification offers; show the summaries to the user",
				"items": map[string]any{
					"type":                 "object",
					"properties":           map[string]any{"choice": str("pass it as `choice` once the USER picked it"), "summary": str("what the user chooses by")},
					"required":             []any{"choice", "summary"},
					"additionalProperties": false,
				},
			},
			"clarification": str("pass it unchanged as `clarification` with the user's `choice`, the same target and the same payload"),
			"what_to_do":    str("what to do next, for a model"),
		},
		"required":             []any{"status", "terminal", "what_to_do"},
		"additionalProperties": false,
	}
}

func code(o schema.Outcome) string {
	if len(o.Incidents) == 0 {
		return ""
	}
	return string(o.Incidents[len(o.Incidents)-1].Code)
}

// view is what a result shows beyond the outcome: the record and summary
// of the call, and a clarification's offer.
type view struct {
	summary       string
	record        *bound
	offered       []choice
	clarification string
	// asked: the user was asked (by elicitation) and did not answer with
	// a choice.
	asked bool
}

// render maps an outcome for a model.
func render(o schema.Outcome, v view) *sdk.CallToolResult {
	r := result{Kind: string(o.Kind), EffectTruth: string(o.EffectTruth), Terminal: o.Terminal, ProposalID: o.ProposalID, Code: code(o),
		Summary: v.summary}
	if len(o.Incidents) > 0 {
		r.Phase = string(o.Incidents[len(o.Incidents)-1].Phase)
	}
	if o.Receipt != nil {
		r.ReceiptID = o.Receipt.ReceiptID
	}
	r.RecordedEarlier = o.RecordedEarlier
	if o.Approval != nil {
		r.Summary = o.Approval.Summary
	}
	rec := v.record
	if o.Referent != nil && (rec == nil || rec.Referent != *o.Referent) {
		rec = &bound{Referent: *o.Referent}
	}
	if rec != nil {
		r.Record = &resultRecord{Referent: rec.Referent, Summary: rec.Summary}
	}
	isError := false
	switch o.Kind {
	case schema.KindConfirmed:
		r.Status = StatusConfirmed
		r.WhatToDo = "Done: the effect exists (receipt " + r.ReceiptID + "). Tell the user" + onRecord(rec) + ". Do not call again for the same action: it would be answered with this same receipt."
		if o.RecordedEarlier {
			r.WhatToDo = "Already done: an earlier request for the same action caused this effect (receipt " + r.ReceiptID + "); this call did not do it again. " +
				"Tell the user it had already happened" + onRecord(rec) + ". Do not call again for it."
		}
	case schema.KindAcknowledged:
		r.Status = StatusVerifying
		r.WhatToDo = "The provider accepted the action" + onRecord(rec) + "; its effect is being verified. Do not call again. Check later with " + statusTool + "."
	case schema.KindNeedsApproval:
		r.Status = StatusPendingApproval
		r.WhatToDo = "Nothing was done yet: the action" + onRecord(rec) + " waits for a person to approve it, and you cannot approve it. " +
			"Tell the user it needs their approval; check later with " + statusTool + "."
	case schema.KindNeedsClarification:
		r.Status = StatusNeedsClarification
		r.Candidates, r.Clarification = v.offered, v.clarification
		r.WhatToDo = clarify(v)
	case schema.KindReconciliationRequired:
		r.Status = StatusEffectUnknown
		r.WhatToDo = "The effect is UNKNOWN: the action" + onRecord(rec) + " may or may not have happened, and Portcullis is finding out from the provider. " +
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
	if r.Summary != "" {
		text += ": " + r.Summary
	}
	text += ". " + r.WhatToDo
	for _, c := range r.Candidates {
		text += fmt.Sprintf("\n- %s (choice: %s)", c.Summary, c.Choice)
	}
	if r.Clarification != "" {
		text += "\nclarification: " + r.Clarification
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}, StructuredContent: r, IsError: isError}
}

func onRecord(rec *bound) string {
	if rec == nil {
		return ""
	}
	return " on " + rec.String()
}

const statusTool = "portcullis_status with this proposal_id"

func clarify(v view) string {
	switch {
	case len(v.offered) == 0:
		return "Nothing was done: the target did not match exactly one record. Ask the user to name the target exactly, then call again with their words as `target`."
	case v.asked:
		return "Nothing was done: the user was asked which record they mean and did not pick one of those offered. " +
			"Ask the user what they want; calling again with the same arguments asks them again."
	}
	return "Nothing was done: the target matches no single record. Show the user these candidates and ask which one they mean; " +
		"then call again with the same target and payload, `choice` set to the choice THEY picked and `clarification` set to this result's clarification. " +
		"Never pick one yourself."
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

// badArguments refuses a call before anything is sent.
func badArguments(what string) *sdk.CallToolResult {
	return errorResult(result{Status: StatusBadArguments, WhatToDo: what + " Nothing was sent."})
}

// pendingResult: the action is parked, and what happened to its question.
func pendingResult(o schema.Outcome, rec *bound, what string) *sdk.CallToolResult {
	r := result{Status: StatusPendingApproval, Kind: string(o.Kind), EffectTruth: string(o.EffectTruth), ProposalID: o.ProposalID,
		WhatToDo: what + " Check later with " + statusTool + "."}
	if o.Approval != nil {
		r.Summary = o.Approval.Summary
	}
	if rec != nil {
		r.Record = &resultRecord{Referent: rec.Referent, Summary: rec.Summary}
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: r.Status + ", proposal " + r.ProposalID + ". " + r.WhatToDo}}, StructuredContent: r}
}

// sendFailed answers a proposal that could not be sent. A timeout is an
// unknown: it may have been stored, and its outcome may still come.
func (s *Server) sendFailed(id string, err error) *sdk.CallToolResult {
	s.log.Warn("mcp: propose failed", "proposal_id", id, "error", err)
	if errors.Is(err, client.ErrTimeout) {
		return &sdk.CallToolResult{StructuredContent: result{Status: StatusUnknown, ProposalID: id,
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
	r := result{Status: StatusUnknown, ProposalID: id,
		WhatToDo: "The proposal was sent but no outcome arrived in time. Do not call again; check with " + statusTool + "."}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "unknown, proposal " + id + ". " + r.WhatToDo}}, StructuredContent: r}
}
