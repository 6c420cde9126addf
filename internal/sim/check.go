package sim

import (
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// check verifies the invariants of a finished run (issue 26, item 1's
// list, as far as this simulation sees them):
//
//  1. the provider acted at most once per idempotency key;
//  2. every proposal ended with a terminal outcome, and all its terminal
//     outcomes agree (one answer, however often it is republished); an
//     outcome of another kind published after the terminal one must be
//     recognisably stale: it carries an older receipt (finding 2, doc.go);
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
// sent. Those are consistent with the provider (checked by 3).
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
			if acted {
				w.violate("%s: %s %s but the provider acted", ref.ProposalID, final.Kind, codes(*final))
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
