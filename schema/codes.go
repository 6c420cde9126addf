package schema

// The closed sets of SPEC §2.4 and §2.5 are typed strings, as
// jetstream.AckPolicy is: a phase cannot be passed where a code is
// expected, and the wire form is the string.

// Phase names where an incident arose (SPEC §2.5).
type Phase string

// Phases.
const (
	PhaseAdmission      Phase = "admission"
	PhaseGrounding      Phase = "grounding"
	PhaseAuthorization  Phase = "authorization"
	PhaseDisclosure     Phase = "disclosure"
	PhaseDispatch       Phase = "dispatch"
	PhaseReconciliation Phase = "reconciliation"
)

// Phases lists every phase, in pipeline order (a new slice each call).
func Phases() []Phase {
	return []Phase{PhaseAdmission, PhaseGrounding, PhaseAuthorization, PhaseDisclosure, PhaseDispatch, PhaseReconciliation}
}

// Boundary says whether a provider may have seen the action.
type Boundary string

// Dispatch boundaries.
const (
	BoundaryNotInvoked Boundary = "not_invoked"
	BoundaryInvoked    Boundary = "invoked"
	BoundaryUnknown    Boundary = "unknown"
)

// Kind is an outcome kind (SPEC §2.4).
type Kind string

// Outcome kinds.
const (
	KindDenied                 Kind = "DENIED"
	KindNeedsClarification     Kind = "NEEDS_CLARIFICATION"
	KindIntegrationFailure     Kind = "INTEGRATION_FAILURE"
	KindNeedsApproval          Kind = "NEEDS_APPROVAL"
	KindFailedBeforeDispatch   Kind = "FAILED_BEFORE_DISPATCH"
	KindAcknowledged           Kind = "ACKNOWLEDGED"
	KindConfirmed              Kind = "CONFIRMED"
	KindRejected               Kind = "REJECTED"
	KindReconciliationRequired Kind = "RECONCILIATION_REQUIRED"
)

// Kinds lists every outcome kind (a new slice each call).
func Kinds() []Kind {
	return []Kind{KindDenied, KindNeedsClarification, KindIntegrationFailure, KindNeedsApproval, KindFailedBeforeDispatch,
		KindAcknowledged, KindConfirmed, KindRejected, KindReconciliationRequired}
}

// EffectTruth says what is known about an action's effect (SPEC §2.4).
type EffectTruth string

// Effect truths.
const (
	TruthNotDispatched EffectTruth = "NOT_DISPATCHED"
	TruthUnverified    EffectTruth = "UNVERIFIED"
	TruthPresent       EffectTruth = "PRESENT"
	TruthAbsent        EffectTruth = "ABSENT"
	TruthIndeterminate EffectTruth = "INDETERMINATE"
)

// EffectTruth is the kind's fixed effect truth; "" for a value outside
// the closed set.
func (k Kind) EffectTruth() EffectTruth {
	switch k {
	case KindDenied, KindNeedsClarification, KindIntegrationFailure, KindNeedsApproval, KindFailedBeforeDispatch:
		return TruthNotDispatched
	case KindAcknowledged:
		return TruthUnverified
	case KindConfirmed:
		return TruthPresent
	case KindRejected:
		return TruthAbsent
	case KindReconciliationRequired:
		return TruthIndeterminate
	}
	return ""
}

// Terminal reports whether an outcome of this kind ends its proposal.
// RECONCILIATION_REQUIRED is non-terminal except when reconciliation gives
// up (RECONCILE_EXHAUSTED), which its emitter sets.
func (k Kind) Terminal() bool {
	switch k {
	case KindNeedsApproval, KindAcknowledged, KindReconciliationRequired:
		return false
	}
	return k.EffectTruth() != ""
}

// Valid reports whether k is one of the closed kinds.
func (k Kind) Valid() bool { return k.EffectTruth() != "" }

// Code is a closed incident code (SPEC §2.5).
type Code string

// Closed incident codes. Every code Portcullis can emit is listed here and
// in Codes below; nothing else ever appears in an incident.
const (
	CodeAdmissionMalformed           Code = "ADMISSION_MALFORMED"
	CodeAdmissionUnauthenticated     Code = "ADMISSION_UNAUTHENTICATED"
	CodeAdmissionTenantNotPermitted  Code = "ADMISSION_TENANT_NOT_PERMITTED"
	CodeAdmissionContextIncomplete   Code = "ADMISSION_CONTEXT_INCOMPLETE"
	CodeAdmissionProviderUnknown     Code = "ADMISSION_PROVIDER_UNKNOWN"
	CodeAdmissionProposalIDReused    Code = "ADMISSION_PROPOSAL_ID_REUSED"
	CodeInternalMessageRejected      Code = "INTERNAL_MESSAGE_REJECTED"
	CodeGroundingScopeMismatch       Code = "GROUNDING_SCOPE_MISMATCH"
	CodeDiscriminatorMissing         Code = "GROUNDING_RESOURCE_DISCRIMINATOR_MISSING"
	CodeDiscriminatorMismatch        Code = "GROUNDING_RESOURCE_DISCRIMINATOR_MISMATCH"
	CodeDiscriminationAmbiguous      Code = "GROUNDING_RESOURCE_DISCRIMINATION_AMBIGUOUS"
	CodeCandidatesUnbounded          Code = "GROUNDING_CANDIDATES_UNBOUNDED"
	CodeProjectionUnavailable        Code = "PROJECTION_UNAVAILABLE"
	CodeGroundingSourceUnavailable   Code = "GROUNDING_SOURCE_UNAVAILABLE"
	CodeApprovalRequired             Code = "APPROVAL_REQUIRED"
	CodeGrantUnmatched               Code = "GRANT_UNMATCHED"
	CodeApprovalTimedOut             Code = "APPROVAL_TIMED_OUT"
	CodeApprovalDeclined             Code = "APPROVAL_DECLINED"
	CodeGrantLifetimeExceeded        Code = "GRANT_LIFETIME_EXCEEDED"
	CodeGrantMalformed               Code = "GRANT_MALFORMED"
	CodeGrantBindingMismatch         Code = "GRANT_BINDING_MISMATCH"
	CodeGrantIntegrityMismatch       Code = "GRANT_INTEGRITY_MISMATCH"
	CodeGrantNotYetValid             Code = "GRANT_NOT_YET_VALID"
	CodeGrantExpired                 Code = "GRANT_EXPIRED"
	CodeTestGrantForLiveAction       Code = "TEST_GRANT_FOR_LIVE_ACTION"
	CodeExternalSpendExceedsGrant    Code = "EXTERNAL_SPEND_EXCEEDS_GRANT"
	CodeExternalActionsDisabled      Code = "EXTERNAL_ACTIONS_DISABLED"
	CodeAutomaticApprovalForbidden   Code = "AUTOMATIC_APPROVAL_FORBIDDEN"
	CodeLiveActionsForbidden         Code = "LIVE_ACTIONS_FORBIDDEN"
	CodeProviderNotAllowed           Code = "PROVIDER_NOT_ALLOWED"
	CodeCapabilityNotAllowed         Code = "CAPABILITY_NOT_ALLOWED"
	CodeEnvironmentNotAllowed        Code = "ENVIRONMENT_NOT_ALLOWED"
	CodeAuthenticationTooWeak        Code = "AUTHENTICATION_TOO_WEAK"
	CodeExternalSpendExceedsPolicy   Code = "EXTERNAL_SPEND_EXCEEDS_POLICY"
	CodeDisclosureUnavailable        Code = "PROTECTED_DISCLOSURE_UNAVAILABLE"
	CodeDisclosureRefused            Code = "PROTECTED_DISCLOSURE_REFUSED"
	CodeDisclosureMalformed          Code = "DISCLOSURE_MALFORMED"
	CodeDisclosureBindingMismatch    Code = "DISCLOSURE_BINDING_MISMATCH"
	CodeDisclosureReauthRequired     Code = "DISCLOSURE_REAUTHENTICATION_REQUIRED"
	CodeDisclosureFieldMismatch      Code = "DISCLOSURE_FIELD_MISMATCH"
	CodeCheckpointFailed             Code = "CHECKPOINT_FAILED"
	CodeAdapterUnavailable           Code = "ADAPTER_UNAVAILABLE"
	CodeProviderFailedBeforeDispatch Code = "PROVIDER_FAILED_BEFORE_DISPATCH"
	CodeProviderRejected             Code = "PROVIDER_REJECTED"
	CodeAdapterTimeout               Code = "ADAPTER_TIMEOUT"
	CodeAdapterError                 Code = "ADAPTER_ERROR"
	CodeDispatchInterrupted          Code = "DISPATCH_INTERRUPTED"
	CodeMalformedAdapterResult       Code = "MALFORMED_ADAPTER_RESULT"
	CodeProviderIndeterminate        Code = "PROVIDER_INDETERMINATE"
	CodeReconcileUnavailable         Code = "RECONCILE_UNAVAILABLE"
	CodeReconcileError               Code = "RECONCILE_ERROR"
	CodeReconcileExhausted           Code = "RECONCILE_EXHAUSTED"

	// Codes added beyond SPEC §2.5, each for a failure that needed its own.

	// CodeProcessingFailed ends a proposal that a stage could not process
	// after its bounded retries (a store or publish failure that persisted,
	// or a message that crashed the processor on every delivery). Emitted by
	// admission, grounding, authorization and dispatch; never after a provider may have
	// been contacted (dispatch emits it only when nothing was written for the
	// fingerprint). Reconciliation emits it as an event only, for a trigger
	// it cannot read.
	CodeProcessingFailed Code = "PROCESSING_FAILED"
	// CodeOperatorResolved records an operator's settlement of an
	// indeterminate effect (`processor reconcile resolve`): an incident event
	// and the settling receipt's error_code, never an outcome incident.
	CodeOperatorResolved Code = "OPERATOR_RESOLVED"
)

// CodeInfo is one row of the closed code table: a code in a phase, the
// outcome kind it produces (empty for event-only codes) and its boundary.
type CodeInfo struct {
	Phase    Phase
	Code     Code
	Kind     Kind // "" for event-only codes
	Boundary Boundary
}

// Codes returns the closed code table of SPEC §2.5 plus the additions
// above (a new slice each call). A code may appear in more than one phase.
func Codes() []CodeInfo { return append([]CodeInfo(nil), codes...) }

var codes = []CodeInfo{
	{PhaseAdmission, CodeAdmissionMalformed, KindIntegrationFailure, BoundaryNotInvoked},
	// A message that fails authentication gets only an event: nothing
	// proves which host sent it (SPEC §2.7).
	{PhaseAdmission, CodeAdmissionUnauthenticated, "", BoundaryNotInvoked},
	// The outcome subject belongs to the first proposal with the id.
	{PhaseAdmission, CodeAdmissionProposalIDReused, "", BoundaryNotInvoked},
	{PhaseAdmission, CodeAdmissionTenantNotPermitted, KindDenied, BoundaryNotInvoked},
	{PhaseAdmission, CodeAdmissionContextIncomplete, KindDenied, BoundaryNotInvoked},
	{PhaseAdmission, CodeAdmissionProviderUnknown, KindDenied, BoundaryNotInvoked},
	{PhaseAdmission, CodeProcessingFailed, KindIntegrationFailure, BoundaryNotInvoked},

	{PhaseGrounding, CodeGroundingScopeMismatch, KindDenied, BoundaryNotInvoked},
	{PhaseGrounding, CodeDiscriminatorMissing, KindNeedsClarification, BoundaryNotInvoked},
	{PhaseGrounding, CodeDiscriminatorMismatch, KindNeedsClarification, BoundaryNotInvoked},
	{PhaseGrounding, CodeDiscriminationAmbiguous, KindNeedsClarification, BoundaryNotInvoked},
	{PhaseGrounding, CodeCandidatesUnbounded, KindNeedsClarification, BoundaryNotInvoked},
	{PhaseGrounding, CodeProjectionUnavailable, KindIntegrationFailure, BoundaryNotInvoked},
	{PhaseGrounding, CodeGroundingSourceUnavailable, KindIntegrationFailure, BoundaryNotInvoked},
	{PhaseGrounding, CodeProcessingFailed, KindIntegrationFailure, BoundaryNotInvoked},
	{PhaseGrounding, CodeInternalMessageRejected, "", BoundaryNotInvoked},

	{PhaseAuthorization, CodeApprovalRequired, KindNeedsApproval, BoundaryNotInvoked},
	{PhaseAuthorization, CodeGrantUnmatched, "", BoundaryNotInvoked},
	{PhaseAuthorization, CodeApprovalTimedOut, KindDenied, BoundaryNotInvoked},
	{PhaseAuthorization, CodeApprovalDeclined, KindDenied, BoundaryNotInvoked},
	{PhaseAuthorization, CodeGrantLifetimeExceeded, KindDenied, BoundaryNotInvoked},
	{PhaseAuthorization, CodeGrantMalformed, KindDenied, BoundaryNotInvoked},
	{PhaseAuthorization, CodeGrantBindingMismatch, KindDenied, BoundaryNotInvoked},
	{PhaseAuthorization, CodeGrantIntegrityMismatch, KindDenied, BoundaryNotInvoked},
	{PhaseAuthorization, CodeGrantNotYetValid, KindDenied, BoundaryNotInvoked},
	{PhaseAuthorization, CodeGrantExpired, KindDenied, BoundaryNotInvoked},
	{PhaseAuthorization, CodeTestGrantForLiveAction, KindDenied, BoundaryNotInvoked},
	{PhaseAuthorization, CodeExternalSpendExceedsGrant, KindDenied, BoundaryNotInvoked},
	{PhaseAuthorization, CodeExternalActionsDisabled, KindDenied, BoundaryNotInvoked},
	{PhaseAuthorization, CodeAutomaticApprovalForbidden, KindDenied, BoundaryNotInvoked},
	{PhaseAuthorization, CodeLiveActionsForbidden, KindDenied, BoundaryNotInvoked},
	{PhaseAuthorization, CodeProviderNotAllowed, KindDenied, BoundaryNotInvoked},
	{PhaseAuthorization, CodeCapabilityNotAllowed, KindDenied, BoundaryNotInvoked},
	{PhaseAuthorization, CodeEnvironmentNotAllowed, KindDenied, BoundaryNotInvoked},
	{PhaseAuthorization, CodeAuthenticationTooWeak, KindDenied, BoundaryNotInvoked},
	{PhaseAuthorization, CodeExternalSpendExceedsPolicy, KindDenied, BoundaryNotInvoked},
	{PhaseAuthorization, CodeProcessingFailed, KindIntegrationFailure, BoundaryNotInvoked},
	{PhaseAuthorization, CodeInternalMessageRejected, "", BoundaryNotInvoked},

	{PhaseDisclosure, CodeDisclosureUnavailable, KindDenied, BoundaryNotInvoked},
	{PhaseDisclosure, CodeDisclosureRefused, KindDenied, BoundaryNotInvoked},
	{PhaseDisclosure, CodeDisclosureMalformed, KindDenied, BoundaryNotInvoked},
	{PhaseDisclosure, CodeDisclosureBindingMismatch, KindDenied, BoundaryNotInvoked},
	{PhaseDisclosure, CodeDisclosureReauthRequired, KindDenied, BoundaryNotInvoked},
	{PhaseDisclosure, CodeDisclosureFieldMismatch, KindDenied, BoundaryNotInvoked},

	{PhaseDispatch, CodeCheckpointFailed, KindIntegrationFailure, BoundaryNotInvoked},
	{PhaseDispatch, CodeProcessingFailed, KindIntegrationFailure, BoundaryNotInvoked},
	{PhaseDispatch, CodeInternalMessageRejected, "", BoundaryNotInvoked},
	{PhaseDispatch, CodeAdapterUnavailable, KindFailedBeforeDispatch, BoundaryNotInvoked},
	{PhaseDispatch, CodeProviderFailedBeforeDispatch, KindFailedBeforeDispatch, BoundaryNotInvoked},
	{PhaseDispatch, CodeProviderRejected, KindRejected, BoundaryInvoked},
	{PhaseDispatch, CodeAdapterTimeout, KindReconciliationRequired, BoundaryUnknown},
	{PhaseDispatch, CodeAdapterError, KindReconciliationRequired, BoundaryUnknown},
	{PhaseDispatch, CodeDispatchInterrupted, KindReconciliationRequired, BoundaryUnknown},
	{PhaseDispatch, CodeMalformedAdapterResult, KindReconciliationRequired, BoundaryInvoked},
	{PhaseDispatch, CodeProviderIndeterminate, KindReconciliationRequired, BoundaryInvoked},

	{PhaseReconciliation, CodeReconcileUnavailable, KindReconciliationRequired, BoundaryInvoked},
	{PhaseReconciliation, CodeReconcileError, KindReconciliationRequired, BoundaryInvoked},
	{PhaseReconciliation, CodeMalformedAdapterResult, KindReconciliationRequired, BoundaryInvoked},
	{PhaseReconciliation, CodeProviderIndeterminate, KindReconciliationRequired, BoundaryInvoked},
	{PhaseReconciliation, CodeReconcileExhausted, KindReconciliationRequired, BoundaryInvoked},
	{PhaseReconciliation, CodeOperatorResolved, "", BoundaryInvoked},
	// A reconciliation trigger the stage could not read (event only: no
	// proposal is known; a valid trigger that keeps failing is recorded as
	// a RECONCILE_ERROR attempt instead).
	{PhaseReconciliation, CodeProcessingFailed, "", BoundaryUnknown},
	{PhaseReconciliation, CodeInternalMessageRejected, "", BoundaryNotInvoked},
}

type phaseCode struct {
	phase Phase
	code  Code
}

var codeIndex = func() map[phaseCode]CodeInfo {
	m := make(map[phaseCode]CodeInfo, len(codes))
	for _, c := range codes {
		m[phaseCode{c.Phase, c.Code}] = c
	}
	return m
}()

// LookupCode returns the table row for a code in a phase.
func LookupCode(phase Phase, code Code) (CodeInfo, bool) {
	c, ok := codeIndex[phaseCode{phase, code}]
	return c, ok
}

// PhaseOf is the phase in which a code appears when that is unique among
// prefer (for a denial code: authorization or disclosure); "" if none.
func PhaseOf(code Code, prefer ...Phase) Phase {
	for _, p := range prefer {
		if _, ok := LookupCode(p, code); ok {
			return p
		}
	}
	return ""
}

// Valid reports whether p is one of the closed phases.
func (p Phase) Valid() bool {
	for _, q := range Phases() {
		if p == q {
			return true
		}
	}
	return false
}
