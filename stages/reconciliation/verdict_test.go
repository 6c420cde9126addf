package reconciliation_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/reconciliation"
)

const fpA = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func prevReceipt(status schema.Status) *schema.Receipt {
	next := schema.NextReconcile
	if status == schema.StatusAcknowledged {
		next = schema.NextVerify
	}
	return &schema.Receipt{
		ReceiptID: kv.ReceiptID(fpA, "dispatch"), Fingerprint: fpA, IdempotencyKey: fpA[7:],
		Provider: "demo", Capability: "inventory.adjust", Operation: "adjust_stock", Environment: "test", Adapter: "fake",
		Status: status, DispatchAttempted: true, NextAction: next, ProviderActionID: "prov:1", EvidenceRefs: []string{"prov:ev"},
		ErrorCode:    "ADAPTER_TIMEOUT",
		Disclosure:   &schema.DisclosureRecord{Recipient: "Duffel", Purpose: "p", FieldClasses: []string{"birth_date"}, Source: "user_profile", AuthenticationAssurance: "biometric"},
		RecordedAtMs: 1000,
	}
}

func TestAttemptIDAndBackoff(t *testing.T) {
	if got := kv.AttemptID(fpA, 3); got != "rcn_0123456789abcdef_3" {
		t.Errorf("AttemptID = %s", got)
	}
	if kv.AttemptID(fpA, 1) == kv.AttemptID(fpA, 2) {
		t.Error("two polls share an id")
	}
	if got := kv.OperatorAttemptID(fpA); got != "opr_0123456789abcdef" {
		t.Errorf("OperatorAttemptID = %s", got)
	}
	s := time.Second
	for n, want := range map[int]time.Duration{1: s, 2: 2 * s, 3: 4 * s, 6: 32 * s, 7: 32 * s, 40: 32 * s} {
		if got := reconciliation.Backoff(s, n); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", n, got, want)
		}
	}
}

func inc(phase schema.Phase, code schema.Code) schema.Incident {
	return schema.NewIncident(phase, code)
}

func TestDecide(t *testing.T) {
	timeout := fmt.Errorf("adapters: demo reconcile: %w after 2s", adapters.ErrTimeout)
	noResp := fmt.Errorf("adapters: demo reconcile: %w: no responders", adapters.ErrNotInvoked)
	malformed := fmt.Errorf("adapters: demo reconcile: %w: outside the reply contract", adapters.ErrMalformedReply)
	unknownErr := errors.New("adapters: demo reconcile: outcome unknown: connection reset")
	ok := func(outcome string) schema.AdapterReply {
		return schema.AdapterReply{Outcome: outcome, ProviderActionID: "prov:2", EvidenceRefs: []string{"prov:order/2"}}
	}
	rc, ack := schema.StatusReconciliationRequired, schema.StatusAcknowledged
	recon := schema.PhaseReconciliation
	cases := []struct {
		name      string
		prev      schema.Status
		reply     schema.AdapterReply
		err       error
		n         int
		status    schema.Status
		next      schema.NextAction
		incidents []schema.Incident
		events    []schema.Incident
		code      schema.Code
		attempt   string
		settled   bool
		exhausted bool
		attempted bool
	}{
		{"confirmed settles", rc, ok("confirmed"), nil, 1, schema.StatusConfirmed, schema.NextNone, nil, nil, "", metrics.AttemptConfirmed, true, false, true},
		{"absent is rejected", rc, ok("rejected"), nil, 2, schema.StatusRejected, schema.NextNone, []schema.Incident{inc(schema.PhaseDispatch, schema.CodeProviderRejected)}, nil, schema.CodeProviderRejected, metrics.AttemptRejected, true, false, true},
		{"never received", rc, ok("failed_before_dispatch"), nil, 1, schema.StatusFailedBeforeDispatch, schema.NextNone, []schema.Incident{inc(schema.PhaseDispatch, schema.CodeProviderFailedBeforeDispatch)}, nil, schema.CodeProviderFailedBeforeDispatch, metrics.AttemptFailedBeforeDispatch, true, false, false},
		{"indeterminate polls on", rc, ok("indeterminate"), nil, 1, rc, schema.NextReconcile, []schema.Incident{inc(recon, schema.CodeProviderIndeterminate)}, nil, schema.CodeProviderIndeterminate, metrics.AttemptIndeterminate, false, false, true},
		{"timeout", rc, schema.AdapterReply{}, timeout, 1, rc, schema.NextReconcile, []schema.Incident{inc(recon, schema.CodeReconcileError)}, nil, schema.CodeReconcileError, metrics.AttemptError, false, false, true},
		{"unknown error", rc, schema.AdapterReply{}, unknownErr, 2, rc, schema.NextReconcile, []schema.Incident{inc(recon, schema.CodeReconcileError)}, nil, schema.CodeReconcileError, metrics.AttemptError, false, false, true},
		{"no responders", rc, schema.AdapterReply{}, noResp, 1, rc, schema.NextReconcile, []schema.Incident{inc(recon, schema.CodeReconcileUnavailable)}, nil, schema.CodeReconcileUnavailable, metrics.AttemptUnavailable, false, false, true},
		{"malformed", rc, schema.AdapterReply{}, malformed, 1, rc, schema.NextReconcile, []schema.Incident{inc(recon, schema.CodeMalformedAdapterResult)}, nil, schema.CodeMalformedAdapterResult, metrics.AttemptMalformed, false, false, true},
		{"last attempt exhausts", rc, schema.AdapterReply{}, timeout, 3, rc, schema.NextNone, []schema.Incident{inc(recon, schema.CodeReconcileError), inc(recon, schema.CodeReconcileExhausted)}, nil, schema.CodeReconcileExhausted, metrics.AttemptError, false, true, true},
		{"last attempt can still settle", rc, ok("confirmed"), nil, 3, schema.StatusConfirmed, schema.NextNone, nil, nil, "", metrics.AttemptConfirmed, true, false, true},

		{"verify confirms", ack, ok("confirmed"), nil, 1, schema.StatusConfirmed, schema.NextNone, nil, nil, "", metrics.AttemptConfirmed, true, false, true},
		{"verify finds absent", ack, ok("rejected"), nil, 1, schema.StatusRejected, schema.NextNone, []schema.Incident{inc(schema.PhaseDispatch, schema.CodeProviderRejected)}, nil, schema.CodeProviderRejected, metrics.AttemptRejected, true, false, true},
		{"verify cannot tell: still acknowledged", ack, ok("indeterminate"), nil, 2, ack, schema.NextVerify, nil, []schema.Incident{inc(recon, schema.CodeProviderIndeterminate)}, schema.CodeProviderIndeterminate, metrics.AttemptIndeterminate, false, false, true},
		{"verify unavailable", ack, schema.AdapterReply{}, noResp, 1, ack, schema.NextVerify, nil, []schema.Incident{inc(recon, schema.CodeReconcileUnavailable)}, schema.CodeReconcileUnavailable, metrics.AttemptUnavailable, false, false, true},
		{"verify exhausted becomes indeterminate", ack, schema.AdapterReply{}, timeout, 3, rc, schema.NextNone, []schema.Incident{inc(recon, schema.CodeReconcileError), inc(recon, schema.CodeReconcileExhausted)}, nil, schema.CodeReconcileExhausted, metrics.AttemptError, false, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prev := prevReceipt(c.prev)
			v := reconciliation.Decide(prev, c.reply, c.err, c.n, 3)
			if v.Status != c.status || v.NextAction != c.next || v.ErrorCode != string(c.code) || v.AttemptStatus != c.attempt ||
				v.Settled != c.settled || v.Exhausted != c.exhausted || v.Attempted != c.attempted {
				t.Errorf("verdict = %+v", v)
			}
			if !slices.Equal(v.Incidents, c.incidents) || !slices.Equal(v.Events, c.events) {
				t.Errorf("incidents %v events %v, want %v %v", v.Incidents, v.Events, c.incidents, c.events)
			}
			// A reply's action id and evidence replace the previous ones;
			// a failure keeps the action id and drops the evidence.
			if c.err == nil && (v.ProviderActionID != "prov:2" || !slices.Equal(v.EvidenceRefs, []string{"prov:order/2"})) {
				t.Errorf("reply material = %q %v", v.ProviderActionID, v.EvidenceRefs)
			}
			if c.err != nil && (v.ProviderActionID != "prov:1" || len(v.EvidenceRefs) != 0 || v.EvidenceRefs == nil) {
				t.Errorf("failure material = %q %#v", v.ProviderActionID, v.EvidenceRefs)
			}
			for _, i := range append(slices.Clone(v.Incidents), v.Events...) {
				if _, ok := schema.LookupCode(i.Phase, i.Code); !ok {
					t.Errorf("incident %v is not in the code table", i)
				}
			}
		})
	}
	// The provider's own code wins for the receipt.
	r := ok("indeterminate")
	r.ErrorCode = "PROVIDER_STILL_PROCESSING"
	if v := reconciliation.Decide(prevReceipt(rc), r, nil, 1, 3); v.ErrorCode != "PROVIDER_STILL_PROCESSING" {
		t.Errorf("error code = %s", v.ErrorCode)
	}
}

func TestReplayedAndAbandoned(t *testing.T) {
	for _, f := range []func(*schema.Receipt, int, int) reconciliation.Finding{reconciliation.Replayed, reconciliation.Abandoned} {
		v := f(prevReceipt(schema.StatusReconciliationRequired), 1, 3)
		if v.Status != schema.StatusReconciliationRequired || v.ErrorCode != string(schema.CodeReconcileError) || v.Settled || v.Exhausted {
			t.Errorf("%+v", v)
		}
		if v := f(prevReceipt(schema.StatusReconciliationRequired), 3, 3); !v.Exhausted {
			t.Errorf("last attempt: %+v", v)
		}
	}
	if v := reconciliation.Replayed(prevReceipt(schema.StatusReconciliationRequired), 1, 3); v.AttemptStatus != metrics.AttemptReplayed {
		t.Errorf("replayed status = %s", v.AttemptStatus)
	}
	if v := reconciliation.Abandoned(prevReceipt(schema.StatusReconciliationRequired), 1, 3); v.AttemptStatus != metrics.AttemptError {
		t.Errorf("abandoned status = %s", v.AttemptStatus)
	}
}

func TestOperatorVerdict(t *testing.T) {
	prev := prevReceipt(schema.StatusReconciliationRequired)
	for _, present := range []bool{true, false} {
		v := reconciliation.Operator(prev, present, "ticket:OPS-1", "oncall")
		want := schema.StatusRejected
		if present {
			want = schema.StatusConfirmed
		}
		if v.Status != want || v.NextAction != schema.NextNone || !v.Settled || len(v.Incidents) != 0 ||
			!slices.Equal(v.Events, []schema.Incident{inc(schema.PhaseReconciliation, schema.CodeOperatorResolved)}) ||
			v.ErrorCode != string(schema.CodeOperatorResolved) || !slices.Equal(v.EvidenceRefs, []string{"ticket:OPS-1"}) || v.Operator != "oncall" {
			t.Errorf("present=%v: %+v", present, v)
		}
	}
	if v := reconciliation.Decide(prev, schema.AdapterReply{Outcome: schema.ReplyConfirmed}, nil, 1, 3); v.Operator != "" {
		t.Errorf("a provider's answer names an operator: %q", v.Operator)
	}
}

// TestAttemptStatuses: the words an attempt records are within the closed
// label set of actions_reconciliation_attempts_total, so that no attempt
// counts under a label the metric did not pre-create, and every label is
// one some finding records.
func TestAttemptStatuses(t *testing.T) {
	timeout := fmt.Errorf("adapters: demo reconcile: %w after 2s", adapters.ErrTimeout)
	noResp := fmt.Errorf("adapters: demo reconcile: %w: no responders", adapters.ErrNotInvoked)
	malformed := fmt.Errorf("adapters: demo reconcile: %w: outside the reply contract", adapters.ErrMalformedReply)
	var got []string
	for _, prev := range []schema.Status{schema.StatusReconciliationRequired, schema.StatusAcknowledged} {
		for _, outcome := range []string{schema.ReplyConfirmed, schema.ReplyRejected, schema.ReplyFailedBeforeDispatch, schema.ReplyIndeterminate} {
			got = append(got, reconciliation.Decide(prevReceipt(prev), schema.AdapterReply{Outcome: outcome, ProviderActionID: "prov:2"}, nil, 1, 3).AttemptStatus)
		}
		for _, err := range []error{timeout, noResp, malformed} {
			got = append(got, reconciliation.Decide(prevReceipt(prev), schema.AdapterReply{}, err, 1, 3).AttemptStatus)
		}
		got = append(got, reconciliation.Replayed(prevReceipt(prev), 1, 3).AttemptStatus, reconciliation.Abandoned(prevReceipt(prev), 1, 3).AttemptStatus)
	}
	want := metrics.AttemptStatuses()
	for _, s := range got {
		if !slices.Contains(want, s) {
			t.Errorf("an attempt records %q, not a label of %v", s, want)
		}
	}
	for _, s := range want {
		if !slices.Contains(got, s) {
			t.Errorf("label %q is recorded by no finding", s)
		}
	}
}
