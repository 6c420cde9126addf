package sim

import (
	"fmt"
	"slices"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/intent"
	"github.com/portcullis/portcullis/schema"
)

// checkTransition holds one transition of an intent's record — before,
// the event, after and its effects, as intent.Apply gives them to the
// stages — to the invariants of check.go that one transition can break:
//
//  1. the provider acts at most once per idempotency key: an in-flight
//     record is written only over a record that provably reached nobody
//     (new, not-invoked, or lost: its request found never received);
//  7. nothing dispatches the intent after an operator's settlement;
//  6. an operator's receipt follows, linked, a reconciliation_required one;
//  9. receipts are ordered: a new receipt is recorded after every receipt
//     before it; and every outcome told restates the latest truth the
//     record holds for its proposal (its end, or the latest receipt) —
//     which, with 2, keeps a proposal from being told what the journal
//     does not say.
//
// It returns the violations, in the words of check.go.
func checkTransition(before, after kv.Intent, ev intent.Event, fx intent.Effects) []string {
	var bad []string
	violate := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if fx.Refused != nil {
		return nil
	}
	if after.State == kv.StateInFlight && (before.State != kv.StateInFlight || after.DispatchAttempts != before.DispatchAttempts) {
		if before.Receipt != nil || (before.State != kv.StateNew && before.State != kv.StateNotInvoked && before.State != kv.StateLost) {
			violate("1: an in-flight record written over a %s record (receipt %v): the provider may act twice", before.State, before.Receipt != nil)
		}
		if before.Resolution == kv.ResolvedByOperator {
			violate("7: the intent dispatched after the operator's settlement")
		}
	}
	if rc := fx.Receipt; rc != nil {
		if prev := before.Receipt; prev != nil && rc.RecordedAtMs <= prev.RecordedAtMs {
			violate("9: receipt recorded at %d after one recorded at %d", rc.RecordedAtMs, prev.RecordedAtMs)
		}
		if rc.RecordedAtMs <= before.ReceiptAfterMs {
			violate("9: receipt recorded at %d after the history's latest at %d", rc.RecordedAtMs, before.ReceiptAfterMs)
		}
		if link := rc.Reconciliation; link != nil && link.AttemptID == kv.OperatorAttemptID(after.Fingerprint) {
			if before.Receipt == nil || before.Receipt.Status != schema.StatusReconciliationRequired || link.PreviousReceiptID != before.Receipt.ReceiptID {
				violate("6: the operator's receipt does not follow, linked, a reconciliation_required receipt")
			}
		}
	}
	for _, o := range fx.Told {
		latest, ok := latestOf(after, o.To(), ev)
		if !ok {
			violate("9: %s told %s, but the record holds nothing for it", o.ProposalID, o.Kind)
			continue
		}
		if !o.Standing().Restates(latest.Standing()) {
			violate("9: %s told %s %s, not the latest recorded, %s %s", o.ProposalID, o.Kind, codes(o), latest.Kind, codes(latest))
		}
	}
	return bad
}

// latestOf is the latest truth rec records for ref (World.latestRecorded
// for one record): its end — on the record, or the proposal's own the
// event carries — else the latest receipt for a proposal of the intent.
func latestOf(rec kv.Intent, ref schema.ProposalRef, ev intent.Event) (schema.Outcome, bool) {
	e, ok := rec.EndOf(ref)
	if !ok && ev.Ended != nil && ev.Ref == ref {
		e, ok = kv.EndedProposal{Ref: ref, Ended: *ev.Ended}, true
	}
	if ok {
		return schema.FailureOutcome(ref, schema.NewIncident(e.Ended.Phase, e.Ended.Code), e.Ended.AtMs), true
	}
	if rec.Receipt == nil || !slices.Contains(rec.Proposals, ref) {
		return schema.Outcome{}, false
	}
	return intent.Outcome(rec, ref, ev.NowMs), true
}
