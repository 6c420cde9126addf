package intent

import (
	"slices"
	"strconv"
	"time"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// The record edits Apply is made of. They check nothing: Apply decides
// whether an event may happen; tests build records in any state with them.

// Settle makes verdict v, reached at step (ReceiptID's input), the
// intent's latest receipt — the one edit by which receipts change a
// record, for dispatch, reconciliation and operators alike. link ties a
// reconciliation receipt to its attempt and predecessor (nil for the
// dispatch receipt); disclosure is the dispatch's disclosure record, carried
// over by later receipts. recorded_at_ms never goes backwards within a
// fingerprint's history. It returns the new receipt.
func Settle(r *kv.Intent, v kv.Verdict, step string, link *schema.ReceiptReconcileRef, disclosure *schema.DisclosureRecord, nowMs int64) schema.Receipt {
	refs := slices.Clone(v.EvidenceRefs)
	if refs == nil {
		refs = []string{}
	}
	rc := schema.Receipt{
		ReceiptID:         kv.ReceiptID(r.Fingerprint, step),
		Fingerprint:       r.Fingerprint,
		IdempotencyKey:    r.IdempotencyKey,
		Provider:          r.Provider,
		Capability:        r.Capability,
		Operation:         r.Operation,
		Environment:       r.Environment,
		Adapter:           r.Adapter,
		Status:            v.Status,
		DispatchAttempted: v.Attempted,
		NextAction:        v.NextAction,
		ProviderActionID:  v.ProviderActionID,
		EvidenceRefs:      refs,
		ErrorCode:         v.ErrorCode,
		Disclosure:        disclosure,
		Reconciliation:    link,
		RecordedAtMs:      nowMs,
	}
	if r.ReceiptAfterMs > 0 {
		rc.RecordedAtMs = max(nowMs, r.ReceiptAfterMs+1)
	}
	if prev := r.Receipt; prev != nil {
		rc.RecordedAtMs = max(rc.RecordedAtMs, prev.RecordedAtMs+1)
		if rc.Disclosure == nil && prev.Disclosure != nil {
			d := *prev.Disclosure
			d.FieldClasses = slices.Clone(d.FieldClasses)
			rc.Disclosure = &d
		}
	}
	r.State = kv.StateDone
	r.ReceiptSeq++
	stored := rc
	r.Receipt = &stored
	kind := rc.OutcomeKind()
	r.Latest = kv.Latest{Kind: kind, Terminal: kind.Terminal() || v.Exhausted, Incidents: slices.Clone(v.Incidents)}
	r.ReconcileExhausted = v.Exhausted
	if v.Resolution != "" {
		r.Resolution = v.Resolution
	}
	r.UpdatedAtMs = nowMs
	return rc
}

// MarkLost makes the intent dispatchable again after reconciliation found
// its request lost in flight (kv.StateLost): the latest receipt stays in
// the history, but no longer answers new proposals; the next dispatch
// writes a new in-flight record, with a new lease, and a new receipt.
func MarkLost(r *kv.Intent, nowMs int64) {
	r.State = kv.StateLost
	if r.Receipt != nil {
		r.ReceiptAfterMs = max(r.ReceiptAfterMs, r.Receipt.RecordedAtMs)
	}
	r.Receipt = nil
	r.ReconcileExhausted = false
	r.ReconcileNextAtMs = 0
	r.Redispatches++
	r.UpdatedAtMs = nowMs
}

// LostInFlight reports whether the record's last dispatch left its effect
// unknown for want of an answer — a timeout, a transport error, a
// processor stopped or paused between its in-flight record and the reply —
// so that a provider that says it never received the request may simply
// not have: the request was lost on the way, not refused.
func LostInFlight(r kv.Intent) bool {
	switch r.DispatchCode {
	case schema.CodeAdapterTimeout, schema.CodeAdapterError, schema.CodeDispatchInterrupted:
		return r.Redispatches < kv.MaxRedispatches
	}
	return false
}

// DispatchStep is the ReceiptID step of a receipt of the intent's current
// dispatch, named base ("dispatch", "interrupted"): base itself, then
// "<base>-<n>" after n redispatches, so that every receipt has an id of
// its own.
func DispatchStep(r kv.Intent, base string) string {
	if r.Redispatches == 0 {
		return base
	}
	return base + "-" + strconv.Itoa(r.Redispatches)
}

// AwaitsRedispatch reports whether the record waits for its redispatch
// number n — the intent reopened after its request was found lost (no
// receipt, kv.StateLost) and n its latest reopening's hand-off. The held
// stream keeps one envelope per intent, so no other redispatch of it is
// coming. So it is while that redispatch's attempts reach nobody
// (kv.StateNotInvoked, no receipt yet): a denial at the re-check of the
// next attempt leaves the intent as unsent as one before the first (found
// by internal/sim, seed 52819: the intent stayed not-invoked, its other
// proposal at RECONCILIATION_REQUIRED for good).
func AwaitsRedispatch(r kv.Intent, n int) bool {
	return n > 0 && n == r.Redispatches && r.Receipt == nil &&
		(r.State == kv.StateLost || r.State == kv.StateNotInvoked)
}

// LeaseWait is how long a processor (instance id self) that finds rec in
// flight without a receipt waits before looking again, at nowMs: 0 when it
// may declare the dispatch interrupted — the record is its own (written by
// it before a restart: nothing of that run is still calling; or by this
// run, whose call ended without a receipt, since the fingerprint's lock
// excludes a concurrent call), predates leases, or its lease has ended:
// nowMs is past InFlightUntilMs, the request's not_after_ms, after which
// no connector acts on it (SPEC §4).
// Otherwise the writer may be in the call right now: a quarter of the
// lease's rest, between 250ms and 5s, and never past its end.
func LeaseWait(rec kv.Intent, self string, nowMs int64) time.Duration {
	if rec.InFlightBy == "" || rec.InFlightBy == self || nowMs > rec.InFlightUntilMs {
		return 0
	}
	left := time.Duration(rec.InFlightUntilMs-nowMs) * time.Millisecond
	return min(max(left/4, 250*time.Millisecond), 5*time.Second, left+time.Millisecond)
}

// Outcome is the outcome the intent's latest receipt gives a proposal:
// recorded_earlier when the receipt is of another proposal's dispatch
// (SPEC §2.4).
func Outcome(r kv.Intent, to schema.ProposalRef, nowMs int64) schema.Outcome {
	o := schema.NewOutcome(to, r.Latest.Kind, nowMs, slices.Clone(r.Latest.Incidents)...)
	o.Terminal = r.Latest.Terminal
	o.Fingerprint = schema.StringPtr(r.Fingerprint)
	o.Referent = schema.StringPtr(r.Referent)
	if r.Receipt != nil {
		rc := *r.Receipt
		o.Receipt = &rc
		if by, ok := dispatcher(r); ok && by != to {
			o.RecordedEarlier = true
		}
	}
	return o
}

// dispatcher is the proposal whose dispatch made the latest receipt:
// DispatchedFor, or in a record written before it existed the intent's
// first proposal (the one that dispatched it, unless it was ended since).
func dispatcher(r kv.Intent) (schema.ProposalRef, bool) {
	switch {
	case r.DispatchedFor != nil:
		return *r.DispatchedFor, true
	case len(r.Proposals) > 0:
		return r.Proposals[0], true
	}
	return schema.ProposalRef{}, false
}

// Outcomes is the latest outcome for every proposal of the intent.
func Outcomes(r kv.Intent, nowMs int64) []schema.Outcome {
	out := make([]schema.Outcome, 0, len(r.Proposals))
	for _, ref := range r.Proposals {
		out = append(out, Outcome(r, ref, nowMs))
	}
	return out
}

// othersOf are the outcomes rec's latest receipt gives the intent's
// proposals other than ref.
func othersOf(rec kv.Intent, ref schema.ProposalRef, nowMs int64) []schema.Outcome {
	var others []schema.Outcome
	for _, o := range Outcomes(rec, nowMs) {
		if o.To() != ref {
			others = append(others, o)
		}
	}
	return others
}

// EndedOutcome is the outcome of a proposal of the intent ended without
// dispatching (a denial at dispatch's re-check, a give-up).
func EndedOutcome(r kv.Intent, ref schema.ProposalRef, e kv.Ended) schema.Outcome {
	o := schema.FailureOutcome(ref, schema.NewIncident(e.Phase, e.Code), e.AtMs)
	o.Fingerprint, o.Referent = schema.StringPtr(r.Fingerprint), schema.StringPtr(r.Referent)
	return o
}

// Project copies the record's value-free state into its activity
// snapshot: proposals, identity, and once a receipt exists, the latest
// receipt and the dispatch and reconciliation sections. A snapshot that
// already shows a later receipt keeps it.
func Project(r kv.Intent, a *schema.Activity) {
	for _, p := range r.Proposals {
		a.AddProposal(p)
	}
	a.Provider, a.Capability, a.Operation, a.Environment = r.Provider, r.Capability, r.Operation, r.Environment
	a.Referent = r.Referent
	rc := r.Receipt
	if rc == nil {
		return
	}
	if a.Receipt != nil && a.Receipt.RecordedAtMs > rc.RecordedAtMs {
		// A later receipt is there already (its writer came first: this
		// dispatch's own write was held up, by a partition say) and stays
		// the picture; a dispatch section it could not complete takes this
		// dispatch's result.
		if rc.Reconciliation == nil && (a.Dispatch == nil || a.Dispatch.FinishedAtMs == 0) {
			projectDispatch(r, a, rc)
		}
		return
	}
	latest := *rc
	a.Receipt = &latest
	a.Status = string(rc.Status)
	projectDispatch(r, a, rc)
	if rc.Disclosure != nil {
		d := *rc.Disclosure
		a.Disclosure = &d
	}
	if r.ReconcileAttempt > 0 || r.ReconcileNextAtMs > 0 || r.Resolution != "" {
		a.Reconciliation = &schema.ActivityReconciliation{
			Attempts:   r.ReconcileAttempt,
			NextAtMs:   r.ReconcileNextAtMs,
			Exhausted:  r.ReconcileExhausted,
			Resolution: r.Resolution,
		}
		if rc.Reconciliation != nil {
			a.Reconciliation.LastAttemptID = rc.Reconciliation.AttemptID
			a.Reconciliation.ResolvedBy = rc.Reconciliation.Operator
		}
	}
}

// projectDispatch copies into a's dispatch section what rc, a receipt of
// the record, says of the dispatch: when it started, and for a dispatch's
// own receipt its end and result.
func projectDispatch(r kv.Intent, a *schema.Activity, rc *schema.Receipt) {
	if a.Dispatch == nil {
		a.Dispatch = &schema.ActivityDispatch{}
	}
	a.Dispatch.Adapter = r.Adapter
	a.Dispatch.Attempted = a.Dispatch.Attempted || (rc.Reconciliation == nil && rc.DispatchAttempted)
	if r.InFlightAtMs > 0 {
		a.Dispatch.StartedAtMs = r.InFlightAtMs
	}
	if rc.Reconciliation == nil {
		a.Dispatch.FinishedAtMs = rc.RecordedAtMs
		a.Dispatch.Status = rc.Status
		a.Dispatch.ErrorCode = rc.ErrorCode
	}
}

// Verdicts the state machine makes itself.

// Interrupted is the verdict for an in-flight record without a receipt: the
// processor stopped between "begin" and "receipt", so the provider may have
// acted. It is never dispatched again.
func Interrupted() kv.Verdict {
	return kv.Verdict{Status: schema.StatusReconciliationRequired, NextAction: schema.NextReconcile, Attempted: true,
		Incidents: dispatchIncidents(schema.CodeDispatchInterrupted), ErrorCode: string(schema.CodeDispatchInterrupted)}
}

// Unavailable is the verdict of a dispatch that provably reached nobody
// for good (its provider's unavailable_retry spent, a provider no longer
// configured, a give-up after attempts that reached nobody).
func Unavailable() kv.Verdict {
	return kv.Verdict{Status: schema.StatusFailedBeforeDispatch, NextAction: schema.NextNone,
		Incidents: dispatchIncidents(schema.CodeAdapterUnavailable), ErrorCode: string(schema.CodeAdapterUnavailable)}
}

// notSentAgain is the verdict of a redispatch that cannot go: the request
// was lost, and nothing reached the provider or will.
func notSentAgain() kv.Verdict {
	return kv.Verdict{Status: schema.StatusFailedBeforeDispatch, NextAction: schema.NextNone,
		Incidents: dispatchIncidents(schema.CodeProviderFailedBeforeDispatch), ErrorCode: string(schema.CodeProviderFailedBeforeDispatch)}
}

// OperatorVerdict is the verdict of an operator who established, with
// evidence, that the effect of prev's dispatch is present (CONFIRMED) or
// absent (REJECTED). The outcome carries no incident (nothing failed);
// OPERATOR_RESOLVED goes out as an event and is the receipt's error_code,
// so that every reader can tell an operator's settlement from a
// provider's.
func OperatorVerdict(prev *schema.Receipt, present bool, evidenceRef string) kv.Verdict {
	v := kv.Verdict{Attempted: prev.DispatchAttempted, ProviderActionID: prev.ProviderActionID}
	v.Status = schema.StatusRejected
	if present {
		v.Status, v.Attempted = schema.StatusConfirmed, true
	}
	v.NextAction, v.Settled, v.Resolution = schema.NextNone, true, kv.ResolvedByOperator
	v.EvidenceRefs = []string{evidenceRef}
	v.ErrorCode = string(schema.CodeOperatorResolved)
	v.Events = []schema.Incident{schema.NewIncident(schema.PhaseReconciliation, schema.CodeOperatorResolved)}
	return v
}

func dispatchIncidents(code schema.Code) []schema.Incident {
	return []schema.Incident{schema.NewIncident(schema.PhaseDispatch, code)}
}

// IndexChange says how the indeterminate index (and the gauge) change when
// next supersedes prev: +1 when the effect becomes unknown (a verification
// exhausted), -1 when an unknown effect is settled, 0 otherwise.
func IndexChange(prev, next *schema.Receipt) int {
	was, is := kv.IndeterminateReceipt(prev), kv.IndeterminateReceipt(next)
	switch {
	case is && !was:
		return 1
	case was && !is:
		return -1
	}
	return 0
}
