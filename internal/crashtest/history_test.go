package crashtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/history"
	"github.com/portcullis/portcullis/schema"
)

// What every proposal's outcomes must also show under faults (issue 19),
// beyond the contract's invariants that history.Check verifies: whatever
// crashed, paused or lost its server, no outage ended a proposal.
//   - no PROCESSING_FAILED and no FAILED_BEFORE_DISPATCH: an outage, a
//     crash or a pause is never a reason to end a proposal;
//   - no answer but CONFIRMED for an intent the provider acted on (the far
//     side answers reconciliation truthfully, so not even an exhausted
//     RECONCILIATION_REQUIRED).
func outageFree(h history.History) []string {
	acted := map[string]bool{}
	for _, e := range h {
		if e.Op == history.OpDispatch && e.Effect {
			acted[e.Key] = true
		}
	}
	var bad []string
	final := map[schema.ProposalRef]*schema.Outcome{}
	var order []schema.ProposalRef
	for _, e := range h {
		if e.Op != history.OpOutcome {
			continue
		}
		o, id := e.Outcome, e.Proposal.ProposalID
		for _, in := range o.Incidents {
			if in.Code == schema.CodeProcessingFailed {
				bad = append(bad, fmt.Sprintf("%s: PROCESSING_FAILED in %s (%s)", id, in.Phase, o.Kind))
			}
		}
		if o.Kind == schema.KindFailedBeforeDispatch {
			bad = append(bad, fmt.Sprintf("%s: FAILED_BEFORE_DISPATCH %v", id, codes(*o)))
		}
		if o.Terminal && final[e.Proposal] == nil {
			final[e.Proposal] = o
			order = append(order, e.Proposal)
		}
	}
	for _, ref := range order {
		o := final[ref]
		if key := fingerprintKey(o); o.Kind != schema.KindConfirmed && acted[key] {
			bad = append(bad, fmt.Sprintf("%s: %s %v, but the provider acted on key %.12s", ref.ProposalID, o.Kind, codes(*o), key))
		}
	}
	return bad
}

func fingerprintKey(o *schema.Outcome) string {
	if o.Fingerprint == nil {
		return ""
	}
	return strings.TrimPrefix(*o.Fingerprint, "sha256:")
}

func codes(o schema.Outcome) []string {
	var out []string
	for _, in := range o.Incidents {
		out = append(out, string(in.Phase)+"/"+string(in.Code))
	}
	return out
}

// checkTruth checks the run's history (farSide.check) and that no outage
// ended a proposal; it returns the history and how many violations it
// found.
func (f *farSide) checkTruth(t *testing.T) (history.History, int) {
	t.Helper()
	h, n := f.check(t)
	bad := outageFree(h)
	for _, b := range bad {
		t.Error(b)
	}
	return h, n + len(bad)
}

// The soaks' checks together — history.Check and outageFree — fail on
// planted histories that break each rule the soaks rely on (the lie of
// issue 19 among them); internal/history's own tests plant one fault per
// checker.
func TestTruthCheckerFailsOnBadHistories(t *testing.T) {
	const key = "5a6883578c195c2db4563345d2872d693c6dfabca09b1ae4918d1cd00103e446"
	fp := "sha256:" + key
	rc := &schema.Receipt{ReceiptID: "rcpt_1", IdempotencyKey: key, Status: schema.StatusConfirmed, RecordedAtMs: 2_000}
	confirmed := schema.Outcome{Kind: schema.KindConfirmed, Terminal: true, EffectTruth: schema.TruthPresent, Receipt: rc}
	failed := schema.Outcome{Kind: schema.KindIntegrationFailure, Terminal: true,
		Incidents: []schema.Incident{{Phase: schema.PhaseGrounding, Code: schema.CodeProcessingFailed}}}
	fbd := schema.Outcome{Kind: schema.KindFailedBeforeDispatch, Terminal: true}
	pending := schema.Outcome{Kind: schema.KindReconciliationRequired, Receipt: &schema.Receipt{ReceiptID: "rcpt_0", IdempotencyKey: key, RecordedAtMs: 1_000}}
	exhausted := schema.Outcome{Kind: schema.KindReconciliationRequired, Terminal: true}
	cases := []struct {
		name     string
		outs     []schema.Outcome
		received int
		bad      bool
	}{
		{"confirmed and received once", []schema.Outcome{pending, confirmed}, 1, false},
		{"confirmed twice (a repeat)", []schema.Outcome{confirmed, confirmed}, 1, false},
		{"issue 33: the timed-out dispatch's outcome stored after CONFIRMED", []schema.Outcome{pending, confirmed, pending}, 1, true},
		{"the lie of issue 19: PROCESSING_FAILED, then CONFIRMED", []schema.Outcome{failed, confirmed}, 1, true},
		{"confirmed, never received", []schema.Outcome{confirmed}, 0, true},
		{"confirmed, received twice", []schema.Outcome{confirmed}, 2, true},
		{"failed before dispatch", []schema.Outcome{fbd}, 0, true},
		{"no end", []schema.Outcome{pending}, 1, true},
		{"nothing at all", nil, 0, true},
		{"denied, yet received", []schema.Outcome{{Kind: schema.KindDenied, Terminal: true}}, 1, true},
		{"exhausted, yet received", []schema.Outcome{exhausted}, 1, true},
	}
	t0 := time.Now()
	for _, tc := range cases {
		rec := history.NewRecorder()
		rec.Add(history.Event{Op: history.OpPropose, Proposal: schema.ProposalRef{Host: "frontdesk", ProposalID: "p"}, Call: t0})
		for range tc.received {
			rec.Add(history.Event{Op: history.OpDispatch, Key: key, Effect: true, Call: t0.Add(time.Second)})
		}
		var outs []history.Event
		for i, o := range tc.outs {
			o.ProposalID, o.Host, o.Fingerprint = "p", "frontdesk", &fp
			at := t0.Add(time.Duration(2+i) * time.Second)
			outs = append(outs, history.Event{Op: history.OpOutcome, Proposal: o.To(), Call: at, Return: at, Outcome: &o})
		}
		rec.Outcomes(outs)
		h := rec.History()
		bad, _ := history.Check(h, history.Options{Ended: true})
		got := len(bad) + len(outageFree(h))
		if (got > 0) != tc.bad {
			t.Errorf("%s: violations %v %v, want bad=%v", tc.name, bad, outageFree(h), tc.bad)
		}
	}
}
