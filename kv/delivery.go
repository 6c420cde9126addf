package kv

import (
	"crypto/sha256"

	"github.com/portcullis/portcullis/schema"
)

// proposalKey is the key part of a proposal: its host and id, escaped.
func proposalKey(prefix byte, ref schema.ProposalRef) []byte {
	return appendString(appendString([]byte{prefix}, ref.Host), ref.ProposalID)
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

func deliveryKey(host, deliveryID string) []byte {
	h := sha256.New()
	h.Write([]byte("delivery\x00"))
	h.Write([]byte(host))
	h.Write([]byte{0})
	h.Write([]byte(deliveryID))
	return h.Sum([]byte{prefixDelivery})
}

// Delivery returns the record of a host's delivery id.
func (s *Store) Delivery(host, deliveryID string) (Delivery, bool, error) {
	var d Delivery
	found, err := s.get(deliveryKey(host, deliveryID), &d)
	return d, found, err
}

// PutDelivery records a delivery.
func (b *Batch) PutDelivery(host, deliveryID string, d Delivery) {
	key := deliveryKey(host, deliveryID)
	b.set(key, d)
	b.file(ClassDelivery, d.AtMs, key[1:])
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

// Admitted returns a proposal's admission record.
func (s *Store) Admitted(ref schema.ProposalRef) (Admitted, bool, error) {
	var a Admitted
	found, err := s.get(proposalKey(prefixAdmitted, ref), &a)
	return a, found, err
}

// PutAdmitted records a proposal's admission.
func (b *Batch) PutAdmitted(ref schema.ProposalRef, a Admitted) {
	key := proposalKey(prefixAdmitted, ref)
	b.set(key, a)
	b.file(ClassProposal, a.AtMs, key[1:])
}

// LastOutcome returns the last outcome recorded for a proposal.
func (s *Store) LastOutcome(ref schema.ProposalRef) (schema.Outcome, bool, error) {
	var o schema.Outcome
	found, err := s.get(proposalKey(prefixOutcome, ref), &o)
	o.Host = ref.Host // not part of the stored body
	return o, found, err
}

// PutOutcome records a proposal's latest outcome (outcomes are value-free).
func (b *Batch) PutOutcome(o schema.Outcome) {
	key := proposalKey(prefixOutcome, o.To())
	b.set(key, o)
	b.file(ClassProposal, o.AtMs, key[1:])
}

// RecordOutcomes records each proposal's latest outcome (stages.OutcomeLog).
// NoSync: the record must be durable before the input is acked, not
// before the outcome is published (a crash in between redelivers the
// input, which records it again); the runner calls Flush before the ack,
// one fsync for every input acked at that moment.
func (s *Store) RecordOutcomes(outcomes []schema.Outcome) error {
	b := s.NewBatch()
	for _, o := range outcomes {
		b.PutOutcome(o)
	}
	return b.Commit(NoSync)
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

// Ended returns the dispatch-time end of a proposal, if any.
func (s *Store) Ended(ref schema.ProposalRef) (Ended, bool, error) {
	var e Ended
	found, err := s.get(proposalKey(prefixEnded, ref), &e)
	return e, found, err
}

// PutEnded records a proposal's dispatch-time end.
func (b *Batch) PutEnded(ref schema.ProposalRef, e Ended) {
	key := proposalKey(prefixEnded, ref)
	b.set(key, e)
	b.file(ClassProposal, e.AtMs, key[1:])
}
