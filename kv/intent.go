// The intent journal: one record per fingerprint that
// dispatch writes before and after calling a provider, reconciliation
// advances, and every later proposal of the same intent is answered from
// (SPEC §3 Dispatch, Reconciliation).
//
// It holds the record, the triggers and timers of reconciliation, and the
// only fingerprint lock. The record's transitions — every event of an
// intent's life, the receipts they make and what they tell its proposals —
// are package kv/intent's (intent.Apply). Stages reach storage
// through Store: Pebble on a single node (NewPebble), a JetStream KV
// bucket shared by the processors of a cluster (NewReplicated).
//
// On a shared journal the fingerprint lock is only this process's: every
// Commit is a compare-and-set against what Load returned, and a commit
// that lost to another processor fails with ErrConflict, having changed
// nothing that matters; the stage loads and decides again. The in-flight
// record names the processor that wrote it (InFlightBy, its instance id)
// and a lease (InFlightUntilMs): another processor waits for the receipt
// until the lease ends, then records the dispatch as interrupted — never
// dispatches it again (SPEC §6).

package kv

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"

	"github.com/portcullis/portcullis/schema"
)

// IntentState is where an intent's dispatch stands.
type IntentState string

// Journal states.
const (
	// StateNew: nothing was written for the fingerprint yet.
	StateNew IntentState = ""
	// StateInFlight: the in-flight record was synced and the provider may
	// have been called. Without a receipt this means a crash between
	// "begin" and "receipt": never dispatch again.
	StateInFlight IntentState = "in_flight"
	// StateNotInvoked: the last attempt provably reached nobody (NATS no
	// responders, refused connection); dispatch may be retried.
	StateNotInvoked IntentState = "not_invoked"
	// StateDone: a receipt is recorded; it is the answer from now on.
	StateDone IntentState = "done"
	// StateLost: reconciliation learnt that the last dispatch never
	// reached the provider (its reconcile answered failed_before_dispatch)
	// after that request's not_after_ms and the clock skew had passed, so
	// no connector can act on it any more: the request was lost in flight
	// (a server restarting, a processor paused past its lease). The intent
	// is dispatched again (intent.Reopen), under a new in-flight record and lease.
	StateLost IntentState = "lost"
)

// Identity is what a fingerprint binds, as providers and receipts see it.
type Identity struct {
	Fingerprint    string `json:"fingerprint"`
	IdempotencyKey string `json:"idempotency_key"`
	schema.Target
}

// IdentityOf is the identity of a grounded envelope (env.Grounded set).
func IdentityOf(env *schema.Envelope) Identity {
	in := &env.Proposal.Intent
	return Identity{
		Fingerprint:    env.Grounded.Fingerprint,
		IdempotencyKey: env.Grounded.IdempotencyKey,
		Target: schema.Target{
			Provider:    in.Provider,
			Capability:  in.Capability,
			Operation:   in.Operation,
			Environment: in.Environment,
			Referent:    env.Grounded.Referent,
		},
	}
}

// Hex is a fingerprint's 64 hex digits (subject token, KV key).
func Hex(fingerprint string) string { return schema.FingerprintKey(fingerprint) }

// RedispatchID is the message id (before the processor's MsgID) of the
// hand-off that sends the held envelope of fingerprint fp back to dispatch
// after its redispatches-th reopening (intent.Reopen): reconciliation publishes
// under it, and dispatch recognizes by it that its input is that
// redispatch — the one dispatch of the intent still to come.
func RedispatchID(fp string, redispatches int) string {
	return "redispatch/" + Hex(fp) + "/" + strconv.Itoa(redispatches)
}

// Intent is the value-free dispatch and reconciliation state of one
// fingerprint.
type Intent struct {
	Identity
	Adapter string      `json:"adapter"`
	State   IntentState `json:"state"`
	// Proposals are the proposals that carried this intent (bounded): each
	// receives every later outcome of the fingerprint.
	Proposals []schema.ProposalRef `json:"proposals"`
	// DispatchAttempts counts in-flight records written.
	DispatchAttempts  int   `json:"dispatch_attempts"`
	InFlightAtMs      int64 `json:"in_flight_at_ms,omitempty"`
	NotInvokedSinceMs int64 `json:"not_invoked_since_ms,omitempty"`
	// InFlightBy is the instance id (Store.InstanceID) of the processor
	// that wrote the in-flight record, and InFlightUntilMs the end of its
	// lease: the moment after which a processor that did not write it may
	// declare the dispatch interrupted (in_flight_at + the provider's
	// timeout + a margin). It is the request's not_after_ms (SPEC §4): no
	// connector acts on the request after it, so reconciliation may trust
	// an answer that the action is absent once it and the clock skew have
	// passed. Both stay after the dispatch (a later in-flight record, the
	// retry of one that reached nobody, replaces them). Empty and 0 in
	// records written before they existed: those count as the reader's own.
	InFlightBy      string `json:"in_flight_by,omitempty"`
	InFlightUntilMs int64  `json:"in_flight_until_ms,omitempty"`
	// DispatchedFor is the proposal whose dispatch the latest in-flight
	// record is (each in-flight record replaces it: one that reached
	// nobody, or a request lost in flight, caused nothing). Every other
	// proposal answered from its receipt gets recorded_earlier (intent.Outcome).
	// Nil in records written before it existed: their first proposal.
	DispatchedFor *schema.ProposalRef `json:"dispatched_for,omitempty"`
	// Receipt is the latest receipt; ReceiptSeq its number in the history.
	Receipt    *schema.Receipt `json:"receipt,omitempty"`
	ReceiptSeq uint64          `json:"receipt_seq,omitempty"`
	// Latest is the latest outcome's kind, terminality and incidents,
	// republished for every proposal of the intent.
	Latest Latest `json:"latest"`
	// Reconciliation progress: the last attempt number started, whether
	// attempts are exhausted, and when the next poll is due.
	ReconcileAttempt int `json:"reconcile_attempt,omitempty"`
	// UnansweredPolls counts the attempts nobody received (NATS no
	// responders: the provider's connector away): they are not answers,
	// and never count toward reconciliation.max_attempts.
	UnansweredPolls    int   `json:"unanswered_polls,omitempty"`
	ReconcileExhausted bool  `json:"reconcile_exhausted,omitempty"`
	ReconcileNextAtMs  int64 `json:"reconcile_next_at_ms,omitempty"`
	// Resolution says who settled a reconciliation: ResolvedByProvider or
	// ResolvedByOperator.
	Resolution string `json:"resolution,omitempty"`
	// DispatchCode is the closed code of the last dispatch's receipt, when
	// it left the effect unknown (ADAPTER_TIMEOUT, ADAPTER_ERROR,
	// DISPATCH_INTERRUPTED, …): reconciliation dispatches again only an
	// intent whose request may have been lost on the way (LostInFlight).
	DispatchCode schema.Code `json:"dispatch_code,omitempty"`
	// Redispatches counts the dispatches sent again after one was lost
	// (intent.Reopen), at most MaxRedispatches.
	Redispatches int `json:"redispatches,omitempty"`
	// ReceiptAfterMs is the recorded_at_ms of the latest receipt in the
	// history while Receipt is nil after an intent.Reopen: the next receipt is
	// recorded after it, so that receipts stay ordered by recorded_at_ms
	// although processors' clocks differ (a client that orders outcomes
	// by their receipt would otherwise take a stale outcome published
	// late for the newest; found by internal/sim, seed 87377).
	ReceiptAfterMs int64 `json:"receipt_after_ms,omitempty"`
	// Ended are the proposals of this intent that dispatch ended without
	// dispatching them (a denial at its re-check, a give-up), the newest
	// MaxEnded. They are written with the record's compare-and-set, so
	// that a processor deciding the same proposal at the same moment
	// loses, reloads and answers with this end instead of contradicting
	// it; the proposal's own end record (Store.Ended) keeps it for good.
	Ended       []EndedProposal `json:"ended,omitempty"`
	UpdatedAtMs int64           `json:"updated_at_ms"`
}

// MaxEnded bounds Record.Ended.
const MaxEnded = 64

// MaxRedispatches bounds how often an intent whose request was lost in
// flight is dispatched again; after that reconciliation's finding stands
// (FAILED_BEFORE_DISPATCH).
const MaxRedispatches = 5

// Latest is the outcome an intent's latest receipt gives its proposals.
type Latest struct {
	Kind      schema.Kind       `json:"kind,omitempty"`
	Terminal  bool              `json:"terminal,omitempty"`
	Incidents []schema.Incident `json:"incidents,omitempty"`
}

// Resolutions recorded on the intent and in its activity snapshot.
const (
	ResolvedByProvider = "provider"
	ResolvedByOperator = "operator"
)

// NewIntent is the record of an intent nothing was written for yet.
func NewIntent(id Identity, adapter string, nowMs int64) Intent {
	return Intent{Identity: id, Adapter: adapter, UpdatedAtMs: nowMs}
}

// AddProposal records a proposal on the intent, bounded and without repeats.
func (r *Intent) AddProposal(ref schema.ProposalRef) {
	r.Proposals = schema.AppendProposal(r.Proposals, ref)
}

// End records that proposal e.Ref ended without dispatching: it leaves
// the intent's proposals (it hears of no later outcome of the intent) and
// joins Ended.
func (r *Intent) End(e EndedProposal) {
	r.Proposals = slices.DeleteFunc(r.Proposals, func(p schema.ProposalRef) bool { return p == e.Ref })
	r.Ended = slices.DeleteFunc(r.Ended, func(x EndedProposal) bool { return x.Ref == e.Ref })
	if len(r.Ended) >= MaxEnded {
		r.Ended = slices.Delete(r.Ended, 0, len(r.Ended)-MaxEnded+1)
	}
	r.Ended = append(r.Ended, e)
}

// EndOf returns how proposal ref ended without dispatching, if the record
// holds it.
func (r *Intent) EndOf(ref schema.ProposalRef) (EndedProposal, bool) {
	for _, e := range r.Ended {
		if e.Ref == ref {
			return e, true
		}
	}
	return EndedProposal{}, false
}

// Verdict is what one answer established about an intent: a provider's
// reply to dispatch or reconcile, an interrupted dispatch, an operator's
// finding. intent.Settle turns it into the intent's next receipt.
type Verdict struct {
	Status     schema.Status
	NextAction schema.NextAction
	// Attempted is the receipt's dispatch_attempted: false only when the
	// provider provably never received the action.
	Attempted bool
	// Incidents go into the outcome (and out as events); Events go out as
	// incident events only.
	Incidents []schema.Incident
	Events    []schema.Incident
	// ErrorCode is the receipt's error_code: the provider's own code when
	// it gave one, otherwise Portcullis's closed code; "" none.
	ErrorCode        string
	ProviderActionID string
	EvidenceRefs     []string
	// Settled: the effect's truth is known; polling stops.
	Settled bool
	// Exhausted: the last allowed reconciliation attempt could not tell;
	// the outcome is terminal RECONCILIATION_REQUIRED for an operator.
	Exhausted bool
	// Resolution, when set, records who settled the effect
	// (ResolvedByProvider, ResolvedByOperator).
	Resolution string
}

// ReceiptID is deterministic: the same fingerprint and step always name the
// same receipt, so a replay writes and reports the same one.
func ReceiptID(fingerprint, step string) string {
	h := sha256.Sum256([]byte("receipt\x00" + fingerprint + "\x00" + step))
	return "rcpt_" + hex.EncodeToString(h[:16])
}

// IndeterminateReceipt reports whether a receipt leaves the effect unknown.
func IndeterminateReceipt(rc *schema.Receipt) bool {
	return rc != nil && rc.Status == schema.StatusReconciliationRequired
}

// NeedsWork reports whether the intent's latest receipt is still being
// verified or reconciled.
func (r *Intent) NeedsWork() bool {
	return r.Receipt != nil && r.Receipt.NextAction != schema.NextNone && !r.ReconcileExhausted && r.Resolution == ""
}
