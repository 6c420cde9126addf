package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	sjs "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/schema"
)

// A question is what the user is asked by elicitation, and the only
// answers taken: the schema it requests, checked here on the server
// whatever the client validated (an answer comes back through the client,
// in both protocol styles), closed to any other member.
type question struct {
	params *sdk.ElicitParams
	check  *sjs.Schema
}

// verdict is what an answer decided.
type verdict int

const (
	// answerInvalid: no answer the question allows (the wrong shape, an
	// action nobody defined, a failed elicitation): it decides nothing.
	answerInvalid verdict = iota
	// answerDismissed: the user closed the question without deciding.
	answerDismissed
	// answerDeclined: the user said no.
	answerDeclined
	// answerAccepted: the user said yes, with content the question
	// allows.
	answerAccepted
)

func (v verdict) String() string {
	return [...]string{"invalid", "dismissed", "declined", "accepted"}[v]
}

func newQuestion(message string, requested map[string]any) question {
	q := question{params: &sdk.ElicitParams{Mode: "form", Message: message, RequestedSchema: requested}}
	strict := map[string]any{}
	for k, v := range requested {
		strict[k] = v
	}
	strict["additionalProperties"] = false
	raw, _ := json.Marshal(strict)
	doc, err := sjs.UnmarshalJSON(bytes.NewReader(raw))
	if err == nil {
		c := sjs.NewCompiler()
		if c.AddResource("answer.json", doc) == nil {
			q.check, _ = c.Compile("answer.json")
		}
	}
	return q
}

// judge reads an answer: only "accept" with content the question's schema
// allows (nothing more) is an acceptance; "decline" declines, "cancel"
// dismisses; anything else is invalid.
func (q question) judge(ans sdk.InputResponse) (verdict, map[string]any) {
	er, ok := ans.(*sdk.ElicitResult)
	if !ok || er == nil {
		return answerInvalid, nil
	}
	switch er.Action {
	case "decline":
		return answerDeclined, nil
	case "cancel":
		return answerDismissed, nil
	case "accept":
	default:
		return answerInvalid, nil
	}
	if er.Content == nil || q.check == nil {
		return answerInvalid, nil
	}
	raw, err := json.Marshal(er.Content)
	if err != nil {
		return answerInvalid, nil
	}
	inst, err := sjs.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil || q.check.Validate(inst) != nil {
		return answerInvalid, nil
	}
	return answerAccepted, er.Content
}

// approvalQuestion asks the user to approve exactly the bound record's
// action: the record grounding bound (its summary and referent), the
// operation, the payload's summary fields and any spend — never only the
// model's words.
func approvalQuestion(t *tool, rec bound, a args, o schema.Outcome) question {
	var b strings.Builder
	b.WriteString("Approve this action?\n\n")
	fmt.Fprintf(&b, "%s: %s\n", t.Summary, rec)
	fmt.Fprintf(&b, "operation: %s (%s, provider %s, environment %s)\n", t.Operation, t.Capability, t.Provider, t.Environment)
	if f := t.fields(a.Payload); f != "" {
		for _, part := range strings.Split(f, ", ") {
			b.WriteString(part + "\n")
		}
	}
	if o.Approval != nil && o.Approval.ExternalSpend != nil {
		sp := o.Approval.ExternalSpend
		fmt.Fprintf(&b, "spend: %d minor units of %s\n", sp.AmountMinor, sp.Currency)
	}
	b.WriteString("\nIt will be carried out once, only if you approve.")
	return newQuestion(b.String(), map[string]any{
		"type": "object",
		"properties": map[string]any{"approve": map[string]any{"type": "boolean", "title": "Approve",
			"description": "Approve exactly this action on " + rec.String(), "default": false}},
		"required": []string{"approve"},
	})
}

// approved reads an accepted approval's content: approve is exactly true
// (the schema made it a boolean).
func approved(content map[string]any) bool {
	v, ok := content["approve"].(bool)
	return ok && v
}

// choiceQuestion asks the user which of the offered records they mean;
// each is offered by its label (summary and referent).
func choiceQuestion(target string, offered []config.MCPCandidate, ambiguous bool) question {
	labels := make([]string, len(offered))
	for i, c := range offered {
		labels[i] = bound{Referent: c.Referent, Summary: c.Summary}.String()
	}
	msg := fmt.Sprintf("%s matches no record. Which one do you mean?", quoted(schema.Visible(target)))
	if ambiguous {
		msg = fmt.Sprintf("%s names more than one record. Which one do you mean?", quoted(schema.Visible(target)))
	}
	return newQuestion(msg, map[string]any{
		"type":       "object",
		"properties": map[string]any{"target": map[string]any{"type": "string", "title": "Target", "enum": labels}},
		"required":   []string{"target"},
	})
}

// picked returns the offered record an accepted choice names, or nil.
func picked(content map[string]any, offered []config.MCPCandidate) *config.MCPCandidate {
	label, _ := content["target"].(string)
	for i, c := range offered {
		if (bound{Referent: c.Referent, Summary: c.Summary}).String() == label {
			return &offered[i]
		}
	}
	return nil
}
