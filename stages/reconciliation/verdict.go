package reconciliation

import (
	"errors"
	"slices"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/intent"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/adapter"
)

// Finding is what one attempt (or the operator) established: the
// receipt's verdict, and the attempt's status for
// actions_reconciliation_attempts_total ("" for the operator).
type Finding struct {
	kv.Verdict
	AttemptStatus string
	// Operator names the operator who settled it (Operator verdicts only).
	Operator string
	// NotBeforeMs, when set, is the earliest moment of the next poll.
	NotBeforeMs int64
}

// Absent reports whether v concludes that the action had no effect: the
// provider answered rejected or failed_before_dispatch.
func Absent(v Finding) bool {
	return v.Settled && v.Resolution == kv.ResolvedByProvider &&
		(v.Status == schema.StatusRejected || v.Status == schema.StatusFailedBeforeDispatch)
}

// Verifying reports whether prev is a receipt whose effect is being
// verified (acknowledged by the provider) rather than reconciled.
func Verifying(prev *schema.Receipt) bool { return prev.Status == schema.StatusAcknowledged }

func base(prev *schema.Receipt) Finding {
	return Finding{Verdict: kv.Verdict{Attempted: prev.DispatchAttempted, ProviderActionID: prev.ProviderActionID, EvidenceRefs: []string{}}}
}

// Decide maps attempt n (of maxAttempts) of verifying or reconciling prev
// to a verdict, from the adapter's reply or error (SPEC §3 Reconciliation;
// stages/adapter says what each error means).
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
func Decide(prev *schema.Receipt, reply schema.AdapterReply, err error, n, maxAttempts int) Finding {
	v := base(prev)
	if err != nil {
		status, code := metrics.AttemptError, schema.CodeReconcileError
		switch {
		case errors.Is(err, adapter.ErrNotInvoked):
			status, code = metrics.AttemptUnavailable, schema.CodeReconcileUnavailable
		case errors.Is(err, adapter.ErrMalformedReply):
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
	v.Resolution = kv.ResolvedByProvider
	if inc != nil {
		v.Incidents = []schema.Incident{*inc}
		if v.ErrorCode == "" {
			v.ErrorCode = string(inc.Code)
		}
	}
	return v
}

// Early is the verdict of attempt n whose provider answered that the
// action is absent (reply: rejected or failed_before_dispatch) before that
// can be believed (Rules.AbsentAfter): the dispatch's request may still
// reach a connector, or be acted on by one whose clock is behind. Nothing
// is concluded: the effect stays unknown (PROVIDER_INDETERMINATE, with the
// provider's own code), and the next attempt, with a new attempt id, comes
// no earlier than notBeforeMs. This attempt never exhausts reconciliation,
// even as the last one: an answer it could not yet believe is not an
// answer that could not tell.
func Early(prev *schema.Receipt, reply schema.AdapterReply, n int, notBeforeMs int64) Finding {
	v := unknown(base(prev), prev, reply.Outcome, schema.CodeProviderIndeterminate, reply.ErrorCode, n, n+1)
	v.NotBeforeMs = notBeforeMs
	return v
}

// Replayed is the verdict of attempt n found started but unfinished (the
// processor stopped while the provider was being asked): the provider is
// not asked again, and the attempt counts as RECONCILE_ERROR.
func Replayed(prev *schema.Receipt, n, maxAttempts int) Finding {
	return unknown(base(prev), prev, metrics.AttemptReplayed, schema.CodeReconcileError, "", n, maxAttempts)
}

// Abandoned is the verdict of attempt n that the stage gave up on before
// asking the provider (its store or stream kept failing): RECONCILE_ERROR,
// so that polling moves on instead of stopping silently.
func Abandoned(prev *schema.Receipt, n, maxAttempts int) Finding {
	return unknown(base(prev), prev, metrics.AttemptError, schema.CodeReconcileError, "", n, maxAttempts)
}

func unknown(v Finding, prev *schema.Receipt, status string, code schema.Code, providerCode string, n, maxAttempts int) Finding {
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
func Operator(prev *schema.Receipt, present bool, evidenceRef, operator string) Finding {
	return Finding{Verdict: intent.OperatorVerdict(prev, present, evidenceRef), Operator: operator}
}
