// Package reconciliation is the stage after dispatch (SPEC §3
// Reconciliation): it verifies `acknowledged` receipts and reconciles
// `reconciliation_required` ones through the provider adapter's read-only
// Reconcile method, never by dispatching again. Each poll is one attempt
// with a stable attempt_id, checkpointed in Pebble before the provider is
// asked, so that a replayed attempt is never asked twice; each result is a
// new receipt linked to the previous one and a new outcome for every
// proposal of the intent. What stays unknown after
// reconciliation.max_attempts is RECONCILE_EXHAUSTED, for an operator to
// settle with evidence (Stage.Resolve, `processor reconcile resolve`).
//
// decide.go is the pure part: attempt identities, backoff, how an answer
// becomes a receipt and an outcome. stage.go does the I/O.
package reconciliation

import (
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/dispatch"
)

// Resolutions recorded on the intent and in its activity snapshot.
const (
	ResolvedByProvider = "provider"
	ResolvedByOperator = "operator"
)

// AttemptID is the stable id of poll n (1-based) of a fingerprint: the same
// fingerprint and number always give the same id, a later poll a new one.
func AttemptID(fingerprint string, n int) string {
	return "rcn_" + short(fingerprint) + "_" + strconv.Itoa(n)
}

// OperatorAttemptID names the operator's settlement in its receipt's
// reconciliation.attempt_id. There is at most one per fingerprint: a
// settled fingerprint cannot be resolved again.
func OperatorAttemptID(fingerprint string) string { return "opr_" + short(fingerprint) }

func short(fingerprint string) string {
	h := dispatch.FingerprintHex(fingerprint)
	return h[:min(16, len(h))]
}

// MaxBackoffFactor caps the wait between polls at this many intervals.
const MaxBackoffFactor = 32

// Backoff is the wait before poll n (n ≥ 1): interval·2^(n-1), at most
// MaxBackoffFactor·interval. Dispatch schedules poll 1 one interval after
// its receipt.
func Backoff(interval time.Duration, n int) time.Duration {
	d := interval
	for i := 1; i < n && d < MaxBackoffFactor*interval; i++ {
		d *= 2
	}
	return min(d, MaxBackoffFactor*interval)
}

// Verdict is what one attempt (or the operator) established.
type Verdict struct {
	// Status and NextAction of the new receipt.
	Status     schema.Status
	NextAction schema.NextAction
	// Attempted is the receipt's dispatch_attempted: false only once the
	// provider said it never received the action.
	Attempted bool
	// Incidents go into the outcome (and out as events); Events go out as
	// incident events only.
	Incidents []schema.Incident
	Events    []schema.Incident
	// ErrorCode is the receipt's error_code: the provider's own code when it
	// gave one, otherwise the incident's.
	ErrorCode        string
	ProviderActionID string
	EvidenceRefs     []string
	// Settled: the effect's truth is known (present, absent, never
	// received); polling stops.
	Settled bool
	// Exhausted: the last allowed attempt could not tell; polling stops and
	// the outcome is terminal RECONCILIATION_REQUIRED for an operator.
	Exhausted bool
	// AttemptStatus is the `status` label of
	// actions_reconciliation_attempts_total ("" for the operator).
	AttemptStatus string
	// Operator is the configured name of the operator who settled the
	// effect ("" for a provider's answer, or an unsigned resolution).
	Operator string
}

// Verifying reports whether prev is a receipt whose effect is being
// verified (acknowledged by the provider) rather than reconciled.
func Verifying(prev *schema.Receipt) bool { return prev.Status == schema.StatusAcknowledged }

func base(prev *schema.Receipt) Verdict {
	return Verdict{Attempted: prev.DispatchAttempted, ProviderActionID: prev.ProviderActionID, EvidenceRefs: []string{}}
}

// Decide maps attempt n (of maxAttempts) of verifying or reconciling prev
// to a verdict, from the adapter's reply or error (SPEC §3 Reconciliation;
// the adapters package says what each error means).
//
// A definite answer settles the effect whichever receipt is checked:
// confirmed → CONFIRMED, rejected (absent) → REJECTED with the dispatch
// incident PROVIDER_REJECTED, failed_before_dispatch → FAILED_BEFORE_DISPATCH
// with PROVIDER_FAILED_BEFORE_DISPATCH: the phase names what failed (the
// dispatch), whichever stage found out.
//
// An answer that cannot tell (indeterminate, no responders, a timeout or
// error, a malformed reply) changes nothing about what is known: a
// reconciliation_required receipt stays so (RECONCILIATION_REQUIRED with
// the attempt's reconciliation incident), and an acknowledged one stays
// acknowledged (ACKNOWLEDGED; the attempt's incident is an event only:
// the provider did accept the action, and verification failing says nothing
// new about it). After the last attempt either becomes terminal
// RECONCILIATION_REQUIRED with the attempt's incident and RECONCILE_EXHAUSTED.
func Decide(prev *schema.Receipt, reply schema.AdapterReply, err error, n, maxAttempts int) Verdict {
	v := base(prev)
	if err != nil {
		status, code := metrics.AttemptError, schema.CodeReconcileError
		switch {
		case errors.Is(err, adapters.ErrNotInvoked):
			status, code = metrics.AttemptUnavailable, schema.CodeReconcileUnavailable
		case errors.Is(err, adapters.ErrMalformedReply):
			status, code = metrics.AttemptMalformed, schema.CodeMalformedAdapterResult
		}
		return unknown(v, prev, status, code, "", n, maxAttempts)
	}
	if reply.ProviderActionID != "" {
		v.ProviderActionID = reply.ProviderActionID
	}
	if len(reply.EvidenceRefs) > 0 {
		v.EvidenceRefs = slices.Clone(reply.EvidenceRefs)
	}
	v.ErrorCode = reply.ErrorCode
	var inc *schema.Incident
	switch reply.Outcome {
	case schema.ReplyConfirmed:
		v.Status, v.Attempted = schema.StatusConfirmed, true
	case schema.ReplyRejected:
		v.Status, v.Attempted = schema.StatusRejected, true
		i := schema.NewIncident(schema.PhaseDispatch, schema.CodeProviderRejected)
		inc = &i
	case schema.ReplyFailedBeforeDispatch:
		v.Status, v.Attempted = schema.StatusFailedBeforeDispatch, false
		i := schema.NewIncident(schema.PhaseDispatch, schema.CodeProviderFailedBeforeDispatch)
		inc = &i
	default: // indeterminate: the adapters refuse any other outcome as malformed
		return unknown(v, prev, metrics.AttemptIndeterminate, schema.CodeProviderIndeterminate, reply.ErrorCode, n, maxAttempts)
	}
	v.NextAction, v.Settled, v.AttemptStatus = schema.NextNone, true, reply.Outcome
	if inc != nil {
		v.Incidents = []schema.Incident{*inc}
		if v.ErrorCode == "" {
			v.ErrorCode = string(inc.Code)
		}
	}
	return v
}

// Replayed is the verdict of attempt n found started but unfinished (the
// processor stopped while the provider was being asked): the provider is
// not asked again, and the attempt counts as RECONCILE_ERROR.
func Replayed(prev *schema.Receipt, n, maxAttempts int) Verdict {
	return unknown(base(prev), prev, metrics.AttemptReplayed, schema.CodeReconcileError, "", n, maxAttempts)
}

// Abandoned is the verdict of attempt n that the stage gave up on before
// asking the provider (its store or stream kept failing): RECONCILE_ERROR,
// so that polling moves on instead of stopping silently.
func Abandoned(prev *schema.Receipt, n, maxAttempts int) Verdict {
	return unknown(base(prev), prev, metrics.AttemptError, schema.CodeReconcileError, "", n, maxAttempts)
}

func unknown(v Verdict, prev *schema.Receipt, status string, code schema.Code, providerCode string, n, maxAttempts int) Verdict {
	inc := schema.NewIncident(schema.PhaseReconciliation, code)
	v.AttemptStatus = status
	v.ErrorCode = providerCode
	if v.ErrorCode == "" {
		v.ErrorCode = string(code)
	}
	switch {
	case n >= maxAttempts:
		v.Status, v.NextAction, v.Exhausted = schema.StatusReconciliationRequired, schema.NextNone, true
		v.Incidents = []schema.Incident{inc, schema.NewIncident(schema.PhaseReconciliation, schema.CodeReconcileExhausted)}
		v.ErrorCode = string(schema.CodeReconcileExhausted)
	case Verifying(prev):
		v.Status, v.NextAction = schema.StatusAcknowledged, schema.NextVerify
		v.Events = []schema.Incident{inc}
	default:
		v.Status, v.NextAction = schema.StatusReconciliationRequired, schema.NextReconcile
		v.Incidents = []schema.Incident{inc}
	}
	return v
}

// Operator is the verdict of the operator named operator (a configured
// name, "" when unknown) who established, with evidence, that the effect
// is present (CONFIRMED) or absent (REJECTED). The outcome carries no
// incident (nothing failed); OPERATOR_RESOLVED goes out as an event and is
// the receipt's error_code, so that every reader can tell an operator's
// settlement from a provider's; the receipt names the operator.
func Operator(prev *schema.Receipt, present bool, evidenceRef, operator string) Verdict {
	v := base(prev)
	v.Operator = operator
	v.Status = schema.StatusRejected
	if present {
		v.Status, v.Attempted = schema.StatusConfirmed, true
	}
	v.NextAction, v.Settled = schema.NextNone, true
	v.EvidenceRefs = []string{evidenceRef}
	v.ErrorCode = string(schema.CodeOperatorResolved)
	v.Events = []schema.Incident{schema.NewIncident(schema.PhaseReconciliation, schema.CodeOperatorResolved)}
	return v
}

// NewReceipt is the receipt of a verdict: the intent's identity, the
// verdict, linked to prev by attemptID (and naming v.Operator). The disclosure record carries over:
// it describes the dispatch the receipt is about. recorded_at_ms never goes
// backwards within a fingerprint's history, so "latest" is also "last
// recorded" for readers of the activity record.
func NewReceipt(prev *schema.Receipt, v Verdict, attemptID, step string, nowMs int64) schema.Receipt {
	r := schema.Receipt{
		ReceiptID:         dispatch.ReceiptID(prev.Fingerprint, step),
		Fingerprint:       prev.Fingerprint,
		IdempotencyKey:    prev.IdempotencyKey,
		Provider:          prev.Provider,
		Capability:        prev.Capability,
		Operation:         prev.Operation,
		Environment:       prev.Environment,
		Adapter:           prev.Adapter,
		Status:            v.Status,
		DispatchAttempted: v.Attempted,
		NextAction:        v.NextAction,
		ProviderActionID:  v.ProviderActionID,
		EvidenceRefs:      slices.Clone(v.EvidenceRefs),
		ErrorCode:         v.ErrorCode,
		Reconciliation:    &schema.ReceiptReconcileRef{AttemptID: attemptID, PreviousReceiptID: prev.ReceiptID, Operator: v.Operator},
		RecordedAtMs:      max(nowMs, prev.RecordedAtMs+1),
	}
	if r.EvidenceRefs == nil {
		r.EvidenceRefs = []string{}
	}
	if prev.Disclosure != nil {
		d := *prev.Disclosure
		d.FieldClasses = slices.Clone(d.FieldClasses)
		r.Disclosure = &d
	}
	return r
}

// AttemptStep is the receipt step of attempt attemptID (ReceiptID's input).
func AttemptStep(attemptID string) string { return "reconcile/" + attemptID }

// OperatorStep is the receipt step of the operator's settlement.
const OperatorStep = "operator"

// Apply records receipt r of verdict v as the intent's latest: the journal,
// the outcome later proposals get, and whether polling is exhausted.
func Apply(in *kv.Intent, r schema.Receipt, v Verdict, nowMs int64) {
	in.State = kv.IntentDone
	in.ReceiptSeq++
	rc := r
	in.Receipt = &rc
	in.OutcomeKind = r.OutcomeKind()
	in.OutcomeTerminal = in.OutcomeKind.Terminal() || v.Exhausted
	in.OutcomeIncidents = nil
	if len(v.Incidents) > 0 {
		in.OutcomeIncidents = slices.Clone(v.Incidents)
	}
	in.ReconcileExhausted = v.Exhausted
	in.UpdatedAtMs = nowMs
}

// IndexChange says how the indeterminate index (and the gauge) change when
// next supersedes prev: +1 when the effect becomes unknown (a verification
// exhausted), -1 when an unknown effect is settled, 0 otherwise.
func IndexChange(prev, next *schema.Receipt) int {
	was, is := dispatch.Indeterminate(prev), dispatch.Indeterminate(next)
	switch {
	case is && !was:
		return 1
	case was && !is:
		return -1
	}
	return 0
}

// NeedsWork reports whether an intent's latest receipt is still being
// verified or reconciled by the stage.
func NeedsWork(in *kv.Intent) bool {
	return in.Receipt != nil && in.Receipt.NextAction != schema.NextNone && !in.ReconcileExhausted && in.Resolution == ""
}
