// Package admin is the operator's request-reply API of a running processor
// (core NATS on `<prefix>.admin.<verb>`) and its client, which the
// `processor receipts`, `processor reconcile` commands use.
//
// The processor owns its Pebble store (Pebble allows one process), so
// operator tools ask the running processor instead of opening the store.
// Anyone who can publish on `<prefix>.admin.>` can settle indeterminate
// actions: protect it with NATS permissions like the proposal subjects.
//
// Every request and reply is strict JSON; replies are
// {"result": …} or {"error": {"code", "message"}}. Nothing here carries a
// payload or protected value: receipts and the queue are value-free.
package admin

import (
	"errors"
	"strings"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/reconciliation"
)

// Error codes of a reply.
const (
	CodeBadRequest       = "bad_request"       // the request does not decode or its values are invalid
	CodeNotFound         = "not_found"         // no receipt for the fingerprint
	CodeNotIndeterminate = "not_indeterminate" // resolve: the effect is not unknown
	CodeInternal         = "internal"          // the processor could not read or write its store
)

// Error is a refused or failed request.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message + " (" + e.Code + ")" }

// Sentinels matching an *Error's code with errors.Is.
var (
	ErrBadRequest       = &Error{Code: CodeBadRequest}
	ErrNotFound         = &Error{Code: CodeNotFound}
	ErrNotIndeterminate = &Error{Code: CodeNotIndeterminate}
	ErrInternal         = &Error{Code: CodeInternal}
)

// Is matches errors of the same code.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

// reply is the envelope of every answer.
type reply[T any] struct {
	Result *T     `json:"result,omitempty"`
	Error  *Error `json:"error,omitempty"`
}

// ReceiptsRequest asks for a fingerprint's receipts (verb receipts.get).
type ReceiptsRequest struct {
	Fingerprint string `json:"fingerprint"`
}

// Receipts is a fingerprint's receipt history, oldest first, and the
// outcome its latest receipt gives.
type Receipts struct {
	Fingerprint string               `json:"fingerprint"`
	Referent    string               `json:"referent"`
	Proposals   []schema.ProposalRef `json:"proposals"`
	OutcomeKind string               `json:"outcome_kind"`
	Terminal    bool                 `json:"terminal"`
	Resolution  string               `json:"resolution"`
	Receipts    []schema.Receipt     `json:"receipts"`
}

// ListRequest asks for the indeterminate queue (verb reconcile.list).
type ListRequest struct{}

// List is the indeterminate queue, oldest first, at the processor's time.
type List struct {
	NowMs   int64                    `json:"now_ms"`
	Actions []reconciliation.Pending `json:"actions"`
}

// Effects an operator can establish.
const (
	EffectPresent = "present"
	EffectAbsent  = "absent"
)

// ResolveRequest records an operator's finding (verb reconcile.resolve).
type ResolveRequest struct {
	Fingerprint string `json:"fingerprint"`
	// Effect is "present" or "absent".
	Effect string `json:"effect"`
	// EvidenceRef is where the finding can be checked (a ticket, a provider
	// console reference): one line of at most 512 characters containing ':'.
	EvidenceRef string `json:"evidence_ref"`
}

// Resolved is what a resolution recorded. Its outcome reaches every
// proposal on `<prefix>.outcomes.<h>.<proposal_id>` moments later.
type Resolved struct {
	Fingerprint string               `json:"fingerprint"`
	OutcomeKind string               `json:"outcome_kind"`
	Receipt     schema.Receipt       `json:"receipt"`
	Proposals   []schema.ProposalRef `json:"proposals"`
}

// NormalizeFingerprint accepts "sha256:<64 hex>" or the 64 hex digits alone
// (the activity key), in either case, and returns the fingerprint.
func NormalizeFingerprint(s string) (string, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	if !strings.HasPrefix(s, "sha256:") {
		s = "sha256:" + s
	}
	return s, schema.ValidFingerprint(s)
}
