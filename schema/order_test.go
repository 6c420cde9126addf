package schema_test

import (
	"fmt"
	"testing"

	"github.com/portcullis/portcullis/schema"
)

var ref = schema.ProposalRef{Host: "h", ProposalID: "p-1"}

// withReceipt is an outcome of kind reporting receipt id recorded at ms.
func withReceipt(kind schema.Kind, id string, ms int64, terminal bool) schema.Outcome {
	o := schema.NewOutcome(ref, kind, 5_000+ms)
	o.Terminal = terminal
	o.Receipt = &schema.Receipt{ReceiptID: id, RecordedAtMs: ms}
	return o
}

func incident(phase schema.Phase, code schema.Code) schema.Outcome {
	return schema.FailureOutcome(ref, schema.NewIncident(phase, code), 100)
}

// The outcomes of one proposal, in the order SPEC §2.4 puts them.
var (
	malformed   = incident(schema.PhaseAdmission, schema.CodeAdmissionMalformed)
	needs       = schema.NewOutcome(ref, schema.KindNeedsApproval, 200)
	unknown1    = withReceipt(schema.KindReconciliationRequired, "r1", 1_000, false)
	unknown2    = withReceipt(schema.KindReconciliationRequired, "r2", 2_000, false)
	acked       = withReceipt(schema.KindAcknowledged, "r1", 1_000, false)
	confirmed   = withReceipt(schema.KindConfirmed, "r3", 3_000, true)
	exhausted   = withReceipt(schema.KindReconciliationRequired, "r3", 3_000, true)
	settled     = withReceipt(schema.KindConfirmed, "r4", 4_000, true)
	failed      = incident(schema.PhaseDispatch, schema.CodeProcessingFailed)
	denied      = incident(schema.PhaseAuthorization, schema.CodeApprovalTimedOut)
	allOutcomes = map[string]schema.Outcome{"malformed": malformed, "needs": needs, "unknown1": unknown1, "unknown2": unknown2,
		"acked": acked, "confirmed": confirmed, "exhausted": exhausted, "settled": settled, "failed": failed, "denied": denied}
)

func TestOutcomeOrder(t *testing.T) {
	for _, c := range []struct {
		next, last string
		follows    bool
	}{
		{"needs", "malformed", true}, // a namesake's refusal is not the proposal's
		{"malformed", "needs", false},
		{"confirmed", "needs", true},
		{"needs", "confirmed", false},
		{"needs", "unknown1", false}, // waiting for approval is before any receipt
		{"unknown2", "unknown1", true},
		{"unknown1", "unknown2", false},
		{"confirmed", "unknown2", true},
		{"unknown2", "confirmed", false}, // the issue's case: stale after CONFIRMED
		{"unknown1", "confirmed", false},
		{"confirmed", "acked", true},
		{"settled", "exhausted", true}, // an operator's settlement
		{"exhausted", "settled", false},
		{"confirmed", "exhausted", false}, // the same receipt's moment, another kind
		{"failed", "unknown2", true},      // a give-up ends a proposal that waited
		{"confirmed", "failed", false},
		{"denied", "needs", true},
		{"needs", "denied", false},
		{"confirmed", "denied", false},
		{"failed", "denied", false}, // two answers: the first stands
		{"denied", "denied", true},
	} {
		next, last := allOutcomes[c.next], allOutcomes[c.last]
		if got := next.Standing().Follows(last.Standing()); got != c.follows {
			t.Errorf("%s after %s: follows %v, want %v", c.next, c.last, got, c.follows)
		}
	}
	// The same receipt, published at another moment, restates it.
	again := confirmed
	again.AtMs += 77
	if s := again.Standing(); !s.Restates(confirmed.Standing()) || s.Supersedes(confirmed.Standing()) {
		t.Errorf("a republished receipt: restates %v, supersedes %v", s.Restates(confirmed.Standing()), s.Supersedes(confirmed.Standing()))
	}
	// A later approval request is newer; the same one restates.
	later := needs
	later.AtMs++
	if !later.Standing().Supersedes(needs.Standing()) || needs.Standing().Follows(later.Standing()) {
		t.Error("a later NEEDS_APPROVAL does not supersede an earlier one")
	}
}

// Supersedes is a strict order among the proposal's own outcomes: never
// both ways, and transitive — what lets a publisher that knows any
// outcome on the subject judge its own stale without reading the rest.
func TestOutcomeOrderIsTransitive(t *testing.T) {
	for an, a := range allOutcomes {
		for bn, b := range allOutcomes {
			sa, sb := a.Standing(), b.Standing()
			if !sa.Unadmitted && !sb.Unadmitted && sa.Supersedes(sb) && sb.Supersedes(sa) {
				t.Errorf("%s and %s supersede each other", an, bn)
			}
			if sa.Supersedes(sb) && sa.Restates(sb) {
				t.Errorf("%s both restates and supersedes %s", an, bn)
			}
			for cn, c := range allOutcomes {
				sc := c.Standing()
				if sa.Unadmitted || !sb.Supersedes(sa) || !sc.Supersedes(sb) {
					continue
				}
				if !sc.Supersedes(sa) {
					t.Errorf("%s > %s > %s but not %s > %s", cn, bn, an, cn, an)
				}
			}
		}
	}
}

// A host can order the outcomes it reads itself: the receipt's
// recorded_at_ms, then terminality.
func ExampleStanding_Follows() {
	unknown := schema.NewOutcome(schema.ProposalRef{Host: "h", ProposalID: "p"}, schema.KindReconciliationRequired, 2_000)
	unknown.Receipt = &schema.Receipt{ReceiptID: "rcpt_1", RecordedAtMs: 1_000}
	confirmed := schema.NewOutcome(schema.ProposalRef{Host: "h", ProposalID: "p"}, schema.KindConfirmed, 3_000)
	confirmed.Receipt = &schema.Receipt{ReceiptID: "rcpt_2", RecordedAtMs: 2_500}
	fmt.Println(confirmed.Standing().Follows(unknown.Standing()), unknown.Standing().Follows(confirmed.Standing()))
	// Output: true false
}
