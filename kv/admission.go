package kv

import "github.com/portcullis/portcullis/schema"

// Admissions are what the admission stage remembers of the ids hosts have
// used (SPEC §2.1, §3): which message took a (host, proposal_id) and with
// which content digest (Admitted), which message first carried a (host,
// delivery_id) (Delivery), and each proposal's latest outcome, which a
// repeat is answered with. The Pebble backend keeps them in the
// processor's own store (one processor alone); the JetStream one in a KV
// bucket every processor of a cluster shares (SPEC §6), so that a reused
// id or a repeated delivery is caught whichever processor handles each
// message.
//
// Every record is value-free: digests, stream sequences, ids.
type Admissions interface {
	// Lock serializes this process's work on a key (ProposalLockKey of a
	// proposal, or DeliveryLockKey of a delivery): the retention sweep
	// takes the same proposal lock.
	Lock(key string) (unlock func())
	// Delivery returns the record of a host's delivery id.
	Delivery(host, deliveryID string) (Delivery, bool, error)
	// Admitted returns the record of the message that took a proposal id.
	Admitted(ref schema.ProposalRef) (Admitted, bool, error)
	// Admit takes ref's proposal id for a, and deliveryID for d, unless
	// another message took either first (AdmissionClaim says which;
	// nothing of this claim is kept then, but for a delivery id of a
	// repeat). A claim that finds the records of this very message (a.Seq:
	// a redelivery, or its own earlier write that timed out) has won. The
	// caller read both records absent under the locks of both keys. On
	// return without error the records are durable.
	Admit(ref schema.ProposalRef, a Admitted, deliveryID string, d Delivery) (AdmissionClaim, error)
	// Repeat records deliveryID as a repeat of an admitted proposal. A lost
	// record only makes the next repeat compare digests again.
	Repeat(host, deliveryID string, d Delivery) error
	// Forwarded records that a's hand-off to grounding was acknowledged.
	// A lost record only makes a redelivery hand off again (under the same
	// message id, inside the stream's duplicate window).
	Forwarded(ref schema.ProposalRef, a Admitted) error
	// LastOutcome returns the latest outcome of a proposal, which a repeat
	// is answered with.
	LastOutcome(ref schema.ProposalRef) (schema.Outcome, bool, error)
}

// AdmissionClaim is what Admissions.Admit found taken.
type AdmissionClaim struct {
	// Delivery is set when another message took the delivery id first:
	// this one is a repeat of it.
	Delivery *Delivery
	// Admitted is set when the proposal id was taken already: by another
	// message (Seq differs; a repeat if the digests agree, else a reuse),
	// or by this message before.
	Admitted *Admitted
}

// DeliveryLockKey is the Admissions.Lock key of a host's delivery id.
func DeliveryLockKey(host, deliveryID string) string {
	return "delivery/" + host + "\x00" + deliveryID
}
