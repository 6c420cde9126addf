package kv

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/portcullis/portcullis/schema"
)

// Intent states of the dispatch journal.
const (
	// IntentInFlight: the in-flight record was synced and the provider may
	// have been called. Without a receipt this means a crash between "begin"
	// and "receipt": never dispatch again.
	IntentInFlight = "in_flight"
	// IntentNotInvoked: the last attempt provably reached nobody (NATS no
	// responders, refused connection); dispatch may be retried.
	IntentNotInvoked = "not_invoked"
	// IntentDone: a receipt is recorded; it is the answer from now on.
	IntentDone = "done"
)

// Intent is the value-free dispatch and reconciliation state of one
// fingerprint: the journal dispatch writes before and after calling a
// provider, and reconciliation advances.
type Intent struct {
	Fingerprint    string `json:"fingerprint"`
	IdempotencyKey string `json:"idempotency_key"`
	State          string `json:"state"`
	Provider       string `json:"provider"`
	Capability     string `json:"capability"`
	Operation      string `json:"operation"`
	Environment    string `json:"environment"`
	Referent       string `json:"referent"`
	Adapter        string `json:"adapter"`
	// Proposals are the proposals that carried this intent (bounded):
	// each receives every later outcome of the fingerprint.
	Proposals []schema.ProposalRef `json:"proposals"`
	// DispatchAttempts counts in-flight records written.
	DispatchAttempts  int   `json:"dispatch_attempts"`
	InFlightAtMs      int64 `json:"in_flight_at_ms,omitempty"`
	NotInvokedSinceMs int64 `json:"not_invoked_since_ms,omitempty"`
	// Receipt is the latest receipt; ReceiptSeq its number in the history.
	Receipt    *schema.Receipt `json:"receipt,omitempty"`
	ReceiptSeq uint64          `json:"receipt_seq,omitempty"`
	// Outcome is the latest outcome's kind, terminality and incidents,
	// republished for a new proposal of the same intent.
	OutcomeKind      schema.Kind       `json:"outcome_kind,omitempty"`
	OutcomeTerminal  bool              `json:"outcome_terminal,omitempty"`
	OutcomeIncidents []schema.Incident `json:"outcome_incidents,omitempty"`
	// Reconciliation progress: the last attempt number started, whether
	// attempts are exhausted, and when the next poll is due.
	ReconcileAttempt   int   `json:"reconcile_attempt,omitempty"`
	ReconcileExhausted bool  `json:"reconcile_exhausted,omitempty"`
	ReconcileNextAtMs  int64 `json:"reconcile_next_at_ms,omitempty"`
	// Resolution says who settled a reconciliation: "provider" or "operator".
	Resolution  string `json:"resolution,omitempty"`
	UpdatedAtMs int64  `json:"updated_at_ms"`
}

// AddProposal records a proposal on the intent, bounded and without repeats.
func (in *Intent) AddProposal(ref schema.ProposalRef) {
	in.Proposals = schema.AppendProposal(in.Proposals, ref)
}

// fingerprintBytes decodes "sha256:<64 hex>" to its 32 bytes.
func fingerprintBytes(fp string) ([]byte, error) {
	h, ok := strings.CutPrefix(fp, "sha256:")
	if !ok || len(h) != 64 {
		return nil, fmt.Errorf("kv: not a fingerprint: %q", fp)
	}
	b, err := hex.DecodeString(h)
	if err != nil {
		return nil, fmt.Errorf("kv: not a fingerprint: %w", err)
	}
	return b, nil
}

func intentKey(fp []byte) []byte { return append([]byte{prefixIntent}, fp...) }

func receiptKey(fp []byte, seq uint64) []byte {
	return appendUint64(append([]byte{prefixReceipt}, fp...), seq)
}

func attemptKey(fp []byte, attemptID string) []byte {
	return appendString(append([]byte{prefixAttempt}, fp...), attemptID)
}

func indeterminateKey(fp []byte) []byte { return append([]byte{prefixIndeterminate}, fp...) }

// Intent returns the journal record of a fingerprint.
func (s *Store) Intent(fingerprint string) (Intent, bool, error) {
	fp, err := fingerprintBytes(fingerprint)
	if err != nil {
		return Intent{}, false, err
	}
	var in Intent
	found, err := s.get(intentKey(fp), &in)
	return in, found, err
}

// PutIntent writes a fingerprint's journal record.
func (b *Batch) PutIntent(in Intent) {
	fp, err := fingerprintBytes(in.Fingerprint)
	if err != nil {
		b.err = err
		return
	}
	b.set(intentKey(fp), in)
}

// AppendReceipt stores a receipt as number seq of the fingerprint's history.
func (b *Batch) AppendReceipt(seq uint64, r schema.Receipt) {
	fp, err := fingerprintBytes(r.Fingerprint)
	if err != nil {
		b.err = err
		return
	}
	b.set(receiptKey(fp, seq), r)
}

// Receipts returns a fingerprint's receipts, oldest first.
func (s *Store) Receipts(fingerprint string) ([]schema.Receipt, error) {
	fp, err := fingerprintBytes(fingerprint)
	if err != nil {
		return nil, err
	}
	var out []schema.Receipt
	err = s.scan(append([]byte{prefixReceipt}, fp...), func(_, val []byte) (bool, error) {
		var r schema.Receipt
		if err := decode(val, &r); err != nil {
			return false, err
		}
		out = append(out, r)
		return true, nil
	})
	return out, err
}

// Attempt is the checkpoint of one reconciliation attempt: written (Sync)
// before the provider is queried, completed after. A replayed attempt whose
// checkpoint exists is never queried again.
type Attempt struct {
	AttemptID    string `json:"attempt_id"`
	Number       int    `json:"number"`
	StartedAtMs  int64  `json:"started_at_ms"`
	Status       string `json:"status,omitempty"` // empty until the attempt finished (a metrics attempt status)
	FinishedAtMs int64  `json:"finished_at_ms,omitempty"`
}

// Attempt returns a reconciliation attempt's checkpoint.
func (s *Store) Attempt(fingerprint, attemptID string) (Attempt, bool, error) {
	fp, err := fingerprintBytes(fingerprint)
	if err != nil {
		return Attempt{}, false, err
	}
	var a Attempt
	found, err := s.get(attemptKey(fp, attemptID), &a)
	return a, found, err
}

// PutAttempt writes a reconciliation attempt's checkpoint.
func (b *Batch) PutAttempt(fingerprint string, a Attempt) {
	fp, err := fingerprintBytes(fingerprint)
	if err != nil {
		b.err = err
		return
	}
	b.set(attemptKey(fp, a.AttemptID), a)
}

// SetIndeterminate adds (sinceMs > 0) or removes (0) a fingerprint from the
// index of actions whose effect is unknown.
func (b *Batch) SetIndeterminate(fingerprint string, sinceMs int64) {
	fp, err := fingerprintBytes(fingerprint)
	if err != nil {
		b.err = err
		return
	}
	if sinceMs > 0 {
		b.set(indeterminateKey(fp), sinceMs)
	} else {
		b.delete(indeterminateKey(fp))
	}
}

// Indeterminate is one entry of the indeterminate index.
type Indeterminate struct {
	Fingerprint string
	SinceMs     int64
}

// Indeterminates lists every fingerprint whose effect is unknown.
func (s *Store) Indeterminates() ([]Indeterminate, error) {
	var out []Indeterminate
	err := s.scan([]byte{prefixIndeterminate}, func(key, val []byte) (bool, error) {
		var since int64
		if err := decode(val, &since); err != nil {
			return false, err
		}
		out = append(out, Indeterminate{Fingerprint: "sha256:" + hex.EncodeToString(key[1:]), SinceMs: since})
		return true, nil
	})
	return out, err
}
