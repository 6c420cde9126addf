package schema

// Phases name where an incident arose (SPEC §2.5).
const (
	PhaseAdmission      = "admission"
	PhaseGrounding      = "grounding"
	PhaseAuthorization  = "authorization"
	PhaseDisclosure     = "disclosure"
	PhaseDispatch       = "dispatch"
	PhaseReconciliation = "reconciliation"
)

// Phases lists every phase, in pipeline order.
var Phases = []string{PhaseAdmission, PhaseGrounding, PhaseAuthorization, PhaseDisclosure, PhaseDispatch, PhaseReconciliation}

// Dispatch boundaries say whether a provider may have seen the action.
const (
	BoundaryNotInvoked = "not_invoked"
	BoundaryInvoked    = "invoked"
	BoundaryUnknown    = "unknown"
)

// Outcome kinds (SPEC §2.4).
const (
	KindDenied                 = "DENIED"
	KindNeedsClarification     = "NEEDS_CLARIFICATION"
	KindIntegrationFailure     = "INTEGRATION_FAILURE"
	KindNeedsApproval          = "NEEDS_APPROVAL"
	KindFailedBeforeDispatch   = "FAILED_BEFORE_DISPATCH"
	KindAcknowledged           = "ACKNOWLEDGED"
	KindConfirmed              = "CONFIRMED"
	KindRejected               = "REJECTED"
	KindReconciliationRequired = "RECONCILIATION_REQUIRED"
)

// Effect truths (SPEC §2.4).
const (
	TruthNotDispatched = "NOT_DISPATCHED"
	TruthUnverified    = "UNVERIFIED"
	TruthPresent       = "PRESENT"
	TruthAbsent        = "ABSENT"
	TruthIndeterminate = "INDETERMINATE"
)

// KindInfo is the fixed effect truth and terminality of a kind.
type KindInfo struct {
	EffectTruth string
	Terminal    bool
}

// Kinds maps every outcome kind to its effect truth and whether it is
// terminal. RECONCILIATION_REQUIRED is non-terminal except when
// reconciliation gives up (RECONCILE_EXHAUSTED), which the emitter sets.
var Kinds = map[string]KindInfo{
	KindDenied:                 {TruthNotDispatched, true},
	KindNeedsClarification:     {TruthNotDispatched, true},
	KindIntegrationFailure:     {TruthNotDispatched, true},
	KindNeedsApproval:          {TruthNotDispatched, false},
	KindFailedBeforeDispatch:   {TruthNotDispatched, true},
	KindAcknowledged:           {TruthUnverified, false},
	KindConfirmed:              {TruthPresent, true},
	KindRejected:               {TruthAbsent, true},
	KindReconciliationRequired: {TruthIndeterminate, false},
}

// Closed incident codes. Every code Portcullis can emit is listed here and
// in Codes below; nothing else ever appears in an incident.
const (
	CodeAdmissionMalformed           = "ADMISSION_MALFORMED"
	CodeAdmissionUnauthenticated     = "ADMISSION_UNAUTHENTICATED"
	CodeAdmissionTenantNotPermitted  = "ADMISSION_TENANT_NOT_PERMITTED"
	CodeAdmissionContextIncomplete   = "ADMISSION_CONTEXT_INCOMPLETE"
	CodeAdmissionProviderUnknown     = "ADMISSION_PROVIDER_UNKNOWN"
	CodeAdmissionProposalIDReused    = "ADMISSION_PROPOSAL_ID_REUSED"
	CodeInternalMessageRejected      = "INTERNAL_MESSAGE_REJECTED"
	CodeGroundingScopeMismatch       = "GROUNDING_SCOPE_MISMATCH"
	CodeDiscriminatorMissing         = "GROUNDING_RESOURCE_DISCRIMINATOR_MISSING"
	CodeDiscriminatorMismatch        = "GROUNDING_RESOURCE_DISCRIMINATOR_MISMATCH"
	CodeDiscriminationAmbiguous      = "GROUNDING_RESOURCE_DISCRIMINATION_AMBIGUOUS"
	CodeCandidatesUnbounded          = "GROUNDING_CANDIDATES_UNBOUNDED"
	CodeProjectionUnavailable        = "PROJECTION_UNAVAILABLE"
	CodeGroundingSourceUnavailable   = "GROUNDING_SOURCE_UNAVAILABLE"
	CodeApprovalRequired             = "APPROVAL_REQUIRED"
	CodeGrantUnmatched               = "GRANT_UNMATCHED"
	CodeApprovalTimedOut             = "APPROVAL_TIMED_OUT"
	CodeApprovalDeclined             = "APPROVAL_DECLINED"
	CodeGrantLifetimeExceeded        = "GRANT_LIFETIME_EXCEEDED"
	CodeGrantMalformed               = "GRANT_MALFORMED"
	CodeGrantBindingMismatch         = "GRANT_BINDING_MISMATCH"
	CodeGrantIntegrityMismatch       = "GRANT_INTEGRITY_MISMATCH"
	CodeGrantNotYetValid             = "GRANT_NOT_YET_VALID"
	CodeGrantExpired                 = "GRANT_EXPIRED"
	CodeTestGrantForLiveAction       = "TEST_GRANT_FOR_LIVE_ACTION"
	CodeExternalSpendExceedsGrant    = "EXTERNAL_SPEND_EXCEEDS_GRANT"
	CodeExternalActionsDisabled      = "EXTERNAL_ACTIONS_DISABLED"
	CodeAutomaticApprovalForbidden   = "AUTOMATIC_APPROVAL_FORBIDDEN"
	CodeLiveActionsForbidden         = "LIVE_ACTIONS_FORBIDDEN"
	CodeProviderNotAllowed           = "PROVIDER_NOT_ALLOWED"
	CodeCapabilityNotAllowed         = "CAPABILITY_NOT_ALLOWED"
	CodeEnvironmentNotAllowed        = "ENVIRONMENT_NOT_ALLOWED"
	CodeAuthenticationTooWeak        = "AUTHENTICATION_TOO_WEAK"
	CodeExternalSpendExceedsPolicy   = "EXTERNAL_SPEND_EXCEEDS_POLICY"
	CodeDisclosureUnavailable        = "PROTECTED_DISCLOSURE_UNAVAILABLE"
	CodeDisclosureRefused            = "PROTECTED_DISCLOSURE_REFUSED"
	CodeDisclosureMalformed          = "DISCLOSURE_MALFORMED"
	CodeDisclosureBindingMismatch    = "DISCLOSURE_BINDING_MISMATCH"
	CodeDisclosureReauthRequired     = "DISCLOSURE_REAUTHENTICATION_REQUIRED"
	CodeDisclosureFieldMismatch      = "DISCLOSURE_FIELD_MISMATCH"
	CodeCheckpointFailed             = "CHECKPOINT_FAILED"
	CodeAdapterUnavailable           = "ADAPTER_UNAVAILABLE"
	CodeProviderFailedBeforeDispatch = "PROVIDER_FAILED_BEFORE_DISPATCH"
	CodeProviderRejected             = "PROVIDER_REJECTED"
	CodeAdapterTimeout               = "ADAPTER_TIMEOUT"
	CodeAdapterError                 = "ADAPTER_ERROR"
	CodeDispatchInterrupted          = "DISPATCH_INTERRUPTED"
	CodeMalformedAdapterResult       = "MALFORMED_ADAPTER_RESULT"
	CodeProviderIndeterminate        = "PROVIDER_INDETERMINATE"
	CodeReconcileUnavailable         = "RECONCILE_UNAVAILABLE"
	CodeReconcileError               = "RECONCILE_ERROR"
	CodeReconcileExhausted           = "RECONCILE_EXHAUSTED"

	// Codes added beyond SPEC §2.5, each for a failure that needed its own.

	// CodeProcessingFailed ends a proposal that a stage could not process
	// after its bounded retries (a store or publish failure that persisted,
	// or a message that crashed the processor on every delivery). Emitted by
	// admission, grounding, authorization and dispatch; never after a provider may have
	// been contacted (dispatch emits it only when nothing was written for the
	// fingerprint). Reconciliation emits it as an event only, for a trigger
	// it cannot read.
	CodeProcessingFailed = "PROCESSING_FAILED"
	// CodeOperatorResolved records an operator's settlement of an
	// indeterminate effect (`processor reconcile resolve`): an incident event
	// and the settling receipt's error_code, never an outcome incident.
	CodeOperatorResolved = "OPERATOR_RESOLVED"
)

// CodeInfo is one row of the closed code table: a code in a phase, the
// outcome kind it produces (empty for event-only codes) and its boundary.
type CodeInfo struct {
	Phase    string
	Code     string
	Kind     string
	Boundary string
}

// Codes is the closed code table of SPEC §2.5 plus the additions above.
// A code may appear in more than one phase.
var Codes = []CodeInfo{
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

var codeIndex = func() map[[2]string]CodeInfo {
	m := make(map[[2]string]CodeInfo, len(Codes))
	for _, c := range Codes {
		m[[2]string{c.Phase, c.Code}] = c
	}
	return m
}()

// LookupCode returns the table row for a code in a phase.
func LookupCode(phase, code string) (CodeInfo, bool) {
	c, ok := codeIndex[[2]string{phase, code}]
	return c, ok
}

// IsPhase reports whether p is one of the closed phases.
func IsPhase(p string) bool {
	for _, q := range Phases {
		if p == q {
			return true
		}
	}
	return false
}
