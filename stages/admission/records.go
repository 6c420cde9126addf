package admission

import (
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/pebble"
	"github.com/portcullis/portcullis/schema"
)

// Records are what the admission stage remembers of the ids hosts have
// used (SPEC §2.1, §3): which message took a (host, proposal_id) and with
// which content digest, which message first carried a (host, delivery_id),
// and each proposal's latest outcome, which a repeat is answered with.
// Pebble keeps them in the processor's own store (one processor alone);
// Replicated in a JetStream KV bucket every processor of a cluster shares
// (SPEC §6), so a reused id or a repeated delivery is caught whichever
// processor handles each message.
//
// Every record is value-free: digests, stream sequences, ids.
type Records interface {
	// Lock serializes this process's work on a key (kv.ProposalLockKey of
	// a proposal, or a delivery's key): the retention sweep takes the same
	// proposal lock.
	Lock(key string) (unlock func())
	// Delivery returns the record of a host's delivery id.
	Delivery(host, deliveryID string) (kv.Delivery, bool, error)
	// Admitted returns the record of the message that took a proposal id.
	Admitted(ref schema.ProposalRef) (kv.Admitted, bool, error)
	// Admit takes ref's proposal id for a, and deliveryID for d, unless
	// another message took either first (Claim says which; nothing of
	// this claim is kept then, but for a delivery id of a repeat). A claim
	// that finds the records of this very message (a.Seq: a redelivery,
	// or its own earlier write that timed out) has won. On return without
	// error the records are durable.
	Admit(ref schema.ProposalRef, a kv.Admitted, deliveryID string, d kv.Delivery) (Claim, error)
	// Repeat records deliveryID as a repeat of an admitted proposal. A lost
	// record only makes the next repeat compare digests again.
	Repeat(host, deliveryID string, d kv.Delivery) error
	// Forwarded records that a's hand-off to grounding was acknowledged.
	// A lost record only makes a redelivery hand off again (under the same
	// message id, inside the stream's duplicate window).
	Forwarded(ref schema.ProposalRef, a kv.Admitted) error
	// LastOutcome returns the latest outcome of a proposal, which a repeat
	// is answered with.
	LastOutcome(ref schema.ProposalRef) (schema.Outcome, bool, error)
}

// Claim is what Admit found taken.
type Claim struct {
	// Delivery is set when another message took the delivery id first:
	// this one is a repeat of it.
	Delivery *kv.Delivery
	// Admitted is set when the proposal id was taken already: by another
	// message (Seq differs; a repeat if the digests agree, else a reuse),
	// or by this message before.
	Admitted *kv.Admitted
}

// Pebble are the records in the processor's own store.
type Pebble struct{ Store *pebble.Store }

var _ Records = Pebble{}

func (p Pebble) Lock(key string) func() { return p.Store.Lock(key) }

func (p Pebble) Delivery(host, deliveryID string) (kv.Delivery, bool, error) {
	return p.Store.Delivery(host, deliveryID)
}

func (p Pebble) Admitted(ref schema.ProposalRef) (kv.Admitted, bool, error) {
	return p.Store.Admitted(ref)
}

// Admit writes both records in one synced batch: the caller read them
// absent under the locks of both keys, and only this process writes them.
func (p Pebble) Admit(ref schema.ProposalRef, a kv.Admitted, deliveryID string, d kv.Delivery) (Claim, error) {
	b := p.Store.NewBatch()
	b.PutAdmitted(ref, a)
	b.PutDelivery(ref.Host, deliveryID, d)
	return Claim{}, b.Commit(pebble.Sync)
}

func (p Pebble) Repeat(host, deliveryID string, d kv.Delivery) error {
	b := p.Store.NewBatch()
	b.PutDelivery(host, deliveryID, d)
	return b.Commit(pebble.NoSync)
}

func (p Pebble) Forwarded(ref schema.ProposalRef, a kv.Admitted) error {
	b := p.Store.NewBatch()
	b.PutAdmitted(ref, a)
	return b.Commit(pebble.NoSync)
}

func (p Pebble) LastOutcome(ref schema.ProposalRef) (schema.Outcome, bool, error) {
	return p.Store.LastOutcome(ref)
}
