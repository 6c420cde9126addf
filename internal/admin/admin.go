// Package admin is the operator's request-reply API of a running processor
// (core NATS on `<prefix>.admin.<verb>`) and its client, which the
// `processor receipts`, `processor reconcile` commands use.
//
// The processor owns its Pebble store (Pebble allows one process), so
// operator tools ask the running processor instead of opening the store.
//
// Every request is signed by a configured operator (SPEC §2.8; auth.go):
// headers Actions-Operator-Key (the operator's nkey, U…) and
// Actions-Signature (base64url ed25519 signature of the exact body), and a
// body that carries requested_at_ms and a random nonce beside its own
// fields. The server refuses a request that is not signed by a configured
// operator (unauthenticated), that was made more than MaxRequestSkew before
// or after the processor's clock (stale), or whose nonce it has seen before
// (replayed, remembered in Pebble across restarts). A processor that
// accepts unsigned input (admission.allow_unsigned, as `processor run --dev`)
// also accepts unsigned operator requests; a signed one is checked in full
// even then. NATS permissions (only operators may publish on
// `<prefix>.admin.>`) are the second door.
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
	CodeUnauthenticated  = "unauthenticated"   // no or a bad signature, or the key of no configured operator
	CodeStale            = "stale"             // requested_at_ms more than MaxRequestSkew from the processor's clock
	CodeReplayed         = "replayed"          // the nonce was used before
)

// Codes is the closed set of reply error codes.
var Codes = []string{CodeBadRequest, CodeNotFound, CodeNotIndeterminate, CodeInternal, CodeUnauthenticated, CodeStale, CodeReplayed}

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
	ErrUnauthenticated  = &Error{Code: CodeUnauthenticated}
	ErrStale            = &Error{Code: CodeStale}
	ErrReplayed         = &Error{Code: CodeReplayed}
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

// Stamp makes a request fresh and unique: every request body carries it
// beside its own fields, and the signature covers it.
type Stamp struct {
	// RequestedAtMs is when the request was made (Unix ms); the processor
	// refuses one more than MaxRequestSkew before or after its clock.
	RequestedAtMs int64 `json:"requested_at_ms"`
	// Nonce is random (NewStamp: 18 random bytes, base64url): 22–128
	// characters of A-Z a-z 0-9 _ -. The processor refuses one it has seen.
	Nonce string `json:"nonce"`
}

func (s *Stamp) stamp() *Stamp { return s }

// stamped is a request with a Stamp.
type stamped interface{ stamp() *Stamp }

// ReceiptsRequest asks for a fingerprint's receipts (verb receipts.get).
type ReceiptsRequest struct {
	Stamp       `json:",inline"`
	Fingerprint string `json:"fingerprint"`
}

// Receipts is a fingerprint's receipt history, oldest first, and the
// outcome its latest receipt gives.
type Receipts struct {
	Fingerprint string               `json:"fingerprint"`
	Referent    string               `json:"referent"`
	Proposals   []schema.ProposalRef `json:"proposals"`
	OutcomeKind schema.Kind          `json:"outcome_kind"`
	Terminal    bool                 `json:"terminal"`
	Resolution  string               `json:"resolution"`
	Receipts    []schema.Receipt     `json:"receipts"`
}

// ListRequest asks for the indeterminate queue (verb reconcile.list).
type ListRequest struct {
	Stamp `json:",inline"`
}

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
	Stamp       `json:",inline"`
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
	OutcomeKind schema.Kind          `json:"outcome_kind"`
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
