package schema

import (
	"strings"
)

// Status is a receipt status (SPEC §3 Dispatch). Its values and Statuses
// are generated from the code table (codes_gen.go).
type Status string

// NextAction is what a receipt asks for next.
type NextAction string

// Next actions.
const (
	NextNone      NextAction = "none"
	NextVerify    NextAction = "verify"
	NextReconcile NextAction = "reconcile"
)

// Receipt is the value-free record of what happened to one fingerprint. A
// receipt is never edited: reconciliation writes a new one linked to the
// previous (Reconciliation.PreviousReceiptID).
type Receipt struct {
	ReceiptID         string     `json:"receipt_id"`
	Fingerprint       string     `json:"fingerprint"`
	IdempotencyKey    string     `json:"idempotency_key"`
	Provider          string     `json:"provider"`
	Capability        string     `json:"capability"`
	Operation         string     `json:"operation"`
	Environment       string     `json:"environment"`
	Adapter           string     `json:"adapter"`
	Status            Status     `json:"status"`
	DispatchAttempted bool       `json:"dispatch_attempted"`
	NextAction        NextAction `json:"next_action"`
	ProviderActionID  string     `json:"provider_action_id"`
	EvidenceRefs      []string   `json:"evidence_refs"`
	// ErrorCode is the provider's own code when it gave one, else
	// Portcullis's closed code; absent (never "") when there is none.
	ErrorCode      string               `json:"error_code,omitempty"`
	Disclosure     *DisclosureRecord    `json:"disclosure"`
	Reconciliation *ReceiptReconcileRef `json:"reconciliation"`
	RecordedAtMs   int64                `json:"recorded_at_ms"`
}

// ReceiptReconcileRef links a reconciliation receipt to its attempt and to
// the receipt it supersedes.
type ReceiptReconcileRef struct {
	AttemptID         string `json:"attempt_id"`
	PreviousReceiptID string `json:"previous_receipt_id"`
	// Operator is the configured name of the operator who settled the
	// effect (an `operator "<name>"` block, SPEC §2.8), on the receipt of
	// an operator's resolution only. Absent on a provider's receipt and
	// on a resolution sent unsigned to a processor that accepts unsigned
	// operator requests (development).
	Operator string `json:"operator,omitempty"`
}

// Provider reply limits (SPEC §3 Dispatch).
const (
	MaxProviderActionID = 512
	MaxEvidenceRefLen   = 512
	MaxReplyEvidence    = 20
)

// ValidErrorCode reports whether s is a valid receipt error code.
func ValidErrorCode(s string) bool { return errorCodeChars.spells(s, 1, 128) }

// ValidEvidenceRef reports whether s is a bounded, single-line reference
// containing ':'.
func ValidEvidenceRef(s string) bool {
	return singleLine(s, MaxEvidenceRefLen) && strings.Contains(s, ":")
}

// OutcomeKind maps a receipt to the outcome kind it reports.
func (r *Receipt) OutcomeKind() Kind {
	switch r.Status {
	case StatusConfirmed:
		return KindConfirmed
	case StatusAcknowledged:
		return KindAcknowledged
	case StatusDenied:
		return KindDenied
	case StatusFailedBeforeDispatch:
		return KindFailedBeforeDispatch
	case StatusRejected:
		return KindRejected
	default:
		return KindReconciliationRequired
	}
}
