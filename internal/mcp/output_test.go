package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"

	sjs "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/portcullis/portcullis/client"
	"github.com/portcullis/portcullis/schema"
)

// Every result of every path conforms to the outputSchema every tool
// declares: each outcome kind (terminal or not, with an incident, a
// receipt, an approval, a referent), a clarification offered with and
// without its token, and the results that come from no outcome (bad
// arguments, a refused state, a send or wait that failed, a pending
// approval whose question got no valid answer). The end-to-end tests
// check every result they get against the listed tool's schema too.
func TestEveryResultConforms(t *testing.T) {
	raw, _ := json.Marshal(OutputSchema())
	doc, err := sjs.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := sjs.NewCompiler()
	if err := c.AddResource("output.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("output.json")
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string, structured any) {
		t.Helper()
		b, _ := json.Marshal(structured)
		inst, err := sjs.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(inst); err != nil {
			t.Errorf("%s: %s does not conform: %v", name, b, err)
		}
	}
	ref := "svc:payments-staging"
	rec := &bound{Referent: ref, Summary: "payments API — staging"}
	views := map[string]view{
		"bare":                       {},
		"with record and summary":    {summary: "Restart: payments API — staging (svc:payments-staging) — reason: r", record: rec},
		"clarification with token":   {offered: []choice{{"svc:a", "A"}, {"svc:b", "B"}}, clarification: "c1.x.y"},
		"clarification asked":        {offered: []choice{{"svc:a", "A"}}, asked: true},
		"record of candidate source": {record: &bound{Referent: "sku-9"}},
	}
	s := &Server{log: slog.New(slog.DiscardHandler)}
	for _, k := range schema.Kinds() {
		for _, terminal := range []bool{true, false} {
			o := schema.Outcome{Schema: schema.SchemaOutcome, ProposalID: "mcp-0123456789abcdef01234567", Kind: k, Terminal: terminal,
				EffectTruth: k.EffectTruth(), Referent: &ref,
				Incidents: []schema.Incident{schema.NewIncident(schema.PhaseAuthorization, schema.CodeApprovalDeclined)},
				Receipt:   &schema.Receipt{ReceiptID: "rcpt_1"},
				Approval:  &schema.Approval{Fingerprint: "sha256:" + string(bytes.Repeat([]byte("0"), 64)), Summary: "s", ExternalSpend: &schema.Spend{Currency: "EUR", AmountMinor: 1}}}
			for name, v := range views {
				check(string(k)+"/"+name, render(o, v).StructuredContent)
			}
			bare := schema.Outcome{ProposalID: "mcp-1", Kind: k, Terminal: terminal, EffectTruth: k.EffectTruth()}
			check(string(k)+"/no detail", render(bare, view{}).StructuredContent)
			check(string(k)+"/pending", pendingResult(o, rec, "x").StructuredContent)
			earlier := o
			earlier.RecordedEarlier = true
			if got := render(earlier, views["with record and summary"]).StructuredContent.(result); !got.RecordedEarlier {
				t.Errorf("%s: recorded_earlier dropped from the result", k)
			}
			check(string(k)+"/recorded earlier", render(earlier, views["with record and summary"]).StructuredContent)
		}
	}
	check("bad arguments", badArguments("payload/quantity: maximum").StructuredContent)
	check("bad request state", errorResult(result{Status: StatusBadRequestState, WhatToDo: "x"}).StructuredContent)
	check("unknown proposal", errorResult(result{Status: StatusUnknown, ProposalID: "mcp-1", WhatToDo: "x"}).StructuredContent)
	check("send timed out", s.sendFailed("mcp-1", client.ErrTimeout).StructuredContent)
	check("send failed", s.sendFailed("mcp-1", errors.New("down")).StructuredContent)
	check("wait failed", s.waitFailed("mcp-1", errors.New("down")).StructuredContent)
	check("clarification of", render(clarificationOf("mcp-1"), view{offered: []choice{{"a", "A"}}, asked: true}).StructuredContent)
	// The schema is closed: a member it does not declare is refused.
	inst, _ := sjs.UnmarshalJSON(bytes.NewReader([]byte(`{"status": "confirmed", "terminal": true, "what_to_do": "x", "extra": 1}`)))
	if sch.Validate(inst) == nil {
		t.Error("the output schema takes a member it does not declare")
	}
}
