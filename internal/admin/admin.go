// Package admin is the operator's request-reply API of a running processor
// and its client, which the `processor receipts|activity|approvals|proposals|
// reconcile` commands and `processor console` use.
//
// The API is a NATS micro service (github.com/nats-io/nats.go/micro) named
// ServiceName, whose version is the processor's module version: one
// endpoint per verb on `<prefix>.admin.<verb>`, all in the queue group
// QueueGroup so that one of several processors answers each request, and
// the service's discovery and statistics on $SRV.PING, $SRV.INFO and
// $SRV.STATS (with NATS authentication on, only the processor's own
// account sees $SRV).
//
// The processor owns its Pebble store (Pebble allows one process), so
// operator tools ask the running processor instead of opening the store,
// and it reads for them what operators may not (they create no consumers:
// the activity bucket's listing goes through the processor too).
//
// Every request is signed by a configured operator (SPEC §2.8; auth.go):
// headers Actions-Operator-Key (the operator's nkey, U…) and
// Actions-Signature (base64url ed25519 signature of the exact body), and a
// body that carries requested_at_ms and a random nonce beside its own
// fields. The server refuses a request that is not signed by a configured
// operator (unauthenticated), that was made more than MaxRequestSkew before
// or after the processor's clock (stale), or whose nonce it has seen before
// (replayed, remembered in Pebble across restarts). These checks run in a
// middleware around every endpoint, before the verb acts. A processor that
// accepts unsigned input (admission.allow_unsigned, as `processor run --dev`)
// also accepts unsigned operator requests; a signed one is checked in full
// even then. NATS permissions (only operators may publish on
// `<prefix>.admin.>`) are the second door.
//
// Every request and reply is strict JSON; replies are
// {"result": …} or {"error": {"code", "message"}} (an error reply also
// carries the micro error headers, so $SRV.STATS counts it). Nothing here
// carries a payload or protected value: receipts, outcomes, approvals and
// activity are value-free.
//
// It owns the operator's requests and their signatures, nonces and answers
// (the nonces are kept by a kv.Nonces store: kv/pebble's or kv/jetstream's).
// Operator code imports no stage (internal/rules): it reads and settles
// state through the stores, never by running a stage's logic itself.
package admin

import (
	"errors"
	"strings"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// Error codes of a reply.
const (
	CodeBadRequest       = "bad_request"       // the request does not decode or its values are invalid
	CodeNotFound         = "not_found"         // no receipt for the fingerprint
	CodeNotIndeterminate = "not_indeterminate" // resolve: the effect is not unknown
	CodeInternal         = "internal"          // the processor could not read or write its store
	CodeUnauthenticated  = "unauthenticated"   // no or a bad signature, or the key of no configured operator
	CodeStale            = "stale"             // requested_at_ms more than MaxRequestSkew from the processor's clock, or too far before a request accepted
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

// ReceiptsRequest asks for a fingerprint's receipts (verb receipts.get):
// give exactly one of Fingerprint and Proposal (the fingerprint the
// proposal was grounded to).
type ReceiptsRequest struct {
	Stamp       `json:",inline"`
	Fingerprint string              `json:"fingerprint,omitempty"`
	Proposal    *schema.ProposalRef `json:"proposal,omitempty"`
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
	NowMs   int64     `json:"now_ms"`
	Actions []Pending `json:"actions"`
}

// Effects an operator can establish.
const (
	EffectPresent = "present"
	EffectAbsent  = "absent"
)

// ResolveRequest records an operator's finding (verb reconcile.resolve)
// about exactly one of Fingerprint and Proposal (the fingerprint the
// proposal was grounded to).
type ResolveRequest struct {
	Stamp       `json:",inline"`
	Fingerprint string              `json:"fingerprint,omitempty"`
	Proposal    *schema.ProposalRef `json:"proposal,omitempty"`
	// Effect is "present" or "absent".
	Effect string `json:"effect"`
	// EvidenceRef is where the finding can be checked (a ticket, a provider
	// console reference): one line of at most 512 characters containing ':'.
	EvidenceRef string `json:"evidence_ref"`
	ResolveChecks
}

// ResolveChecks hold a resolution to what the operator examined; each is
// optional, and each closes a way for a finding to settle what it was not
// about (internal/sim findings 4 and 5).
type ResolveChecks struct {
	// ReceiptID is the receipt the operator examined (`reconcile list`,
	// `receipt`): refused (not_indeterminate) when another receipt is the
	// latest by then — after a redispatch, the provider may have acted on
	// the new request.
	ReceiptID string `json:"receipt_id,omitempty"`
	// ObservedAtMs is when the operator looked at the provider (Unix ms):
	// an absence observed before the dispatch's not_after_ms plus
	// approval.clock_skew is refused (not_indeterminate), since the
	// request may still have reached the provider after they looked.
	ObservedAtMs int64 `json:"observed_at_ms,omitempty"`
}

// Resolved is what a resolution recorded. Its outcome reaches every
// proposal on `<prefix>.outcomes.<h>.<proposal_id>` moments later.
type Resolved struct {
	Fingerprint string               `json:"fingerprint"`
	OutcomeKind schema.Kind          `json:"outcome_kind"`
	Receipt     schema.Receipt       `json:"receipt"`
	Proposals   []schema.ProposalRef `json:"proposals"`
}

// List sizes: a request's limit defaults to the first and is at most the
// second.
const (
	DefaultApprovalsLimit = 100
	MaxApprovalsLimit     = 1000
	DefaultActivityLimit  = 20
	MaxActivityLimit      = 100
	// MaxProposalOutcomes bounds the outcomes proposals.get returns: the
	// first ones in order, then the last one.
	MaxProposalOutcomes = 100
)

// ApprovalsRequest lists the proposals parked for approval (verb
// approvals.list), the soonest to expire first. Limit 0: DefaultApprovalsLimit.
type ApprovalsRequest struct {
	Stamp `json:",inline"`
	Limit int `json:"limit,omitzero"`
}

// ParkedApproval is one proposal waiting for a grant. Summaries are not
// stored by the processor; the proposal's outcome carries it.
type ParkedApproval struct {
	Host        string `json:"host"`
	ProposalID  string `json:"proposal_id"`
	Fingerprint string `json:"fingerprint"`
	Referent    string `json:"referent"`
	// Provider is from the intent's activity snapshot ("" if it has none).
	Provider    string `json:"provider"`
	ArrivedAtMs int64  `json:"arrived_at_ms"`
	ExpiresAtMs int64  `json:"expires_at_ms"`
}

// Approvals are parked proposals at the processor's time: Total are parked
// in all, Approvals the first Limit of them.
type Approvals struct {
	NowMs     int64            `json:"now_ms"`
	Total     int              `json:"total"`
	Approvals []ParkedApproval `json:"approvals"`
}

// ProposalRequest asks for one proposal (verb proposals.get).
type ProposalRequest struct {
	Stamp      `json:",inline"`
	Host       string `json:"host"`
	ProposalID string `json:"proposal_id"`
}

// ApprovalState is the authorization stage's record of a proposal, without
// its policy evaluations.
type ApprovalState struct {
	// State is parked, permitted or denied.
	State       string `json:"state"`
	ArrivedAtMs int64  `json:"arrived_at_ms"`
	ExpiresAtMs int64  `json:"expires_at_ms,omitzero"`
	DecidedAtMs int64  `json:"decided_at_ms,omitzero"`
	// Code is a denial's closed code.
	Code schema.Code `json:"code,omitempty"`
}

// StoredOutcome is an outcome message and its sequence in the outcome
// stream.
type StoredOutcome struct {
	Seq     uint64         `json:"seq"`
	Outcome schema.Outcome `json:"outcome"`
}

// Proposal is what the processor knows of one proposal: the outcomes on
// `<prefix>.outcomes.<h>.<proposal_id>` still in the outcome stream, oldest
// first (at most MaxProposalOutcomes: the first ones, then the last;
// Truncated says some were left out), the fingerprint it was grounded to
// ("" if none), its authorization record and the fingerprint's latest
// receipt.
type Proposal struct {
	Host        string          `json:"host"`
	ProposalID  string          `json:"proposal_id"`
	Fingerprint string          `json:"fingerprint"`
	Approval    *ApprovalState  `json:"approval"`
	Receipt     *schema.Receipt `json:"receipt"`
	Outcomes    []StoredOutcome `json:"outcomes"`
	Truncated   bool            `json:"truncated"`
}

// ActivityListRequest lists activity snapshots, the most recently changed
// first (verb activity.list). Limit 0: DefaultActivityLimit. Before, when
// not 0, lists only snapshots written before that revision (the Next of
// the previous page).
type ActivityListRequest struct {
	Stamp  `json:",inline"`
	Limit  int    `json:"limit,omitzero"`
	Before uint64 `json:"before,omitzero"`
}

// Intent is what names an intent in the operator API's lists: its
// fingerprint and the target the fingerprint binds (kv.Identity without
// the idempotency key, which the receipts carry).
type Intent struct {
	Fingerprint string `json:"fingerprint"`
	schema.Target
}

// ActivityEntry is the gist of one intent's activity snapshot.
type ActivityEntry struct {
	Intent      `json:",inline"`
	Status      string               `json:"status"`
	Proposals   []schema.ProposalRef `json:"proposals"`
	UpdatedAtMs int64                `json:"updated_at_ms"`
	// Revision is the snapshot's revision in the bucket.
	Revision uint64 `json:"revision"`
}

// ActivityList is one page of snapshots, the most recently changed first.
// Next, when not 0, is the Before of the next page.
type ActivityList struct {
	NowMs   int64           `json:"now_ms"`
	Entries []ActivityEntry `json:"entries"`
	Next    uint64          `json:"next"`
}

// ParseProposalRef reads "<host>/<proposal_id>".
func ParseProposalRef(s string) (schema.ProposalRef, bool) {
	host, id, ok := strings.Cut(strings.TrimSpace(s), "/")
	ref := schema.ProposalRef{Host: host, ProposalID: id}
	return ref, ok && ValidProposalRef(ref)
}

// ValidProposalRef reports whether ref names a host and proposal id that
// can exist.
func ValidProposalRef(ref schema.ProposalRef) bool {
	return subjects.ValidHost(ref.Host) && schema.ValidProposalID(ref.ProposalID)
}

// NormalizeFingerprint accepts "sha256:<64 hex>" or the 64 hex digits alone
// (the activity key), in either case, and returns the fingerprint.
func NormalizeFingerprint(s string) (string, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	if !strings.HasPrefix(s, schema.FingerprintPrefix) {
		s = schema.FingerprintOfKey(s)
	}
	return s, schema.ValidFingerprint(s)
}
