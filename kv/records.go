// Package kv is Portcullis's state: the records its stages keep and
// the interface of each store that keeps them. The backends sit beside
// it: kv/pebble (one processor's store on disk) and the replicated
// stores of a cluster on JetStream KV buckets.
//
// Every record is value-free by type: no payloads, protected values, or
// tenant and actor identifiers (delivery ids are hashed with their tenant).
package kv

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"

	"github.com/portcullis/portcullis/schema"
)

// ErrCorrupt is returned for a record that does not decode.
var ErrCorrupt = errors.New("kv: corrupt record")

// Timer is a durable, value-free message to publish at a time: an approval
// expiring, a reconciliation poll falling due. The scheduler publishes due
// timers with their MsgID and then deletes them, so a crash in between
// publishes again under the same id (a duplicate the stream drops, or a
// redelivery the stage handles idempotently).
type Timer struct {
	// ID names the timer uniquely ("approval/<proposal_id>", …); adding a
	// timer with an existing ID replaces it.
	ID      string `json:"id"`
	DueMs   int64  `json:"due_ms"`
	Subject string `json:"subject"`
	Data    []byte `json:"data"`
	MsgID   string `json:"msg_id"`
}

// Delivery records the first admission of a host's delivery_id. The key
// hashes the host with the delivery id, so the id is not stored.
type Delivery struct {
	ProposalID string `json:"proposal_id"`
	// Seq is the proposals-stream sequence of the message that first carried
	// this delivery: a redelivery of that same message is not a repeat.
	Seq  uint64 `json:"seq"`
	AtMs int64  `json:"at_ms"`
}

// Admitted records that a host's proposal id was taken by an admitted
// proposal: its outcome subject belongs to it from now on. A later message
// with the same id and the same body (but for the delivery id) is a repeat;
// with another body it is refused (ADMISSION_PROPOSAL_ID_REUSED).
type Admitted struct {
	// Digest is the hex SHA-256 of the proposal's canonical form without
	// its delivery id.
	Digest string `json:"digest"`
	// Seq is the proposals-stream sequence of the message that carried it.
	Seq uint64 `json:"seq"`
	// Forwarded is set once the hand-off to grounding was acknowledged by
	// JetStream, so a redelivery after the stream's duplicate window does
	// not hand it off twice.
	Forwarded bool `json:"forwarded"`
	// Failed is set when admission gave up on the message before handing
	// it off: it took the id for its PROCESSING_FAILED outcome, which a
	// repeat, and any processor still handling the same message, answer
	// with.
	Failed bool  `json:"failed,omitzero"`
	AtMs   int64 `json:"at_ms"`
}

// Ended records a proposal that the dispatch stage ended without
// dispatching (a denial at its re-check, SPEC §3 Dispatch step 3): the
// denial binds the proposal, never its fingerprint, so a redelivery of the
// proposal republishes the same answer while a later proposal of the same
// intent is judged afresh.
type Ended struct {
	Phase schema.Phase `json:"phase"`
	Code  schema.Code  `json:"code"`
	AtMs  int64        `json:"at_ms"`
}

// Indeterminate is one entry of the indeterminate index.
type Indeterminate struct {
	Fingerprint string
	SinceMs     int64
}

// Grounding is the grounding stage's checkpoint of a decision that asked a
// candidate source. A source may answer differently when asked again, so a
// redelivered input (a lost ack, a crash after publishing) reuses the
// recorded decision instead of asking again: one input never yields both a
// hand-off to authorization and a failure outcome. It holds a closed code or
// a referent and observation reference, never candidates or attributes.
type Grounding struct {
	// Code is the grounding incident's code; "" when grounded.
	Code           schema.Code `json:"code,omitempty"`
	Referent       string      `json:"referent,omitempty"`
	ObservationRef string      `json:"observation_ref,omitempty"`
	AtMs           int64       `json:"at_ms"`
}

// GroundingKey identifies one input message: its stream, sequence and a
// hash of its body (so that a recreated stream reusing sequences never
// matches an old checkpoint). Each backend stores the checkpoint under
// it (Pebble with its key prefix).
func GroundingKey(stream string, seq uint64, body []byte) []byte {
	h := sha256.New()
	h.Write([]byte("grounding\x00"))
	h.Write([]byte(stream))
	h.Write([]byte{0})
	h.Write(binary.BigEndian.AppendUint64(nil, seq))
	b := sha256.Sum256(body)
	h.Write(b[:])
	return h.Sum(nil)
}

// NonceClaim is what ClaimNonce found.
type NonceClaim int

// ClaimNonce's answers. The zero value is none of them: a claim returned
// with an error never reads as fresh.
const (
	// NonceFresh: claimed now; the request may act.
	NonceFresh NonceClaim = iota + 1
	// NonceReplayed: the nonce was claimed before.
	NonceReplayed
	// NonceTooOld: the request is stamped more than the window before the
	// newest request accepted; its nonce may have been forgotten, so it
	// is refused whatever it is.
	NonceTooOld
)
