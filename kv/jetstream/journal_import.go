package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/go-json-experiment/json"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// Import writes one intent of a single node's local journal into the
// bucket (`processor migrate`): its reconciliation attempts first (so that
// an attempt the node started is never asked again), then its pending
// timer, then the record by compare-and-set create, then its receipt
// history and index entry. It never overwrites: a record already in the
// bucket is Present when it is this one or a later version of it (an
// earlier import's, which the cluster moved on since: same identity and
// dispatch, and this record's latest receipt in its history), otherwise a
// Conflict, and nothing more of this intent is written. receipts are the
// history, oldest first; indeterminateSince is the local index entry's
// (0: none). The timer is armed only when the record is created, before
// it, as every commit does: a crash in between leaves an extra timer, which
// the stage ignores. Every write is idempotent, so an import interrupted
// anywhere is finished by running it again.
func (r *Journal) Import(rec kv.Intent, receipts []schema.Receipt, attempts []kv.Attempt, indeterminateSince int64, timer *kv.Timer) (Import, error) {
	h, err := keyHex(rec.Fingerprint)
	if err != nil {
		return 0, err
	}
	for i := range attempts {
		a := &attempts[i]
		res, err := ImportJSON(r.cas.Handle, attemptKey(h, a.AttemptID), a, func(got *kv.Attempt) bool {
			return got.AttemptID == a.AttemptID && got.StartedAtMs == a.StartedAtMs
		})
		if err != nil || res == Conflict {
			return res, err
		}
	}
	res, err := r.importRecord(h, &rec, timer)
	if err != nil || res == Conflict {
		return res, err
	}
	for i := range receipts {
		rc := &receipts[i]
		got, err := ImportJSON(r.cas.Handle, receiptKey(h, uint64(i+1)), rc, func(got *schema.Receipt) bool { return sameJSON(got, rc) })
		if err != nil || got == Conflict {
			return got, err
		}
	}
	if indeterminateSince > 0 {
		if _, err := ImportJSON(r.cas.Handle, indexKey(h), &indeterminateSince, func(*int64) bool { return true }); err != nil {
			return 0, err
		}
	}
	return res, nil
}

// importRecord creates the record unless the key holds one; Present when
// what it holds descends from rec.
func (r *Journal) importRecord(h string, rec *kv.Intent, timer *kv.Timer) (Import, error) {
	cur, _, err := r.readBack(h)
	if err != nil {
		return 0, err
	}
	if cur == nil {
		if timer != nil {
			if err := r.do(func(ctx context.Context) error { return r.timers.Arm(ctx, *timer) }); err != nil {
				return 0, fmt.Errorf("journal: import: %w", err)
			}
		}
		s := &stored{Record: *rec, Writer: r.writer, Commit: importCommit(rec)}
		_, err := r.swap(h, 0, s)
		switch {
		case err == nil:
			return Created, nil
		case !errors.Is(err, kv.ErrConflict):
			return 0, err
		}
		if cur, _, err = r.readBack(h); err != nil || cur == nil {
			return Conflict, err
		}
	}
	if cur.Swept {
		return Conflict, nil
	}
	ok, err := r.descends(h, &cur.Record, rec)
	if err != nil || !ok {
		return Conflict, err
	}
	return Present, nil
}

// importCommit is the commit id of an import: the same for the same
// record, so that an import whose write timed out but was stored, run
// again, recognizes its own.
func importCommit(rec *kv.Intent) string {
	data, _ := json.Marshal(rec, json.Deterministic(true))
	sum := sha256.Sum256(data)
	return "import-" + hex.EncodeToString(sum[:12])
}

// descends reports whether b, stored under l's key, is l or a later
// version of it: the same intent and dispatch, and l's latest receipt in
// b's history.
func (r *Journal) descends(h string, b, l *kv.Intent) (bool, error) {
	switch {
	case b.Identity != l.Identity, b.DispatchAttempts < l.DispatchAttempts, b.ReceiptSeq < l.ReceiptSeq:
		return false, nil
	case b.DispatchAttempts == l.DispatchAttempts && b.InFlightAtMs != l.InFlightAtMs:
		return false, nil
	case l.ReceiptSeq == 0:
		return true, nil
	case b.ReceiptSeq == l.ReceiptSeq:
		return sameJSON(b.Receipt, l.Receipt), nil
	}
	var rc schema.Receipt
	_, found, err := r.cas.Get(receiptKey(h, l.ReceiptSeq), &rc)
	return found && sameJSON(&rc, l.Receipt), err
}

// ImportEnded writes a proposal's dispatch-time end unless one is there
// (Present when it is the same).
func (r *Journal) ImportEnded(ref schema.ProposalRef, e kv.Ended) (Import, error) {
	return ImportJSON(r.cas.Handle, endedKey(ref), &e, func(got *kv.Ended) bool { return *got == e })
}

func sameJSON[T any](a, b *T) bool {
	x, errA := json.Marshal(a, json.Deterministic(true))
	y, errB := json.Marshal(b, json.Deterministic(true))
	return errA == nil && errB == nil && string(x) == string(y)
}
