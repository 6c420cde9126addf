package history

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/portcullis/portcullis/schema"
)

// Rule names an invariant a Violation breaks (a closed set).
type Rule string

// The invariants checked.
const (
	// RuleOneEffect: the provider acted at most once per idempotency key.
	RuleOneEffect Rule = "one-effect-per-key"
	// RuleOneAnswer: a proposal's terminal outcomes all give one answer
	// (republished as often as need be); anything after it is an older,
	// recognisably stale outcome, or an operator's settlement of an
	// exhausted reconciliation.
	RuleOneAnswer Rule = "one-answer-per-proposal"
	// RuleTruth: the answer agrees with the provider: CONFIRMED only if it
	// acted, an absence (FAILED_BEFORE_DISPATCH, REJECTED, or a receipt
	// saying nothing was done) never if it did; an operator's settlement
	// says what the operator declared.
	RuleTruth Rule = "answer-matches-provider"
	// RuleCause: no outcome before its proposal was published; no answer
	// from the provider before the provider received the request it
	// answers; no operator settlement before the operator's call.
	RuleCause Rule = "no-outcome-before-cause"
	// RuleApproval: a parked approval ends once: granted, declined or
	// timed out, not two of them, and not timed out twice.
	RuleApproval Rule = "approval-ended-once"
	// RuleAttempt: each reconcile attempt id reached the provider once.
	RuleAttempt Rule = "attempt-used-once"
	// RuleEnded: every proposal published got a terminal outcome (checked
	// with Options.Ended, once a run is over).
	RuleEnded Rule = "every-proposal-ended"
	// RuleLinearizable: the operator's reads are linearizable against the
	// receipts the outcomes announced (linear.go).
	RuleLinearizable Rule = "reads-linearizable"
	// RuleOrder: on each proposal's subject every outcome restates or
	// supersedes the one stored before it (SPEC §2.4 Order,
	// schema.Standing.Follows): nothing non-terminal after a terminal
	// outcome, nothing older after something newer — so the last is the
	// latest truth, what a host that recovers by a direct get reads.
	RuleOrder Rule = "outcomes-in-order"
)

// Violation is one broken invariant, value-free: proposal ids, shortened
// keys, kinds and codes.
type Violation struct {
	Rule Rule
	What string
}

func (v Violation) String() string { return string(v.Rule) + ": " + v.What }

// Options choose the checks beyond the contract's invariants.
type Options struct {
	// Ended: the run is over; every proposal published must have ended.
	Ended bool
	// VisualDir is where porcupine's HTML visualisation of a
	// non-linearizable history is written ("": not written).
	VisualDir string
}

// Check runs every checker over h and returns their violations, and the
// path of the linearizability visualisation when one was written.
func Check(h History, o Options) (bad []Violation, visual string) {
	bad = append(bad, OneEffect(h)...)
	bad = append(bad, Answers(h)...)
	bad = append(bad, Causes(h)...)
	bad = append(bad, Approvals(h)...)
	bad = append(bad, Attempts(h)...)
	bad = append(bad, Order(h)...)
	if o.Ended {
		bad = append(bad, Ended(h)...)
	}
	lin, visual := Linearizable(h, o.VisualDir)
	return append(bad, lin...), visual
}

func short(key string) string { return key[:min(len(key), 12)] }

func violation(r Rule, format string, args ...any) Violation {
	return Violation{Rule: r, What: fmt.Sprintf(format, args...)}
}

// effects counts the provider's effects by key.
func (h History) effects() map[string]int {
	n := map[string]int{}
	for _, e := range h.of(OpDispatch) {
		if e.Effect {
			n[e.Key]++
		}
	}
	return n
}

// OneEffect checks RuleOneEffect.
func OneEffect(h History) []Violation {
	var bad []Violation
	n := h.effects()
	for _, key := range slices.Sorted(maps.Keys(n)) {
		if n[key] > 1 {
			bad = append(bad, violation(RuleOneEffect, "the provider acted %d times on key %s", n[key], short(key)))
		}
	}
	return bad
}

// Attempts checks RuleAttempt.
func Attempts(h History) []Violation {
	var bad []Violation
	n := map[string]int{}
	for _, e := range h.of(OpReconcile) {
		n[e.Attempt]++
	}
	for _, id := range slices.Sorted(maps.Keys(n)) {
		if n[id] > 1 {
			bad = append(bad, violation(RuleAttempt, "reconcile attempt %s reached the provider %d times", id, n[id]))
		}
	}
	return bad
}

// keyOf is the idempotency key an outcome names ("" before grounding).
func keyOf(o *schema.Outcome) string {
	if o.Receipt != nil && o.Receipt.IdempotencyKey != "" {
		return o.Receipt.IdempotencyKey
	}
	if o.Fingerprint != nil {
		return strings.TrimPrefix(*o.Fingerprint, "sha256:")
	}
	return ""
}

func receiptID(o *schema.Outcome) string {
	if o.Receipt == nil {
		return ""
	}
	return o.Receipt.ReceiptID
}

// operatorSettled reports whether o carries an operator's resolution.
func operatorSettled(o *schema.Outcome) bool {
	return o.Receipt != nil && o.Receipt.Reconciliation != nil && o.Receipt.Reconciliation.Operator != ""
}

// exhausted reports whether o is reconciliation's terminal give-up, which
// an operator settles.
func exhausted(o *schema.Outcome) bool {
	return o.Kind == schema.KindReconciliationRequired && o.Terminal
}

// chain maps each receipt id the outcomes carried to its predecessor and
// its recorded time, to tell an older receipt from a newer one.
type chain map[string]*schema.Receipt

func (h History) chain() chain {
	c := chain{}
	for _, e := range h.of(OpOutcome) {
		if rc := e.Outcome.Receipt; rc != nil {
			c[rc.ReceiptID] = rc
		}
	}
	return c
}

// older reports whether receipt a precedes receipt b: recorded earlier,
// or an ancestor of b in the reconciliation chain.
func (c chain) older(a, b *schema.Receipt) bool {
	if a.RecordedAtMs < b.RecordedAtMs {
		return true
	}
	for seen, r := 0, b; r != nil && r.Reconciliation != nil && seen < 1000; seen++ {
		if r.Reconciliation.PreviousReceiptID == a.ReceiptID {
			return true
		}
		r = c[r.Reconciliation.PreviousReceiptID]
	}
	return false
}

// answer walks a proposal's outcomes, in the order stored, and returns its
// answer (the first terminal outcome, or an operator's settlement of an
// exhausted one) with every outcome that contradicts it.
func answer(c chain, ref schema.ProposalRef, outs []Event) (final *schema.Outcome, bad []Violation) {
	for _, e := range outs {
		o := e.Outcome
		switch {
		case final == nil:
			if o.Terminal {
				final = o
			}
		case o.Kind == final.Kind && (receiptID(o) == receiptID(final) || o.Terminal):
			// the answer, republished
		case exhausted(final) && operatorSettled(o):
			final = o
		case o.Receipt != nil && final.Receipt != nil && c.older(o.Receipt, final.Receipt):
			// a stale outcome: published late from an older record
		default:
			bad = append(bad, violation(RuleOneAnswer, "%s: %s (receipt %q) after its terminal %s (receipt %q)",
				ref.ProposalID, o.Kind, receiptID(o), final.Kind, receiptID(final)))
		}
	}
	return final, bad
}

// absence reports whether o says the intent's effect is absent.
func absence(o *schema.Outcome) bool {
	switch o.Kind {
	case schema.KindFailedBeforeDispatch, schema.KindRejected:
		return true
	}
	// A receipt speaks of the intent; DENIED and the like without one
	// speak of the proposal only (another proposal may carry the intent).
	return o.Receipt != nil && (o.EffectTruth == schema.TruthNotDispatched || o.EffectTruth == schema.TruthAbsent)
}

// Answers checks RuleOneAnswer and RuleTruth.
func Answers(h History) []Violation {
	var bad []Violation
	c := h.chain()
	effects := h.effects()
	resolved := map[string][]bool{} // key → the effects operators declared
	for _, e := range h.of(OpResolve) {
		if e.Err == "" {
			resolved[e.Key] = append(resolved[e.Key], e.Present)
		}
	}
	by, refs := h.outcomesByProposal()
	for _, ref := range refs {
		final, b := answer(c, ref, by[ref])
		bad = append(bad, b...)
		if final == nil {
			continue
		}
		key := keyOf(final)
		n := effects[key]
		switch {
		case operatorSettled(final):
			present := final.Kind == schema.KindConfirmed
			if !slices.Contains(resolved[key], present) {
				bad = append(bad, violation(RuleTruth, "%s: settled %s, but no operator declared the effect %s", ref.ProposalID, final.Kind, presence(present)))
			}
		case final.Kind == schema.KindConfirmed && n == 0:
			bad = append(bad, violation(RuleTruth, "%s: CONFIRMED, but the provider never acted on key %s", ref.ProposalID, short(key)))
		case absence(final) && n > 0:
			bad = append(bad, violation(RuleTruth, "%s: %s %v, but the provider acted on key %s", ref.ProposalID, final.Kind, codes(final), short(key)))
		}
	}
	return bad
}

func presence(present bool) string {
	if present {
		return "present"
	}
	return "absent"
}

func codes(o *schema.Outcome) []string {
	var out []string
	for _, in := range o.Incidents {
		out = append(out, string(in.Phase)+"/"+string(in.Code))
	}
	return out
}

// Order checks RuleOrder over each proposal's stored outcomes. A
// checker of any history of outcomes: a test that records one of its own
// (a partition harness, say) may call it alone.
func Order(h History) []Violation {
	var bad []Violation
	by, refs := h.outcomesByProposal()
	for _, ref := range refs {
		outs := by[ref]
		for i := 1; i < len(outs); i++ {
			prev, o := outs[i-1].Outcome, outs[i].Outcome
			if !o.Standing().Follows(prev.Standing()) {
				bad = append(bad, violation(RuleOrder, "%s: %s %v (receipt %q) stored after %s %v (receipt %q)", ref.ProposalID,
					o.Kind, codes(o), receiptID(o), prev.Kind, codes(prev), receiptID(prev)))
			}
		}
	}
	return bad
}

// Ended checks RuleEnded.
func Ended(h History) []Violation {
	var bad []Violation
	by, _ := h.outcomesByProposal()
	seen := map[schema.ProposalRef]bool{}
	for _, e := range h.of(OpPropose) {
		if seen[e.Proposal] {
			continue
		}
		seen[e.Proposal] = true
		if !slices.ContainsFunc(by[e.Proposal], func(o Event) bool { return o.Outcome.Terminal }) {
			bad = append(bad, violation(RuleEnded, "%s: no terminal outcome (%d outcomes)", e.Proposal.ProposalID, len(by[e.Proposal])))
		}
	}
	return bad
}

// firsts are the earliest Call times of the causes an outcome or a
// receipt may follow: a proposal's publication, a key's first dispatch the
// provider took in time (attempt "") or a reconcile attempt, an operator's
// first resolution of a key.
type firsts struct {
	proposed map[schema.ProposalRef]time.Time
	asked    map[[2]string]time.Time // {key, attempt}
	resolved map[string]time.Time
}

func (h History) firsts() firsts {
	f := firsts{proposed: map[schema.ProposalRef]time.Time{}, asked: map[[2]string]time.Time{}, resolved: map[string]time.Time{}}
	for _, e := range h { // ordered by Call: the first stays
		switch {
		case e.Op == OpPropose:
			setFirst(f.proposed, e.Proposal, e.Call)
		case e.Op == OpDispatch && !e.Late, e.Op == OpReconcile:
			setFirst(f.asked, [2]string{e.Key, e.Attempt}, e.Call)
		case e.Op == OpResolve:
			setFirst(f.resolved, e.Key, e.Call)
		}
	}
	return f
}

func setFirst[K comparable](m map[K]time.Time, k K, t time.Time) {
	if _, ok := m[k]; !ok {
		m[k] = t
	}
}

// providerAnswered reports whether o's receipt records an answer the
// provider gave, and to which request: a dispatch (attempt "") or a
// reconcile attempt.
func providerAnswered(o *schema.Outcome) (attempt string, ok bool) {
	rc := o.Receipt
	if rc == nil || operatorSettled(o) {
		return "", false
	}
	if rc.Reconciliation == nil {
		switch rc.Status {
		case schema.StatusConfirmed, schema.StatusAcknowledged, schema.StatusRejected:
			return "", true
		}
		return "", false
	}
	switch rc.Status {
	case schema.StatusConfirmed, schema.StatusRejected, schema.StatusFailedBeforeDispatch:
		return rc.Reconciliation.AttemptID, rc.Reconciliation.AttemptID != ""
	}
	return "", false
}

// Causes checks RuleCause.
func Causes(h History) []Violation {
	var bad []Violation
	by, refs := h.outcomesByProposal()
	f := h.firsts()
	for _, ref := range refs {
		published, ok := f.proposed[ref]
		for i, e := range by[ref] {
			o := e.Outcome
			if !ok {
				if i == 0 {
					bad = append(bad, violation(RuleCause, "%s: an outcome (%s) of a proposal never published", ref.ProposalID, o.Kind))
				}
			} else if e.Return.Before(published) {
				bad = append(bad, violation(RuleCause, "%s: %s stored %s before its proposal was published", ref.ProposalID, o.Kind, published.Sub(e.Return)))
			}
			key := keyOf(o)
			if attempt, answered := providerAnswered(o); answered {
				what := "dispatch"
				if attempt != "" {
					what = "reconcile attempt " + attempt
				}
				asked, found := f.asked[[2]string{key, attempt}]
				if !found || e.Return.Before(asked) {
					bad = append(bad, violation(RuleCause, "%s: %s (receipt %s says the provider answered) stored before the provider received the %s",
						ref.ProposalID, o.Kind, receiptID(o), what))
				}
			}
			if operatorSettled(o) {
				called, found := f.resolved[key]
				if !found || e.Return.Before(called) {
					bad = append(bad, violation(RuleCause, "%s: an operator's settlement stored before any operator settled key %s", ref.ProposalID, short(key)))
				}
			}
		}
	}
	return bad
}

// ending classifies an outcome after NEEDS_APPROVAL: how the approval
// ended ("" if it did not end it).
func ending(o *schema.Outcome) string {
	for _, in := range o.Incidents {
		switch in.Code {
		case schema.CodeApprovalTimedOut:
			return "timed out"
		case schema.CodeApprovalDeclined:
			return "declined"
		}
	}
	if o.Kind == schema.KindNeedsApproval {
		return ""
	}
	return "decided" // granted (dispatched or refused at the re-check)
}

// Approvals checks RuleApproval: after a proposal's first NEEDS_APPROVAL,
// its outcomes end the approval one way only, and a timeout or a decline
// happens once (a republished one keeps its at_ms).
func Approvals(h History) []Violation {
	var bad []Violation
	by, refs := h.outcomesByProposal()
	for _, ref := range refs {
		parked := false
		ends := map[string]map[int64]bool{}
		for _, e := range by[ref] {
			o := e.Outcome
			if !parked {
				parked = o.Kind == schema.KindNeedsApproval
				continue
			}
			if how := ending(o); how != "" {
				if ends[how] == nil {
					ends[how] = map[int64]bool{}
				}
				ends[how][o.AtMs] = true
			}
		}
		hows := slices.Sorted(maps.Keys(ends))
		if len(hows) > 1 {
			bad = append(bad, violation(RuleApproval, "%s: the approval ended %s", ref.ProposalID, strings.Join(hows, " and ")))
		}
		for _, how := range []string{"timed out", "declined"} {
			if n := len(ends[how]); n > 1 {
				bad = append(bad, violation(RuleApproval, "%s: the approval %s %d times", ref.ProposalID, how, n))
			}
		}
	}
	return bad
}
