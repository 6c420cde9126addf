package schema

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// DispatchRequest is sent to a provider connector on
// `<prefix>.provider.<provider>.dispatch` (SPEC §4).
//
// NotAfterMs (unix ms) is the end of the dispatch's lease: the moment after
// which another processor may conclude that the dispatch was interrupted
// and reconciliation may start asking what became of it. A connector must
// not act on a request it receives after it (its clock read against
// NotAfterMs): it answers LateReply instead, and its reconcile then finds
// the action absent. Every request carries it (> 0).
type DispatchRequest struct {
	Schema         string `json:"schema"`
	Fingerprint    string `json:"fingerprint"`
	IdempotencyKey string `json:"idempotency_key"`
	Target
	Payload             jsontext.Value      `json:"payload"`
	ExternalSpend       *Spend              `json:"external_spend"`
	ProtectedDisclosure *DispatchDisclosure `json:"protected_disclosure"`
	NotAfterMs          int64               `json:"not_after_ms"`
}

// HeaderNotAfter is the HTTP header in which the http adapter repeats a
// dispatch request's not_after_ms (the same unix-ms integer, in decimal).
const HeaderNotAfter = "Actions-Not-After"

// ErrorCodeNotAfterPassed is the error_code of LateReply.
const ErrorCodeNotAfterPassed = "NOT_AFTER_PASSED"

// LateReply is what a connector answers to a dispatch request it received
// after the request's not_after_ms, without acting on it: the provider
// never received the action (failed_before_dispatch), and the code says
// why. The processor that sent it may dispatch the intent again, with a
// new lease, if no other processor has concluded the dispatch interrupted
// since; if one has, reconciliation finds the action absent.
func LateReply() AdapterReply {
	return AdapterReply{Outcome: ReplyFailedBeforeDispatch, ErrorCode: ErrorCodeNotAfterPassed}
}

// IsLate reports whether r is a connector's refusal of a request that came
// after its not_after_ms (LateReply): provably not acted on.
func (r AdapterReply) IsLate() bool {
	return r.Outcome == ReplyFailedBeforeDispatch && r.ErrorCode == ErrorCodeNotAfterPassed
}

// Late reports whether a request with this not_after_ms, received at
// nowMs (the receiver's clock), came too late to be acted on. A request
// without one (0) is late: every dispatch request carries it.
func Late(notAfterMs, nowMs int64) bool { return notAfterMs <= 0 || nowMs > notAfterMs }

// DispatchDisclosure carries protected values to the adapter, in memory only.
type DispatchDisclosure struct {
	Recipient    string                    `json:"recipient"`
	Purpose      string                    `json:"purpose"`
	FieldClasses []string                  `json:"field_classes"`
	Values       map[string]jsontext.Value `json:"values"`
}

// Format implements fmt.Formatter for every verb, so that printing a
// dispatch request (or this) never prints protected values.
func (d DispatchDisclosure) Format(f fmt.State, _ rune) {
	_, _ = fmt.Fprint(f, redactedValues("DispatchDisclosure", d.Values))
}

// LogValue implements slog.LogValuer: the classes, never the values.
func (d DispatchDisclosure) LogValue() slog.Value {
	return slog.StringValue(redactedValues("DispatchDisclosure", d.Values))
}

func redactedValues(typ string, values map[string]jsontext.Value) string {
	classes := make([]string, 0, len(values))
	for c := range values {
		classes = append(classes, c)
	}
	slices.Sort(classes)
	return "schema." + typ + "{values of " + strings.Join(classes, ",") + " redacted}"
}

// ReconcileRequest is sent on `<prefix>.provider.<provider>.reconcile`.
type ReconcileRequest struct {
	Schema            string `json:"schema"`
	Fingerprint       string `json:"fingerprint"`
	IdempotencyKey    string `json:"idempotency_key"`
	AttemptID         string `json:"attempt_id"`
	ProviderActionID  string `json:"provider_action_id"`
	PreviousReceiptID string `json:"previous_receipt_id"`
}

// AdapterReply is a connector's answer to either request.
type AdapterReply struct {
	Outcome          string   `json:"outcome"`
	ProviderActionID string   `json:"provider_action_id,omitempty"`
	EvidenceRefs     []string `json:"evidence_refs,omitempty"`
	ErrorCode        string   `json:"error_code,omitempty"`
}

// Adapter reply outcomes.
const (
	ReplyConfirmed            = "confirmed"
	ReplyAcknowledged         = "acknowledged"
	ReplyRejected             = "rejected"
	ReplyFailedBeforeDispatch = "failed_before_dispatch"
	ReplyIndeterminate        = "indeterminate"
)

// Valid checks a reply's bounds (SPEC §3 Dispatch). forReconcile narrows the
// outcome set: a reconcile never answers "acknowledged".
func (r *AdapterReply) Valid(forReconcile bool) bool {
	switch r.Outcome {
	case ReplyConfirmed, ReplyRejected, ReplyFailedBeforeDispatch, ReplyIndeterminate:
	case ReplyAcknowledged:
		if forReconcile {
			return false
		}
	default:
		return false
	}
	if r.ProviderActionID != "" && !singleLine(r.ProviderActionID, MaxProviderActionID) {
		return false
	}
	if len(r.EvidenceRefs) > MaxReplyEvidence {
		return false
	}
	for _, e := range r.EvidenceRefs {
		if !ValidEvidenceRef(e) {
			return false
		}
	}
	return r.ErrorCode == "" || ValidErrorCode(r.ErrorCode)
}

// DisclosureRequest asks the host's protected-profile resolver for values,
// on `<prefix>.disclosure.resolve` (SPEC §2.6).
type DisclosureRequest struct {
	Schema                       string   `json:"schema"`
	Fingerprint                  string   `json:"fingerprint"`
	Provider                     string   `json:"provider"`
	Operation                    string   `json:"operation"`
	Environment                  string   `json:"environment"`
	Recipient                    string   `json:"recipient"`
	Purpose                      string   `json:"purpose"`
	FieldClasses                 []string `json:"field_classes"`
	Source                       string   `json:"source"`
	RequireReauthentication      bool     `json:"require_reauthentication"`
	AuthorizationMethod          string   `json:"authorization_method"`
	GrantAuthenticationAssurance string   `json:"grant_authentication_assurance"`
}

// DisclosureReply is the resolver's answer: the echoed bindings, the actual
// assurance of this disclosure and the values; or a refusal.
type DisclosureReply struct {
	Schema                       string                    `json:"schema,omitempty"`
	Fingerprint                  string                    `json:"fingerprint,omitempty"`
	Provider                     string                    `json:"provider,omitempty"`
	Operation                    string                    `json:"operation,omitempty"`
	Environment                  string                    `json:"environment,omitempty"`
	Recipient                    string                    `json:"recipient,omitempty"`
	Purpose                      string                    `json:"purpose,omitempty"`
	FieldClasses                 []string                  `json:"field_classes,omitempty"`
	Source                       string                    `json:"source,omitempty"`
	RequireReauthentication      *bool                     `json:"require_reauthentication,omitempty"`
	AuthorizationMethod          string                    `json:"authorization_method,omitempty"`
	GrantAuthenticationAssurance string                    `json:"grant_authentication_assurance,omitempty"`
	AuthenticationAssurance      string                    `json:"authentication_assurance,omitempty"`
	ProtectedValues              map[string]jsontext.Value `json:"protected_values,omitempty"`
	Refused                      bool                      `json:"refused,omitzero"`
	ReasonCode                   string                    `json:"reason_code,omitempty"`
}

// Format implements fmt.Formatter for every verb: never the values.
func (r DisclosureReply) Format(f fmt.State, _ rune) {
	_, _ = fmt.Fprint(f, redactedValues("DisclosureReply", r.ProtectedValues))
}

// LogValue implements slog.LogValuer: the classes, never the values.
func (r DisclosureReply) LogValue() slog.Value {
	return slog.StringValue(redactedValues("DisclosureReply", r.ProtectedValues))
}
