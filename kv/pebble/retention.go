package pebble

import (
	"context"
	"errors"
	"fmt"

	"github.com/portcullis/portcullis/kv"

	"github.com/cockroachdb/pebble/v2"

	"github.com/portcullis/portcullis/schema"
)

// Retention: every record that would otherwise stay forever is filed, when
// it is written, in a time-ordered expiry index:
//
//	'x' class filed_at(8, minute-aligned ms) id → nothing
//
// A sweep (package retention) reads the index from its oldest entry up to
// its horizon, decides for each entity from the records themselves (their
// own times, their state), deletes what has expired and removes the
// entries it read with one range deletion. A record written again is filed
// again (at its new time); the older entry is then stale and only dropped.
// Entries of one entity written within one minute share a key, so a busy
// record adds at most one entry per minute.
//
// Records filed, by class:
//
//	ClassProposal  admitted, last outcome, dispatch-time end, approval record
//	               (and the parked index and expiry timer index with them)
//	ClassDelivery  delivery records (hashed delivery ids)
//	ClassGrounding grounding checkpoints
//	ClassIntent    intent journals, with their receipts, attempts and timer
//	               index entry
//
// Nonces are swept by their claims (ClaimNonce), and fired timers are
// deleted when they fire (timer index entries go with their intent or
// proposal).
const (
	ClassProposal  byte = 'P'
	ClassDelivery  byte = 'D'
	ClassGrounding byte = 'G'
	ClassIntent    byte = 'F'
)

// FileBucketMs is the expiry index's time resolution.
const FileBucketMs = 60_000

// Stamped is a record that says when it last changed (approval records,
// which kv stores opaquely): the expiry index files it at that time. A
// record that does not say is filed at time 0 and looked at by the first
// sweep (which then files it at its own reckoning).
type Stamped interface{ StampMs() int64 }

// lastWriteKey notes when an entity was last written, for classes whose
// records do not say it themselves (intents):
//
//	'x' 'L' class id → filed_at (8 bytes)
func lastWriteKey(class byte, id []byte) []byte {
	return append([]byte{prefixExpiry, 'L', class}, id...)
}

// IntentWritten returns when a fingerprint's journal was last written
// (the store's clock), and false if that is not known.
func (s *Store) IntentWritten(fingerprint string) (int64, bool, error) {
	fp, err := fingerprintBytes(fingerprint)
	if err != nil {
		return 0, false, err
	}
	if err := s.begin(); err != nil {
		return 0, false, err
	}
	defer s.end()
	val, closer, err := s.db.Get(lastWriteKey(ClassIntent, fp))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("kv: get: %w", err)
	}
	defer closer.Close()
	at, _, err := readUint64(val)
	if err != nil {
		return 0, false, fmt.Errorf("%w: last write", ErrCorrupt)
	}
	return int64(at), true, nil
}

func stampOf(v any) int64 {
	if s, ok := v.(Stamped); ok {
		return s.StampMs()
	}
	return 0
}

func fileKey(class byte, atMs int64, id []byte) []byte {
	at := max(atMs, 0) / FileBucketMs * FileBucketMs
	k := appendUint64([]byte{prefixExpiry, class}, uint64(at))
	return append(k, id...)
}

// file adds the index entry of an entity of class written at atMs.
func (b *Batch) file(class byte, atMs int64, id []byte) {
	if b.err == nil {
		b.ops = append(b.ops, op{key: fileKey(class, atMs, id), val: []byte{}})
	}
}

// Refile files an entity again, at atMs (a sweep keeps it for later).
func (b *Batch) Refile(f Filed, atMs int64) { b.file(f.Class, atMs, f.ID) }

// Filed is an entry of the expiry index.
type Filed struct {
	Class byte
	AtMs  int64
	ID    []byte
	key   []byte
}

// FiledBefore returns up to limit entries of class filed before beforeMs,
// oldest first.
func (s *Store) FiledBefore(class byte, beforeMs int64, limit int) ([]Filed, error) {
	lower := []byte{prefixExpiry, class}
	upper := appendUint64([]byte{prefixExpiry, class}, uint64(max(beforeMs, 0)))
	var out []Filed
	err := s.scanRange(lower, upper, func(key, _ []byte) (bool, error) {
		if len(key) < 10 {
			return false, fmt.Errorf("%w: expiry index key", ErrCorrupt)
		}
		at, id, _ := readUint64(key[2:])
		out = append(out, Filed{Class: class, AtMs: int64(at), ID: id, key: key})
		return len(out) < limit, nil
	})
	return out, err
}

// Unfile removes index entries read by FiledBefore (of one class, in the
// order read): one range deletion from the first to the last.
func (b *Batch) Unfile(entries []Filed) {
	if len(entries) == 0 || b.err != nil {
		return
	}
	first, last := entries[0].key, entries[len(entries)-1].key
	b.ops = append(b.ops, op{key: first, end: append(append([]byte(nil), last...), 0), del: true})
}

// ProposalOf decodes the proposal of a ClassProposal entry.
func ProposalOf(f Filed) (schema.ProposalRef, error) {
	return readProposalKey(append([]byte{prefixExpiry}, f.ID...))
}

// DeleteProposal removes every record of a proposal: its admission,
// last outcome, dispatch-time end, approval record and parked index entry,
// and timerID's index entry (its approval expiry timer, fired). Callers
// hold the proposal's locks and have checked that nothing of it is pending
// (not parked, no timer).
func (b *Batch) DeleteProposal(ref schema.ProposalRef, timerID string) {
	for _, p := range []byte{prefixAdmitted, prefixOutcome, prefixEnded, prefixApproval, prefixPending} {
		b.delete(proposalKey(p, ref))
	}
	b.delete(timerIndexKey(timerID))
}

// DeliveryFiled returns the delivery record of a ClassDelivery entry.
func (s *Store) DeliveryFiled(f Filed) (kv.Delivery, bool, error) {
	var d kv.Delivery
	found, err := s.get(append([]byte{prefixDelivery}, f.ID...), &d)
	return d, found, err
}

// DeleteDeliveryFiled removes the delivery record of a ClassDelivery entry.
func (b *Batch) DeleteDeliveryFiled(f Filed) {
	b.delete(append([]byte{prefixDelivery}, f.ID...))
}

// GroundingFiled returns the checkpoint of a ClassGrounding entry.
func (s *Store) GroundingFiled(f Filed) (kv.Grounding, bool, error) {
	return s.Grounding(f.ID)
}

// DeleteGroundingFiled removes the checkpoint of a ClassGrounding entry.
func (b *Batch) DeleteGroundingFiled(f Filed) {
	b.delete(append([]byte{prefixGrounding}, f.ID...))
}

// FingerprintOf is the fingerprint of a ClassIntent entry.
func FingerprintOf(f Filed) (string, error) {
	if len(f.ID) != 32 {
		return "", fmt.Errorf("%w: intent index entry", ErrCorrupt)
	}
	return schema.FingerprintOfKey(fmt.Sprintf("%x", f.ID)), nil
}

// DeleteIntent removes a fingerprint's journal: its record, every receipt
// and reconciliation attempt (range deletions), its entry in the
// indeterminate index and timerID's index entry. Callers hold the
// fingerprint's lock and have checked that it is finished (no timer
// pending).
func (b *Batch) DeleteIntent(fingerprint, timerID string) {
	fp, err := fingerprintBytes(fingerprint)
	if err != nil {
		b.err = err
		return
	}
	b.delete(intentKey(fp))
	b.deleteRange(append([]byte{prefixReceipt}, fp...))
	b.deleteRange(append([]byte{prefixAttempt}, fp...))
	b.delete(indeterminateKey(fp))
	b.delete(timerIndexKey(timerID))
	b.delete(lastWriteKey(ClassIntent, fp))
}

// deleteRange removes every key starting with prefix.
func (b *Batch) deleteRange(prefix []byte) {
	if b.err == nil {
		b.ops = append(b.ops, op{key: prefix, end: prefixEnd(prefix), del: true})
	}
}

// ProposalTimerPending reports whether a timer with this ID is pending.
func (s *Store) TimerPending(id string) (bool, error) {
	_, found, err := s.Timer(id)
	return found, err
}

// DiskUsage is the store's size on disk (tables and WAL), in bytes.
func (s *Store) DiskUsage() (uint64, error) {
	if err := s.begin(); err != nil {
		return 0, err
	}
	defer s.end()
	return s.db.Metrics().DiskSpaceUsage(), nil
}

// Compact compacts the whole store down to its last level and waits for
// it: a store just filled in bulk is then as Pebble would leave it once
// settled, with no compaction left running (benchmarks measure against
// that). Pebble compacts by itself; nothing needs to call it.
func (s *Store) Compact(ctx context.Context) error {
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	if err := s.db.Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
		return fmt.Errorf("kv: compact: %w", err)
	}
	return nil
}

// Count counts the records under each one-byte key prefix (tests and
// tools: how many of each class the store holds).
func (s *Store) Count() (map[byte]int, error) {
	out := map[byte]int{}
	err := s.scanRange(nil, nil, func(key, _ []byte) (bool, error) {
		out[key[0]]++
		return true, nil
	})
	return out, err
}

// backfilledKey marks a store whose records written before the expiry
// index existed have been filed.
var backfilledKey = []byte{prefixExpiry, 0}

// FileUnfiled files every record of a store written before the expiry
// index existed (at time 0: the first sweep looks at each and files it
// again by its own times), once: later calls return at once. It returns
// how many entries it wrote.
func (s *Store) FileUnfiled() (int, error) {
	var done bool
	if found, err := s.get(backfilledKey, &done); err != nil || (found && done) {
		return 0, err
	}
	n := 0
	for _, c := range []struct{ prefix, class byte }{
		{prefixAdmitted, ClassProposal}, {prefixOutcome, ClassProposal}, {prefixEnded, ClassProposal}, {prefixApproval, ClassProposal},
		{prefixDelivery, ClassDelivery}, {prefixGrounding, ClassGrounding}, {prefixIntent, ClassIntent},
	} {
		lower, upper := []byte{c.prefix}, prefixEnd([]byte{c.prefix})
		for {
			b := s.NewBatch()
			var last []byte
			err := s.scanRange(lower, upper, func(key, _ []byte) (bool, error) {
				b.file(c.class, 0, key[1:])
				last = key
				return len(b.ops) < 4096, nil
			})
			if err != nil {
				return n, err
			}
			if last == nil {
				break
			}
			n += len(b.ops)
			if err := b.Commit(NoSync); err != nil {
				return n, err
			}
			lower = append(last, 0)
		}
	}
	b := s.NewBatch()
	b.set(backfilledKey, true)
	// Synced: the mark must not outlive the entries it stands for.
	return n, b.Commit(Sync)
}
