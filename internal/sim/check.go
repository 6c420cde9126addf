package sim

import (
	"fmt"
	"slices"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/intent"
	"github.com/portcullis/portcullis/schema"
)

// check verifies the invariants of a finished run (issue 26, item 1's
// list, as far as this simulation sees them):
//
//  1. the provider acted at most once per idempotency key;
//  2. every proposal ended with a terminal outcome, and all its terminal
//     outcomes agree (one answer, however often it is republished); an
//     outcome of another kind published after the terminal one must be
//     recognisably stale: it carries an older receipt (finding 2, doc.go;
//     9 below now holds the subject to its order, stale or not);
//  3. the answer is consistent with what the provider did: CONFIRMED only
//     if it acted; never an absence (FAILED_BEFORE_DISPATCH, REJECTED,
//     DENIED, INTEGRATION_FAILURE) if it acted; RECONCILIATION_REQUIRED
//     (reconciliation exhausted) is honest either way;
//  4. reconciliation never ends a proposal FAILED_BEFORE_DISPATCH on a
//     request lost in flight while the intent may still be dispatched
//     again (docs/design.md "Lost in flight": only after
//     MaxRedispatches);
//  5. each reconcile attempt id reached the provider at most once.
//
// What the provider's simulated faults legitimately end a proposal with
// by design is not a violation: FAILED_BEFORE_DISPATCH at dispatch once
// provider.unavailable_retry has passed since the first attempt that
// provably reached nobody (no responders, or a request refused as late
// after a pause), PROCESSING_FAILED from a give-up that found nothing
// sent. Those are consistent with the provider (checked by 3). A
// proposal ended at dispatch's re-check (its own grant expired: the
// short-grant runs) is answered about its own authorization only — a
// re-check denial never ends the intent (docs/design.md), whose other
// proposals may still dispatch it — so its denial is not held to 3; it is
// recognized by its end recorded on the intent with the same code. An
// operator's settlement supersedes a terminal RECONCILIATION_REQUIRED
// (exhausted): it is the proposal's answer then, held to 2 and 3.
func (w *World) check() {
	for key, n := range w.prov.acts {
		if n > 1 {
			w.violate("the provider acted %d times on idempotency key %s", n, key[:8])
		}
	}
	acted := w.prov.acts[fp[7:]] > 0
	rec, _ := w.j.record(fp)
	for _, ref := range w.proposals {
		outs := w.outcomes[ref]
		var final *schema.Outcome
		for i := range outs {
			o := &outs[i]
			if final != nil && o.Kind != final.Kind && !older(o, final) {
				if operatorSettled(o) && final.Kind == schema.KindReconciliationRequired {
					final = o // the operator's settlement of an exhausted effect (SPEC §3)
					continue
				}
				w.violate("%s: %s after its terminal %s", ref.ProposalID, o.Kind, final.Kind)
			}
			if o.Terminal && final == nil {
				final = o
			}
		}
		if final == nil {
			w.violate("%s: no terminal outcome (%d outcomes)", ref.ProposalID, len(outs))
			continue
		}
		switch final.Kind {
		case schema.KindConfirmed:
			if !acted {
				w.violate("%s: CONFIRMED but the provider never acted", ref.ProposalID)
			}
		case schema.KindReconciliationRequired:
		default:
			if acted && !deniedAtReCheck(rec, ref, final) {
				w.violate("%s: %s %s but the provider acted%s", ref.ProposalID, final.Kind, codes(*final), w.staleOperator(final))
			}
		}
		for _, inc := range final.Incidents {
			if inc.Code == schema.CodeProviderFailedBeforeDispatch && final.Receipt != nil && final.Receipt.Reconciliation != nil &&
				rec.Redispatches < kv.MaxRedispatches {
				w.violate("%s: reconciliation ended it FAILED_BEFORE_DISPATCH after %d redispatches: a lost request ended the proposal", ref.ProposalID, rec.Redispatches)
			}
		}
	}
	for id, n := range w.prov.attempts {
		if n > 1 {
			w.violate("reconcile attempt %s asked %d times", id, n)
		}
	}
	w.checkSettlement(rec)
	w.checkOrder(rec)
}

// checkOrder verifies SPEC §2.4 Order on every proposal's subject, as the
// stream stored it (and so as a host saw it live):
//
//  9. each outcome restates or supersedes the one before it
//     (schema.Standing.Follows): nothing non-terminal after a terminal
//     outcome, nothing older after something newer; and the last is the
//     latest truth recorded for the proposal — the intent's latest
//     receipt for a proposal of the intent, or the end recorded for one
//     that dispatch ended without dispatching.
func (w *World) checkOrder(rec kv.Intent) {
	for _, ref := range w.proposals {
		outs := w.outcomes[ref]
		for i := 1; i < len(outs); i++ {
			if !outs[i].Standing().Follows(outs[i-1].Standing()) {
				w.violate("%s: %s %s(receipt at %d) stored after %s %s(receipt at %d): out of order", ref.ProposalID,
					outs[i].Kind, codes(outs[i]), recordedAt(&outs[i]), outs[i-1].Kind, codes(outs[i-1]), recordedAt(&outs[i-1]))
			}
		}
		latest, ok := w.latestRecorded(rec, ref)
		if !ok || len(outs) == 0 {
			continue
		}
		if last := outs[len(outs)-1]; !last.Standing().Restates(latest.Standing()) {
			w.violate("%s: the last outcome on its subject is %s %s(receipt at %d), not the latest recorded, %s %s(receipt at %d)", ref.ProposalID,
				last.Kind, codes(last), recordedAt(&last), latest.Kind, codes(latest), recordedAt(&latest))
		}
	}
}

// latestRecorded is the latest truth the journal records for ref: its
// end, if dispatch ended it, else the intent's latest receipt if ref is
// one of its proposals.
func (w *World) latestRecorded(rec kv.Intent, ref schema.ProposalRef) (schema.Outcome, bool) {
	e, ok := rec.EndOf(ref)
	if !ok {
		if end, found := w.j.ended[ref]; found {
			e, ok = kv.EndedProposal{Ref: ref, Ended: end}, true
		}
	}
	if ok {
		return schema.FailureOutcome(ref, schema.NewIncident(e.Ended.Phase, e.Ended.Code), e.Ended.AtMs), true
	}
	if rec.Receipt == nil || !slices.Contains(rec.Proposals, ref) {
		return schema.Outcome{}, false
	}
	return intent.Outcome(rec, ref, w.now), true
}

func recordedAt(o *schema.Outcome) int64 {
	if o.Receipt == nil {
		return 0
	}
	return o.Receipt.RecordedAtMs - start
}

// checkSettlement verifies the invariants of an operator's settlement
// (SPEC §3 Reconciliation, §6 "the operator commands … settle every
// indeterminate action"):
//
//  6. the operator's attempt id is used once: one settlement at most is
//     committed, one receipt at most carries kv.OperatorAttemptID, and it
//     follows, linked, a reconciliation_required receipt;
//  7. nothing dispatches the intent after its settlement: no processor
//     sends it to the provider under a lease still open at the settlement
//     (a processor stalled before its send may still send a late request,
//     which every connector refuses), and reconciliation hands no held
//     envelope back to dispatch;
//  8. the settlement's outcome reaches every proposal of the intent (its
//     announce timer, committed with it);
//
// and with 2 and 3: no outcome of another kind follows it (unless
// recognisably stale), and it agrees with what the provider did.
func (w *World) checkSettlement(rec kv.Intent) {
	if len(w.settlements) > 1 {
		w.violate("%d operator settlements committed", len(w.settlements))
	}
	opr := kv.OperatorAttemptID(fp)
	rs := w.j.receipts[fp]
	n := 0
	for i, r := range rs {
		if r.Reconciliation == nil || r.Reconciliation.AttemptID != opr {
			continue
		}
		n++
		if i == 0 || rs[i-1].Status != schema.StatusReconciliationRequired || r.Reconciliation.PreviousReceiptID != rs[i-1].ReceiptID {
			w.violate("the operator's receipt %d does not follow, linked, a reconciliation_required receipt", i+1)
		}
	}
	if n > 1 {
		w.violate("the operator's attempt id is on %d receipts", n)
	}
	if len(w.settlements) == 0 {
		return
	}
	s := w.settlements[0]
	for _, sd := range w.sends {
		// A request sent after the settlement that a connector may act on:
		// its lease (not_after_ms, read by a clock up to the skew behind)
		// still open when the settlement was committed. A stalled
		// processor's late request is refused by the connector (SPEC §4).
		if sd.at > s.at && sd.notAfter+clockSkew.Milliseconds() >= s.at {
			w.violate("a dispatch request sent %dms after the operator's settlement, its lease open then", sd.at-s.at)
		}
	}
	for _, at := range w.redispatches {
		if at > s.at {
			w.violate("dispatched again %dms after the operator's settlement", at-s.at)
		}
	}
	for _, ref := range rec.Proposals {
		got := false
		for _, o := range w.outcomes[ref] {
			got = got || o.Receipt != nil && o.Receipt.ReceiptID == s.receiptID
		}
		if !got {
			w.violate("%s: the operator's settlement (%s) never announced to it", ref.ProposalID, s.kind)
		}
	}
}

// operatorSettled reports whether o carries an operator's settlement.
func operatorSettled(o *schema.Outcome) bool {
	return o.Receipt != nil && o.Receipt.Reconciliation != nil && o.Receipt.Reconciliation.AttemptID == kv.OperatorAttemptID(fp)
}

// staleOperator explains an absence the operator settled although the
// provider acted: when it looked, and whether the provider acted after.
func (w *World) staleOperator(final *schema.Outcome) string {
	if !operatorSettled(final) || len(w.settlements) == 0 {
		return ""
	}
	s := w.settlements[0]
	return fmt.Sprintf(" (the operator looked %dms before the fence of the receipt it examined, committed %dms after looking, on the receipt it examined: %v; the provider acted at %v)",
		s.absentAt-s.lookedAt, s.at-s.lookedAt, s.examined, w.prov.actedAt)
}

// Stats are what a run did, for the search's summary.
type Stats struct {
	Steps, Commits, Acts, Outcomes int
	Kinds                          map[schema.Kind]int
}

// Stats of the finished run.
func (w *World) Stats() Stats {
	s := Stats{Steps: w.steps, Commits: w.j.commits, Kinds: map[schema.Kind]int{}}
	for _, n := range w.prov.acts {
		s.Acts += n
	}
	for _, ref := range w.proposals {
		outs := w.outcomes[ref]
		s.Outcomes += len(outs)
		for _, o := range outs {
			if o.Terminal {
				s.Kinds[o.Kind]++
				break
			}
		}
	}
	return s
}

// older reports whether outcome o carries a receipt older than final's:
// a stale republication (a processor that loaded the record before the
// terminal receipt and published after it).
func older(o, final *schema.Outcome) bool {
	return o.Receipt != nil && final.Receipt != nil && o.Receipt.RecordedAtMs < final.Receipt.RecordedAtMs
}

// deniedAtReCheck reports whether final is the answer dispatch's re-check
// gave ref alone (its end recorded on the intent, the same code).
func deniedAtReCheck(rec kv.Intent, ref schema.ProposalRef, final *schema.Outcome) bool {
	e, ok := rec.EndOf(ref)
	return ok && len(final.Incidents) == 1 && final.Incidents[0].Code == e.Ended.Code && e.Ended.Phase != schema.PhaseDispatch
}
