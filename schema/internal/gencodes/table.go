package main

// The code table: the one place Portcullis's closed sets are written.
// Edit it, then run `go generate ./schema/...`; TestGeneratedFilesAreFresh
// fails while a generated file is out of date.
//
// Values are the wire strings (SPEC names are exact: clients depend on
// them); Const is the Go name each gets. Rows name phases, codes, kinds and
// boundaries by wire value, and the generator refuses a row that names
// one the lists above it do not have.

type named struct {
	Const, Value string
	// Doc is the Go comment above the constant ("" for none).
	Doc string
}

// phases are the phases of SPEC §2.5, in pipeline order.
var phases = []named{
	{Const: "PhaseAdmission", Value: "admission"},
	{Const: "PhaseGrounding", Value: "grounding"},
	{Const: "PhaseAuthorization", Value: "authorization"},
	{Const: "PhaseDisclosure", Value: "disclosure"},
	{Const: "PhaseDispatch", Value: "dispatch"},
	{Const: "PhaseReconciliation", Value: "reconciliation"},
}

// boundaries say whether a provider may have seen the action.
var boundaries = []named{
	{Const: "BoundaryNotInvoked", Value: "not_invoked"},
	{Const: "BoundaryInvoked", Value: "invoked"},
	{Const: "BoundaryUnknown", Value: "unknown"},
}

// truths are the effect truths of SPEC §2.4.
var truths = []named{
	{Const: "TruthNotDispatched", Value: "NOT_DISPATCHED"},
	{Const: "TruthUnverified", Value: "UNVERIFIED"},
	{Const: "TruthPresent", Value: "PRESENT"},
	{Const: "TruthAbsent", Value: "ABSENT"},
	{Const: "TruthIndeterminate", Value: "INDETERMINATE"},
}

// kind is an outcome kind of SPEC §2.4 with its fixed effect truth and
// whether it ends its proposal.
type kind struct {
	named
	Truth    string
	Terminal bool
	// Note says more about its terminality (Kind.Terminal's comment).
	Note string
}

var kinds = []kind{
	{named{Const: "KindDenied", Value: "DENIED"}, "NOT_DISPATCHED", true, ""},
	{named{Const: "KindNeedsClarification", Value: "NEEDS_CLARIFICATION"}, "NOT_DISPATCHED", true, ""},
	{named{Const: "KindIntegrationFailure", Value: "INTEGRATION_FAILURE"}, "NOT_DISPATCHED", true, ""},
	{named{Const: "KindNeedsApproval", Value: "NEEDS_APPROVAL"}, "NOT_DISPATCHED", false, ""},
	{named{Const: "KindFailedBeforeDispatch", Value: "FAILED_BEFORE_DISPATCH"}, "NOT_DISPATCHED", true, ""},
	{named{Const: "KindAcknowledged", Value: "ACKNOWLEDGED"}, "UNVERIFIED", false, ""},
	{named{Const: "KindConfirmed", Value: "CONFIRMED"}, "PRESENT", true, ""},
	{named{Const: "KindRejected", Value: "REJECTED"}, "ABSENT", true, ""},
	{named{Const: "KindReconciliationRequired", Value: "RECONCILIATION_REQUIRED"}, "INDETERMINATE", false,
		"RECONCILIATION_REQUIRED is non-terminal except when reconciliation gives\nup (RECONCILE_EXHAUSTED), which its emitter sets."},
}

// statuses are the receipt statuses of SPEC §3 Dispatch (the `status`
// label of actions_dispatches_total).
var statuses = []named{
	{Const: "StatusConfirmed", Value: "confirmed"},
	{Const: "StatusAcknowledged", Value: "acknowledged"},
	{Const: "StatusDenied", Value: "denied"},
	{Const: "StatusFailedBeforeDispatch", Value: "failed_before_dispatch"},
	{Const: "StatusRejected", Value: "rejected"},
	{Const: "StatusReconciliationRequired", Value: "reconciliation_required"},
}

// code is a closed incident code. Beyond: added beyond SPEC §2.5, each for
// a failure that needed its own (listed after the others).
type code struct {
	named
	Beyond bool
}

var codes = []code{
	{named: named{Const: "CodeAdmissionMalformed", Value: "ADMISSION_MALFORMED"}},
	{named: named{Const: "CodeAdmissionUnauthenticated", Value: "ADMISSION_UNAUTHENTICATED"}},
	{named: named{Const: "CodeAdmissionTenantNotPermitted", Value: "ADMISSION_TENANT_NOT_PERMITTED"}},
	{named: named{Const: "CodeAdmissionContextIncomplete", Value: "ADMISSION_CONTEXT_INCOMPLETE"}},
	{named: named{Const: "CodeAdmissionProviderUnknown", Value: "ADMISSION_PROVIDER_UNKNOWN"}},
	{named: named{Const: "CodeAdmissionProposalIDReused", Value: "ADMISSION_PROPOSAL_ID_REUSED"}},
	{named: named{Const: "CodeInternalMessageRejected", Value: "INTERNAL_MESSAGE_REJECTED"}},
	{named: named{Const: "CodeGroundingScopeMismatch", Value: "GROUNDING_SCOPE_MISMATCH"}},
	{named: named{Const: "CodeDiscriminatorMissing", Value: "GROUNDING_RESOURCE_DISCRIMINATOR_MISSING"}},
	{named: named{Const: "CodeDiscriminatorMismatch", Value: "GROUNDING_RESOURCE_DISCRIMINATOR_MISMATCH"}},
	{named: named{Const: "CodeDiscriminationAmbiguous", Value: "GROUNDING_RESOURCE_DISCRIMINATION_AMBIGUOUS"}},
	{named: named{Const: "CodeCandidatesUnbounded", Value: "GROUNDING_CANDIDATES_UNBOUNDED"}},
	{named: named{Const: "CodeProjectionUnavailable", Value: "PROJECTION_UNAVAILABLE"}},
	{named: named{Const: "CodeGroundingSourceUnavailable", Value: "GROUNDING_SOURCE_UNAVAILABLE"}},
	{named: named{Const: "CodeApprovalRequired", Value: "APPROVAL_REQUIRED"}},
	{named: named{Const: "CodeGrantUnmatched", Value: "GRANT_UNMATCHED"}},
	{named: named{Const: "CodeApprovalTimedOut", Value: "APPROVAL_TIMED_OUT"}},
	{named: named{Const: "CodeApprovalDeclined", Value: "APPROVAL_DECLINED"}},
	{named: named{Const: "CodeApprovalsPendingExceeded", Value: "APPROVALS_PENDING_EXCEEDED"}},
	{named: named{Const: "CodeGrantLifetimeExceeded", Value: "GRANT_LIFETIME_EXCEEDED"}},
	{named: named{Const: "CodeGrantMalformed", Value: "GRANT_MALFORMED"}},
	{named: named{Const: "CodeGrantBindingMismatch", Value: "GRANT_BINDING_MISMATCH"}},
	{named: named{Const: "CodeGrantIntegrityMismatch", Value: "GRANT_INTEGRITY_MISMATCH"}},
	{named: named{Const: "CodeGrantNotYetValid", Value: "GRANT_NOT_YET_VALID"}},
	{named: named{Const: "CodeGrantExpired", Value: "GRANT_EXPIRED"}},
	{named: named{Const: "CodeTestGrantForLiveAction", Value: "TEST_GRANT_FOR_LIVE_ACTION"}},
	{named: named{Const: "CodeExternalSpendExceedsGrant", Value: "EXTERNAL_SPEND_EXCEEDS_GRANT"}},
	{named: named{Const: "CodeExternalActionsDisabled", Value: "EXTERNAL_ACTIONS_DISABLED"}},
	{named: named{Const: "CodeAutomaticApprovalForbidden", Value: "AUTOMATIC_APPROVAL_FORBIDDEN"}},
	{named: named{Const: "CodeLiveActionsForbidden", Value: "LIVE_ACTIONS_FORBIDDEN"}},
	{named: named{Const: "CodeProviderNotAllowed", Value: "PROVIDER_NOT_ALLOWED"}},
	{named: named{Const: "CodeCapabilityNotAllowed", Value: "CAPABILITY_NOT_ALLOWED"}},
	{named: named{Const: "CodeEnvironmentNotAllowed", Value: "ENVIRONMENT_NOT_ALLOWED"}},
	{named: named{Const: "CodeAuthenticationTooWeak", Value: "AUTHENTICATION_TOO_WEAK"}},
	{named: named{Const: "CodeExternalSpendExceedsPolicy", Value: "EXTERNAL_SPEND_EXCEEDS_POLICY"}},
	{named: named{Const: "CodeDisclosureUnavailable", Value: "PROTECTED_DISCLOSURE_UNAVAILABLE"}},
	{named: named{Const: "CodeDisclosureRefused", Value: "PROTECTED_DISCLOSURE_REFUSED"}},
	{named: named{Const: "CodeDisclosureMalformed", Value: "DISCLOSURE_MALFORMED"}},
	{named: named{Const: "CodeDisclosureBindingMismatch", Value: "DISCLOSURE_BINDING_MISMATCH"}},
	{named: named{Const: "CodeDisclosureReauthRequired", Value: "DISCLOSURE_REAUTHENTICATION_REQUIRED"}},
	{named: named{Const: "CodeDisclosureFieldMismatch", Value: "DISCLOSURE_FIELD_MISMATCH"}},
	{named: named{Const: "CodeCheckpointFailed", Value: "CHECKPOINT_FAILED"}},
	{named: named{Const: "CodeAdapterUnavailable", Value: "ADAPTER_UNAVAILABLE"}},
	{named: named{Const: "CodeProviderFailedBeforeDispatch", Value: "PROVIDER_FAILED_BEFORE_DISPATCH"}},
	{named: named{Const: "CodeProviderRejected", Value: "PROVIDER_REJECTED"}},
	{named: named{Const: "CodeAdapterTimeout", Value: "ADAPTER_TIMEOUT"}},
	{named: named{Const: "CodeAdapterError", Value: "ADAPTER_ERROR"}},
	{named: named{Const: "CodeDispatchInterrupted", Value: "DISPATCH_INTERRUPTED"}},
	{named: named{Const: "CodeMalformedAdapterResult", Value: "MALFORMED_ADAPTER_RESULT"}},
	{named: named{Const: "CodeProviderIndeterminate", Value: "PROVIDER_INDETERMINATE"}},
	{named: named{Const: "CodeReconcileUnavailable", Value: "RECONCILE_UNAVAILABLE"}},
	{named: named{Const: "CodeReconcileError", Value: "RECONCILE_ERROR"}},
	{named: named{Const: "CodeReconcileExhausted", Value: "RECONCILE_EXHAUSTED"}},

	{named: named{Const: "CodeProcessingFailed", Value: "PROCESSING_FAILED", Doc: `CodeProcessingFailed ends a proposal that a stage could not process
after its bounded retries (a store or publish failure that persisted,
or a message that crashed the processor on every delivery). Emitted by
admission, grounding, authorization and dispatch; never after a provider may have
been contacted (dispatch emits it only when nothing was written for the
fingerprint). Reconciliation emits it as an event only, for a trigger
it cannot read.`}, Beyond: true},
	{named: named{Const: "CodeOperatorResolved", Value: "OPERATOR_RESOLVED", Doc: "CodeOperatorResolved records an operator's settlement of an\nindeterminate effect (`processor reconcile resolve`): an incident event\nand the settling receipt's error_code, never an outcome incident."}, Beyond: true},
}

// row is one row of the closed code table: a code in a phase, the outcome
// kind it produces ("" for an event-only code) and its dispatch boundary.
// A code may appear in more than one phase. Doc is a comment above the row.
type row struct {
	Phase, Code, Kind, Boundary string
	Doc                         string
}

var rows = []row{
	{Phase: "admission", Code: "ADMISSION_MALFORMED", Kind: "INTEGRATION_FAILURE", Boundary: "not_invoked"},
	{Phase: "admission", Code: "ADMISSION_UNAUTHENTICATED", Boundary: "not_invoked",
		Doc: "A message that fails authentication gets only an event: nothing\nproves which host sent it (SPEC §2.7)."},
	{Phase: "admission", Code: "ADMISSION_PROPOSAL_ID_REUSED", Boundary: "not_invoked",
		Doc: "The outcome subject belongs to the first proposal with the id."},
	{Phase: "admission", Code: "ADMISSION_TENANT_NOT_PERMITTED", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "admission", Code: "ADMISSION_CONTEXT_INCOMPLETE", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "admission", Code: "ADMISSION_PROVIDER_UNKNOWN", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "admission", Code: "PROCESSING_FAILED", Kind: "INTEGRATION_FAILURE", Boundary: "not_invoked"},

	{Phase: "grounding", Code: "GROUNDING_SCOPE_MISMATCH", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "grounding", Code: "GROUNDING_RESOURCE_DISCRIMINATOR_MISSING", Kind: "NEEDS_CLARIFICATION", Boundary: "not_invoked"},
	{Phase: "grounding", Code: "GROUNDING_RESOURCE_DISCRIMINATOR_MISMATCH", Kind: "NEEDS_CLARIFICATION", Boundary: "not_invoked"},
	{Phase: "grounding", Code: "GROUNDING_RESOURCE_DISCRIMINATION_AMBIGUOUS", Kind: "NEEDS_CLARIFICATION", Boundary: "not_invoked"},
	{Phase: "grounding", Code: "GROUNDING_CANDIDATES_UNBOUNDED", Kind: "NEEDS_CLARIFICATION", Boundary: "not_invoked"},
	{Phase: "grounding", Code: "PROJECTION_UNAVAILABLE", Kind: "INTEGRATION_FAILURE", Boundary: "not_invoked"},
	{Phase: "grounding", Code: "GROUNDING_SOURCE_UNAVAILABLE", Kind: "INTEGRATION_FAILURE", Boundary: "not_invoked"},
	{Phase: "grounding", Code: "PROCESSING_FAILED", Kind: "INTEGRATION_FAILURE", Boundary: "not_invoked"},
	{Phase: "grounding", Code: "INTERNAL_MESSAGE_REJECTED", Boundary: "not_invoked"},

	{Phase: "authorization", Code: "APPROVAL_REQUIRED", Kind: "NEEDS_APPROVAL", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "GRANT_UNMATCHED", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "APPROVAL_TIMED_OUT", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "APPROVAL_DECLINED", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "APPROVALS_PENDING_EXCEEDED", Kind: "DENIED", Boundary: "not_invoked",
		Doc: "The proposal would park, but its host's proposals waiting for\napproval fill its budget (streams.host_parked_max_bytes): it is\nrefused at once instead of waiting in a stream other hosts need."},
	{Phase: "authorization", Code: "GRANT_LIFETIME_EXCEEDED", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "GRANT_MALFORMED", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "GRANT_BINDING_MISMATCH", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "GRANT_INTEGRITY_MISMATCH", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "GRANT_NOT_YET_VALID", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "GRANT_EXPIRED", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "TEST_GRANT_FOR_LIVE_ACTION", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "EXTERNAL_SPEND_EXCEEDS_GRANT", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "EXTERNAL_ACTIONS_DISABLED", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "AUTOMATIC_APPROVAL_FORBIDDEN", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "LIVE_ACTIONS_FORBIDDEN", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "PROVIDER_NOT_ALLOWED", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "CAPABILITY_NOT_ALLOWED", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "ENVIRONMENT_NOT_ALLOWED", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "AUTHENTICATION_TOO_WEAK", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "EXTERNAL_SPEND_EXCEEDS_POLICY", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "PROCESSING_FAILED", Kind: "INTEGRATION_FAILURE", Boundary: "not_invoked"},
	{Phase: "authorization", Code: "INTERNAL_MESSAGE_REJECTED", Boundary: "not_invoked"},

	{Phase: "disclosure", Code: "PROTECTED_DISCLOSURE_UNAVAILABLE", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "disclosure", Code: "PROTECTED_DISCLOSURE_REFUSED", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "disclosure", Code: "DISCLOSURE_MALFORMED", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "disclosure", Code: "DISCLOSURE_BINDING_MISMATCH", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "disclosure", Code: "DISCLOSURE_REAUTHENTICATION_REQUIRED", Kind: "DENIED", Boundary: "not_invoked"},
	{Phase: "disclosure", Code: "DISCLOSURE_FIELD_MISMATCH", Kind: "DENIED", Boundary: "not_invoked"},

	{Phase: "dispatch", Code: "CHECKPOINT_FAILED", Kind: "INTEGRATION_FAILURE", Boundary: "not_invoked"},
	{Phase: "dispatch", Code: "PROCESSING_FAILED", Kind: "INTEGRATION_FAILURE", Boundary: "not_invoked"},
	{Phase: "dispatch", Code: "INTERNAL_MESSAGE_REJECTED", Boundary: "not_invoked"},
	{Phase: "dispatch", Code: "ADAPTER_UNAVAILABLE", Kind: "FAILED_BEFORE_DISPATCH", Boundary: "not_invoked"},
	{Phase: "dispatch", Code: "PROVIDER_FAILED_BEFORE_DISPATCH", Kind: "FAILED_BEFORE_DISPATCH", Boundary: "not_invoked"},
	{Phase: "dispatch", Code: "PROVIDER_REJECTED", Kind: "REJECTED", Boundary: "invoked"},
	{Phase: "dispatch", Code: "ADAPTER_TIMEOUT", Kind: "RECONCILIATION_REQUIRED", Boundary: "unknown"},
	{Phase: "dispatch", Code: "ADAPTER_ERROR", Kind: "RECONCILIATION_REQUIRED", Boundary: "unknown"},
	{Phase: "dispatch", Code: "DISPATCH_INTERRUPTED", Kind: "RECONCILIATION_REQUIRED", Boundary: "unknown"},
	{Phase: "dispatch", Code: "MALFORMED_ADAPTER_RESULT", Kind: "RECONCILIATION_REQUIRED", Boundary: "invoked"},
	{Phase: "dispatch", Code: "PROVIDER_INDETERMINATE", Kind: "RECONCILIATION_REQUIRED", Boundary: "invoked"},

	{Phase: "reconciliation", Code: "RECONCILE_UNAVAILABLE", Kind: "RECONCILIATION_REQUIRED", Boundary: "invoked"},
	{Phase: "reconciliation", Code: "RECONCILE_ERROR", Kind: "RECONCILIATION_REQUIRED", Boundary: "invoked"},
	{Phase: "reconciliation", Code: "MALFORMED_ADAPTER_RESULT", Kind: "RECONCILIATION_REQUIRED", Boundary: "invoked"},
	{Phase: "reconciliation", Code: "PROVIDER_INDETERMINATE", Kind: "RECONCILIATION_REQUIRED", Boundary: "invoked"},
	{Phase: "reconciliation", Code: "RECONCILE_EXHAUSTED", Kind: "RECONCILIATION_REQUIRED", Boundary: "invoked"},
	{Phase: "reconciliation", Code: "OPERATOR_RESOLVED", Boundary: "invoked"},
	{Phase: "reconciliation", Code: "PROCESSING_FAILED", Boundary: "unknown",
		Doc: "A reconciliation trigger the stage could not read (event only: no\nproposal is known; a valid trigger that keeps failing is recorded as\na RECONCILE_ERROR attempt instead)."},
	{Phase: "reconciliation", Code: "INTERNAL_MESSAGE_REJECTED", Boundary: "not_invoked"},
}

// label is a value of a closed metric label set. Expr, when set, is the
// Go expression the constant is defined as (an alias of a wire constant).
type label struct {
	Const, Value, Expr, Doc string
}

// results are the values of actions_stage_messages_total's `result` label.
var results = []label{
	{Const: "ResultForwarded", Value: "forwarded", Doc: "handed to the next stage"},
	{Const: "ResultOutcome", Value: "outcome", Doc: "ended (or parked) with an outcome"},
	{Const: "ResultConsumed", Value: "consumed", Doc: "nothing to publish: a duplicate, a no-op timer, an event-only incident"},
	{Const: "ResultRetry", Value: "retry", Doc: "failed transiently; redelivered later"},
	{Const: "ResultGaveUp", Value: "gave_up", Doc: "retries exhausted; ended with a closed-code outcome"},
	{Const: "ResultRejected", Value: "rejected", Doc: "an internal message that failed its seal; terminated unread"},
}

// attemptStatuses are the values of
// actions_reconciliation_attempts_total's `status` label: the provider's
// answer, or why there was none.
var attemptStatuses = []label{
	{Const: "AttemptConfirmed", Value: "confirmed", Expr: "schema.ReplyConfirmed"},
	{Const: "AttemptRejected", Value: "rejected", Expr: "schema.ReplyRejected"},
	{Const: "AttemptFailedBeforeDispatch", Value: "failed_before_dispatch", Expr: "schema.ReplyFailedBeforeDispatch"},
	{Const: "AttemptIndeterminate", Value: "indeterminate", Expr: "schema.ReplyIndeterminate"},
	{Const: "AttemptMalformed", Value: "malformed"},
	{Const: "AttemptUnavailable", Value: "unavailable"},
	{Const: "AttemptError", Value: "error"},
	{Const: "AttemptReplayed", Value: "replayed", Doc: "a checkpointed attempt seen again: not queried twice"},
}
