package history

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/schema"
)

// A hand-made history: events at whole seconds from t0.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

const key = "5a6883578c195c2db4563345d2872d693c6dfabca09b1ae4918d1cd00103e446"

func ref(id string) schema.ProposalRef { return schema.ProposalRef{Host: "frontdesk", ProposalID: id} }

func propose(id string, s float64) Event {
	return Event{Op: OpPropose, Proposal: ref(id), Call: at(s), Return: at(s + 0.01)}
}

func dispatched(s float64) Event {
	return Event{Op: OpDispatch, Key: key, Call: at(s), Return: at(s), Effect: true}
}

func reconciled(attempt string, s float64) Event {
	return Event{Op: OpReconcile, Key: key, Attempt: attempt, Call: at(s), Return: at(s)}
}

// outcome is an outcome of kind for proposal id stored at s; with a
// receipt id, it carries that receipt (status from the kind, recorded at
// s, linked to prev when an attempt is given).
func outcome(id string, s float64, kind schema.Kind, terminal bool, receipt string, opts ...func(*schema.Outcome)) Event {
	fp := "sha256:" + key
	o := &schema.Outcome{ProposalID: id, Kind: kind, Terminal: terminal, Fingerprint: &fp, AtMs: at(s).UnixMilli()}
	switch kind {
	case schema.KindConfirmed:
		o.EffectTruth = schema.TruthPresent
	case schema.KindRejected:
		o.EffectTruth = schema.TruthAbsent
	case schema.KindReconciliationRequired:
		o.EffectTruth = schema.TruthIndeterminate
	default:
		o.EffectTruth = schema.TruthNotDispatched
	}
	if receipt != "" {
		status := map[schema.Kind]schema.Status{schema.KindConfirmed: schema.StatusConfirmed, schema.KindRejected: schema.StatusRejected,
			schema.KindFailedBeforeDispatch: schema.StatusFailedBeforeDispatch, schema.KindReconciliationRequired: schema.StatusReconciliationRequired}[kind]
		o.Receipt = &schema.Receipt{ReceiptID: receipt, IdempotencyKey: key, Status: status, RecordedAtMs: at(s).UnixMilli()}
	}
	for _, f := range opts {
		f(o)
	}
	o.Host = "frontdesk"
	return Event{Op: OpOutcome, Proposal: ref(id), Call: at(s), Return: at(s), Outcome: o}
}

// after links an outcome's receipt to reconciliation attempt and prev.
func after(attempt, prev string) func(*schema.Outcome) {
	return func(o *schema.Outcome) {
		o.Receipt.Reconciliation = &schema.ReceiptReconcileRef{AttemptID: attempt, PreviousReceiptID: prev}
	}
}

func incident(code schema.Code) func(*schema.Outcome) {
	return func(o *schema.Outcome) { o.Incidents = append(o.Incidents, schema.Incident{Code: code}) }
}

func byOperator(o *schema.Outcome) { o.Receipt.Reconciliation.Operator = "ops" }

func readReceipts(call, ret float64, ids ...string) Event {
	st := make([]schema.Status, len(ids))
	for i := range st {
		st[i] = schema.StatusConfirmed
	}
	return Event{Op: OpReadReceipts, Key: key, Call: at(call), Return: at(ret), Receipts: append([]string{}, ids...), Statuses: st}
}

func readActivity(call, ret float64, status schema.Status) Event {
	return Event{Op: OpReadActivity, Key: key, Call: at(call), Return: at(ret), Status: string(status)}
}

func history(events ...Event) History {
	r := NewRecorder()
	for _, e := range events {
		r.Add(e)
	}
	return r.History()
}

// A confirmed dispatch: a good history, on which the bad ones below are
// each one change.
func confirmedRun() []Event {
	return []Event{
		propose("p", 0),
		dispatched(1),
		outcome("p", 2, schema.KindConfirmed, true, "rcpt_d"),
	}
}

// An indeterminate dispatch that reconciliation settles, a second
// proposal of the intent, operator reads between.
func reconciledRun() []Event {
	return []Event{
		propose("p", 0),
		dispatched(1),
		outcome("p", 2, schema.KindReconciliationRequired, false, "rcpt_d", incident(schema.CodeAdapterTimeout)),
		readReceipts(2.5, 2.6, "rcpt_d"),
		reconciled("rcn_1", 3),
		readReceipts(3.1, 3.9, "rcpt_d"), // concurrent with the receipt's write: either is fine
		outcome("p", 4, schema.KindConfirmed, true, "rcpt_r", after("rcn_1", "rcpt_d")),
		readActivity(4.1, 4.2, schema.StatusReconciliationRequired), // the snapshot lags
		readReceipts(4.5, 4.6, "rcpt_d", "rcpt_r"),
		propose("q", 5),
		outcome("q", 6, schema.KindConfirmed, true, "rcpt_r", after("rcn_1", "rcpt_d")),
		outcome("p", 7, schema.KindConfirmed, true, "rcpt_r", after("rcn_1", "rcpt_d")), // republished
	}
}

// A parked proposal granted once.
func approvedRun() []Event {
	return []Event{
		propose("p", 0),
		outcome("p", 1, schema.KindNeedsApproval, false, ""),
		{Op: OpGrant, Proposal: ref("p"), Call: at(2), Return: at(2)},
		dispatched(3),
		outcome("p", 4, schema.KindConfirmed, true, "rcpt_d"),
	}
}

// An exhausted reconciliation an operator settles.
func settledRun() []Event {
	return []Event{
		propose("p", 0),
		dispatched(1),
		outcome("p", 2, schema.KindReconciliationRequired, false, "rcpt_d"),
		reconciled("rcn_1", 3),
		outcome("p", 4, schema.KindReconciliationRequired, true, "rcpt_x", after("rcn_1", "rcpt_d"), incident(schema.CodeReconcileExhausted)),
		{Op: OpResolve, Key: key, Present: true, Call: at(5), Return: at(5.5)},
		outcome("p", 6, schema.KindConfirmed, true, "rcpt_o", after("", "rcpt_x"), byOperator, incident(schema.CodeOperatorResolved)),
	}
}

func TestCheckersPassGoodHistories(t *testing.T) {
	for name, events := range map[string][]Event{
		"confirmed": confirmedRun(), "reconciled": reconciledRun(), "approved": approvedRun(), "settled": settledRun(),
		"denied before dispatch": {propose("p", 0), outcome("p", 1, schema.KindDenied, true, "")},
		"timed out once, republished": {propose("p", 0), outcome("p", 1, schema.KindNeedsApproval, false, ""),
			outcome("p", 2, schema.KindDenied, true, "", incident(schema.CodeApprovalTimedOut)),
			func() Event { // a repeat delivery republishes it, at_ms and all
				e := outcome("p", 3, schema.KindDenied, true, "", incident(schema.CodeApprovalTimedOut))
				e.Outcome.AtMs = at(2).UnixMilli()
				return e
			}()},
	} {
		if bad, _ := Check(history(events...), Options{Ended: true, VisualDir: t.TempDir()}); len(bad) > 0 {
			t.Errorf("%s: %v", name, bad)
		}
	}
}

// Each checker fails on a history planted with the fault it is for, and
// names the rule.
func TestCheckersFailPlantedHistories(t *testing.T) {
	cases := []struct {
		name   string
		events []Event
		rule   Rule
		also   []Rule // other rules the planted fault breaks too
	}{
		{"double effect", append(confirmedRun(), dispatched(1.5)), RuleOneEffect, nil},
		{"two terminal outcomes", append(confirmedRun(), outcome("p", 3, schema.KindFailedBeforeDispatch, true, "")), RuleOneAnswer, []Rule{RuleOrder}},
		{"a newer non-terminal after the terminal", append(confirmedRun(),
			outcome("p", 3, schema.KindReconciliationRequired, false, "rcpt_late")), RuleOneAnswer, []Rule{RuleOrder}},
		// Issue 33: a processor's retried publish of a timed-out dispatch
		// after reconciliation's CONFIRMED — one answer, but the last
		// outcome stored is the stale one.
		{"a stale outcome after the terminal", append(reconciledRun(),
			outcome("p", 7.5, schema.KindReconciliationRequired, false, "rcpt_d", func(o *schema.Outcome) { o.Receipt.RecordedAtMs = at(2).UnixMilli() })), RuleOrder, nil},
		{"an older receipt after a newer", []Event{propose("p", 0), dispatched(1),
			outcome("p", 2, schema.KindReconciliationRequired, false, "rcpt_d", incident(schema.CodeAdapterTimeout)),
			reconciled("rcn_1", 3),
			outcome("p", 4, schema.KindReconciliationRequired, false, "rcpt_r", after("rcn_1", "rcpt_d")),
			outcome("p", 5, schema.KindReconciliationRequired, false, "rcpt_d", incident(schema.CodeAdapterTimeout),
				func(o *schema.Outcome) { o.Receipt.RecordedAtMs = at(2).UnixMilli() }),
			reconciled("rcn_2", 6),
			outcome("p", 7, schema.KindConfirmed, true, "rcpt_c", after("rcn_2", "rcpt_r"))}, RuleOrder, nil},
		{"waiting for approval after a receipt", []Event{propose("p", 0), outcome("p", 1, schema.KindNeedsApproval, false, ""),
			{Op: OpGrant, Proposal: ref("p"), Call: at(2), Return: at(2)}, dispatched(3),
			outcome("p", 4, schema.KindReconciliationRequired, false, "rcpt_d"),
			outcome("p", 5, schema.KindNeedsApproval, false, "", func(o *schema.Outcome) { o.AtMs = at(1).UnixMilli() }),
			reconciled("rcn_1", 6),
			outcome("p", 7, schema.KindConfirmed, true, "rcpt_r", after("rcn_1", "rcpt_d"))}, RuleOrder, nil},
		{"confirmed, the provider never acted", []Event{propose("p", 0), outcome("p", 2, schema.KindConfirmed, true, "")}, RuleTruth, nil},
		{"not dispatched, yet the provider acted", []Event{propose("p", 0), dispatched(1),
			outcome("p", 2, schema.KindFailedBeforeDispatch, true, "rcpt_f")}, RuleTruth, nil},
		{"rejected, yet the provider acted", []Event{propose("p", 0), dispatched(1),
			outcome("p", 2, schema.KindRejected, true, "rcpt_f")}, RuleTruth, nil},
		{"settled present, the operator said absent", func() []Event {
			e := settledRun()
			e[5].Present = false
			return e
		}(), RuleTruth, nil},
		{"an outcome before its proposal", []Event{propose("p", 5), dispatched(1), outcome("p", 2, schema.KindConfirmed, true, "rcpt_d")}, RuleCause, nil},
		{"an outcome of a proposal never published", []Event{dispatched(1), outcome("p", 2, schema.KindConfirmed, true, "rcpt_d")}, RuleCause, nil},
		{"confirmed before the provider received it", []Event{propose("p", 0), outcome("p", 2, schema.KindConfirmed, true, "rcpt_d"), dispatched(3)}, RuleCause, nil},
		{"reconciled before the attempt reached the provider", func() []Event {
			e := reconciledRun()
			e[4].Call = at(4.5)
			return e
		}(), RuleCause, nil},
		{"settled before the operator's call", func() []Event {
			e := settledRun()
			e[5].Call = at(6.5)
			return e
		}(), RuleCause, nil},
		{"an approval ended twice", []Event{propose("p", 0), outcome("p", 1, schema.KindNeedsApproval, false, ""),
			{Op: OpGrant, Proposal: ref("p"), Call: at(2), Return: at(2)}, dispatched(3),
			outcome("p", 4, schema.KindReconciliationRequired, false, "rcpt_d"),
			outcome("p", 5, schema.KindDenied, true, "", incident(schema.CodeApprovalTimedOut))}, RuleApproval, nil},
		{"an approval timed out twice", []Event{propose("p", 0), outcome("p", 1, schema.KindNeedsApproval, false, ""),
			outcome("p", 2, schema.KindDenied, true, "", incident(schema.CodeApprovalTimedOut)),
			outcome("p", 3, schema.KindDenied, true, "", incident(schema.CodeApprovalTimedOut))}, RuleApproval, nil},
		{"an attempt id reused", append(reconciledRun(), reconciled("rcn_1", 8)), RuleAttempt, nil},
		{"a proposal never ended", append(confirmedRun(), propose("q", 3)), RuleEnded, nil},
		{"a stale operator read", append(reconciledRun(), readReceipts(8, 8.1, "rcpt_d")), RuleLinearizable, nil},
		{"a read of a receipt not yet written", []Event{propose("p", 0), readReceipts(0.5, 0.6, "rcpt_d"), dispatched(1),
			outcome("p", 2, schema.KindConfirmed, true, "rcpt_d")}, RuleLinearizable, nil},
		{"a read that lost a receipt", append(reconciledRun(), readReceipts(8, 8.1, "rcpt_r")), RuleLinearizable, nil},
		{"an activity read ahead of the provider", []Event{propose("p", 0), readActivity(0.5, 0.6, schema.StatusConfirmed),
			dispatched(1), outcome("p", 2, schema.KindConfirmed, true, "rcpt_d")}, RuleLinearizable, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bad, visual := Check(history(tc.events...), Options{Ended: true, VisualDir: dir})
			if !slices.ContainsFunc(bad, func(v Violation) bool { return v.Rule == tc.rule }) {
				t.Fatalf("violations %v, want one of %s", bad, tc.rule)
			}
			for _, v := range bad {
				if v.Rule != tc.rule && !slices.Contains(tc.also, v.Rule) {
					t.Errorf("also %s", v)
				}
				if strings.Contains(v.What, key) {
					t.Errorf("a whole key in %q", v)
				}
			}
			if tc.rule == RuleLinearizable {
				if visual == "" {
					t.Fatal("no visualisation written")
				}
				b, err := os.ReadFile(visual)
				if err != nil || !strings.Contains(string(b), "<html") {
					t.Fatalf("visualisation %s: %v", visual, err)
				}
				t.Logf("%s: %v; visualisation %s", tc.name, bad, visual)
			}
		})
	}
}
