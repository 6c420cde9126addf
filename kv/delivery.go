package kv

import (
	"crypto/sha256"

	"github.com/portcullis/portcullis/schema"
)

// Delivery records the first admission of a delivery_id. The key hashes the
// tenant with the delivery id, so neither is stored.
type Delivery struct {
	ProposalID string `json:"proposal_id"`
	// Seq is the proposals-stream sequence of the message that first carried
	// this delivery: a redelivery of that same message is not a repeat.
	Seq uint64 `json:"seq"`
	// Forwarded is set once the proposal's hand-off to grounding was
	// acknowledged by JetStream, so a redelivery after the stream's
	// duplicate window does not hand it off twice.
	Forwarded bool  `json:"forwarded"`
	AtMs      int64 `json:"at_ms"`
}

func deliveryKey(tenantRef, deliveryID string) []byte {
	h := sha256.New()
	h.Write([]byte("delivery\x00"))
	h.Write([]byte(tenantRef))
	h.Write([]byte{0})
	h.Write([]byte(deliveryID))
	return h.Sum([]byte{prefixDelivery})
}

// Delivery returns the record of a tenant's delivery id.
func (s *Store) Delivery(tenantRef, deliveryID string) (Delivery, bool, error) {
	var d Delivery
	found, err := s.get(deliveryKey(tenantRef, deliveryID), &d)
	return d, found, err
}

// PutDelivery records a delivery.
func (b *Batch) PutDelivery(tenantRef, deliveryID string, d Delivery) {
	b.set(deliveryKey(tenantRef, deliveryID), d)
}

func outcomeKey(proposalID string) []byte {
	return appendString([]byte{prefixOutcome}, proposalID)
}

// LastOutcome returns the last outcome recorded for a proposal.
func (s *Store) LastOutcome(proposalID string) (schema.Outcome, bool, error) {
	var o schema.Outcome
	found, err := s.get(outcomeKey(proposalID), &o)
	return o, found, err
}

// PutOutcome records a proposal's latest outcome (outcomes are value-free).
func (b *Batch) PutOutcome(o schema.Outcome) {
	b.set(outcomeKey(o.ProposalID), o)
}

// RecordOutcomes records each proposal's latest outcome (stages.OutcomeLog).
func (s *Store) RecordOutcomes(outcomes []schema.Outcome) error {
	b := s.NewBatch()
	for _, o := range outcomes {
		b.PutOutcome(o)
	}
	return b.Commit(Sync)
}
