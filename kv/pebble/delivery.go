package pebble

import (
	"crypto/sha256"

	"github.com/portcullis/portcullis/kv"

	"github.com/portcullis/portcullis/schema"
)

// proposalKey is the key part of a proposal: its host and id, escaped.
func proposalKey(prefix byte, ref schema.ProposalRef) []byte {
	return appendString(appendString([]byte{prefix}, ref.Host), ref.ProposalID)
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
func (s *Store) Delivery(host, deliveryID string) (kv.Delivery, bool, error) {
	var d kv.Delivery
	found, err := s.get(deliveryKey(host, deliveryID), &d)
	return d, found, err
}

// PutDelivery records a delivery.
func (b *Batch) PutDelivery(host, deliveryID string, d kv.Delivery) {
	key := deliveryKey(host, deliveryID)
	b.set(key, d)
	b.file(ClassDelivery, d.AtMs, key[1:])
}

// Admitted returns a proposal's admission record.
func (s *Store) Admitted(ref schema.ProposalRef) (kv.Admitted, bool, error) {
	var a kv.Admitted
	found, err := s.get(proposalKey(prefixAdmitted, ref), &a)
	return a, found, err
}

// PutAdmitted records a proposal's admission.
func (b *Batch) PutAdmitted(ref schema.ProposalRef, a kv.Admitted) {
	key := proposalKey(prefixAdmitted, ref)
	b.set(key, a)
	b.file(ClassProposal, a.AtMs, key[1:])
}

var _ kv.OutcomeLog = (*Store)(nil)

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

// RecordOutcomes records each proposal's latest outcome (kv.OutcomeLog):
// an outcome that neither restates nor supersedes the one recorded
// (SPEC §2.4 Order: a stale decision, published late) leaves the record
// as it is, so that a repeat never replays an older truth. NoSync: the
// record must be durable before the input is acked, not before the
// outcome is published (a crash in between redelivers the input, which
// records it again); the runner calls Flush before the ack, one fsync for
// every input acked at that moment.
func (s *Store) RecordOutcomes(outcomes []schema.Outcome) error {
	b := s.NewBatch()
	for _, o := range outcomes {
		last, found, err := s.LastOutcome(o.To())
		if err != nil {
			return err
		}
		if found && !o.Standing().Follows(last.Standing()) {
			continue
		}
		b.PutOutcome(o)
	}
	return b.Commit(NoSync)
}

// Ended returns the dispatch-time end of a proposal, if any.
func (s *Store) Ended(ref schema.ProposalRef) (kv.Ended, bool, error) {
	var e kv.Ended
	found, err := s.get(proposalKey(prefixEnded, ref), &e)
	return e, found, err
}

// PutEnded records a proposal's dispatch-time end.
func (b *Batch) PutEnded(ref schema.ProposalRef, e kv.Ended) {
	key := proposalKey(prefixEnded, ref)
	b.set(key, e)
	b.file(ClassProposal, e.AtMs, key[1:])
}
