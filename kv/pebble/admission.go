package pebble

import (
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// AdmissionRecords are the admission records (kv.Admissions) in the processor's
// own store: its locks, its delivery and proposal records, the outcomes it
// recorded.
type AdmissionRecords struct{ *Store }

var _ kv.Admissions = AdmissionRecords{}

// Admit writes both records in one synced batch: the caller read them
// absent under the locks of both keys, and only this process writes them.
func (a AdmissionRecords) Admit(ref schema.ProposalRef, adm kv.Admitted, deliveryID string, d kv.Delivery) (kv.AdmissionClaim, error) {
	b := a.NewBatch()
	b.PutAdmitted(ref, adm)
	b.PutDelivery(ref.Host, deliveryID, d)
	return kv.AdmissionClaim{}, b.Commit(Sync)
}

// Repeat records a repeat's delivery id, unsynced: a lost record only
// makes the next repeat compare digests again.
func (a AdmissionRecords) Repeat(host, deliveryID string, d kv.Delivery) error {
	b := a.NewBatch()
	b.PutDelivery(host, deliveryID, d)
	return b.Commit(NoSync)
}

// Forwarded overwrites the proposal's record, unsynced: a lost record only
// makes a redelivery hand off again.
func (a AdmissionRecords) Forwarded(ref schema.ProposalRef, adm kv.Admitted) error {
	b := a.NewBatch()
	b.PutAdmitted(ref, adm)
	return b.Commit(NoSync)
}
