package jetstream

import (
	"errors"

	"github.com/portcullis/portcullis/kv"
)

// Import writes one record of a single node's local approvals into the
// bucket (`processor migrate`), with the expiry timer of a parked one
// armed first, as every commit does. It never overwrites: a record already
// there is Present when it is this proposal's same parking or decision
// (the same fingerprint, envelope and arrival — decided by the cluster
// since, perhaps), otherwise a Conflict. Running it again is safe.
func (r *Approvals) Import(rec kv.Approval, timer *kv.Timer) (Import, error) {
	ref := rec.Ref()
	unlock := r.Lock(ref)
	defer unlock()
	same := func() (Import, error) {
		got, found, err := r.Load(ref)
		switch {
		case err != nil:
			return 0, err
		case found && got.Fingerprint == rec.Fingerprint && got.Seq == rec.Seq && got.ArrivedAtMs == rec.ArrivedAtMs:
			return Present, nil
		case found:
			return Conflict, nil
		}
		return Created, nil
	}
	if res, err := same(); err != nil || res != Created {
		return res, err
	}
	w := kv.ApprovalWrites{From: kv.StateNone, Record: &rec}
	if rec.Parked() {
		w.Timer = timer
	}
	err := r.Commit(ref, w)
	if errors.Is(err, kv.ErrConflict) {
		// Another writer first: what it wrote decides.
		if res, err := same(); err != nil || res != Created {
			return res, err
		}
		return Conflict, nil
	}
	if err != nil {
		return 0, err
	}
	return Created, nil
}
