package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/portcullis/portcullis/kv"

	"github.com/go-json-experiment/json"
	"github.com/nats-io/nats.go/jetstream"
)

// SweepStats counts what one Sweep of a replicated journal did.
type SweepStats struct {
	// Intents: finished records removed, with their receipts, attempts
	// and index entry.
	Intents int
	// Ended: dispatch-time ends of proposals removed.
	Ended int
	// Kept: records past the horizon that are not finished (an operator
	// is waited for, a dispatch is in flight, a poll is pending).
	Kept int
}

// markerTTL is how long the marker of a removed key stays in the bucket's
// stream: a removed key reads as absent with or without it.
const markerTTL = time.Hour

// Sweep removes from the bucket what is past its horizon, as the retention
// sweep does in Pebble (package retention): a finished record (Finished:
// settled, its effect known, nothing pending) whose last write is older
// than receipts before now, with its receipts, attempts and index entry;
// a proposal's dispatch-time end older than proposals. A key's last write
// is its stream message's time, by the servers' clock: the same for every
// processor, whatever their own clocks say (now is the sweeping
// processor's; the horizons are days). A record that is
// not finished is kept however old — one waiting for an operator
// (exhausted RECONCILIATION_REQUIRED), one in flight, one being verified
// or reconciled: it is the fence of an action whose effect is not known.
//
// Cost: Sweep reads the bucket's stream in order (stream sequence ≈ the
// time of each key's last write; no consumer), one message at a time from
// where its previous sweep stopped, and stops at the first message newer
// than the horizon. So each record is read about once per processor after
// it passed its horizon — a record kept is not read again until it is
// written again, since the value at a stream sequence never changes — and
// a sweep of a bucket where nothing expired is one request per key
// prefix. Removing a record costs about two requests per key it owns.
//
// Several processors may sweep at once: every removal is a compare-and-set
// on the revision read. A record is first replaced by a tombstone (its
// last version, marked swept) by Update on the revision that was judged
// finished — a record written since is not touched — then every key it
// owns that is older than the tombstone is purged on its own revision,
// then the tombstone is purged on its. A writer that loads a tombstone
// reads no record, and its Commit first purges the same keys (Commit's
// repair), so that a new life of the fingerprint never finds the old one's
// receipts or attempts; a tombstone a crashed sweep left is finished by a
// later sweep once it is past the horizon itself.
func (r *Journal) Sweep(ctx context.Context, receipts, proposals time.Duration, now time.Time) (SweepStats, error) {
	r.sweepMu.Lock()
	defer r.sweepMu.Unlock()
	var st SweepStats
	cutoff := now.Add(-receipts)
	err := r.scan(ctx, "rec.", &r.recCursor, cutoff, func(key string, m *jetstream.RawStreamMsg) error {
		var s stored
		if err := json.Unmarshal(m.Data, &s); err != nil {
			r.log.Warn("journal: sweep: a record that does not decode is kept", "key", key, "seq", m.Sequence)
			return nil
		}
		h := strings.TrimPrefix(key, "rec.")
		switch {
		case s.Swept:
			if err := r.bury(h, &s.Record, m.Sequence); err != nil {
				return err
			}
		case !s.Record.Finished():
			st.Kept++
		default:
			removed, err := r.sweepRecord(h, &s, m.Sequence)
			if err != nil {
				return err
			}
			if removed {
				st.Intents++
			}
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	cutoff = now.Add(-proposals)
	err = r.scan(ctx, "end.", &r.endCursor, cutoff, func(key string, m *jetstream.RawStreamMsg) error {
		removed, err := r.purge(key, m.Sequence)
		if removed {
			st.Ended++
		}
		return err
	})
	return st, err
}

// scan calls f with every value under prefix whose last write is older
// than cutoff, in stream order from *cursor, and moves *cursor past each
// one f returned for. It stops at the first newer one.
func (r *Journal) scan(ctx context.Context, prefix string, cursor *uint64, cutoff time.Time, f func(key string, m *jetstream.RawStreamMsg) error) error {
	err := r.cas.Scan(ctx, prefix, cursor, func(key string, m *jetstream.RawStreamMsg) (bool, error) {
		if !m.Time.Before(cutoff) {
			return false, nil
		}
		return true, f(key, m)
	})
	if err != nil {
		return fmt.Errorf("journal: sweep: %w", err)
	}
	return nil
}

// sweepRecord removes a finished record read at rev: tombstone, owned
// keys, tombstone. removed is false when another writer changed it first.
func (r *Journal) sweepRecord(h string, s *stored, rev uint64) (removed bool, err error) {
	tomb := &stored{Record: s.Record, Writer: r.writer, Commit: CommitID(), Swept: true}
	t, err := r.swap(h, rev, tomb)
	switch {
	case errors.Is(err, kv.ErrConflict):
		return false, nil // written since: judged again once it is old
	case err != nil:
		return false, err
	}
	return true, r.bury(h, &tomb.Record, t)
}

// bury purges what a record swept at tombstone revision t owned (every key
// older than t: a new life's keys are newer), then the tombstone.
func (r *Journal) bury(h string, rec *kv.Intent, t uint64) error {
	if err := r.clean(h, rec, t); err != nil {
		return err
	}
	_, err := r.purge(recordKey(h), t)
	return err
}

// clean purges the keys a record owned that were written before revision
// t: its receipts' history, its reconciliation attempts and its index
// entry. Each purge is on the revision read, so a key written after t — by
// a new life of the fingerprint — is never touched.
func (r *Journal) clean(h string, rec *kv.Intent, t uint64) error {
	keys := []string{indexKey(h)}
	for seq := uint64(1); seq <= rec.ReceiptSeq; seq++ {
		keys = append(keys, receiptKey(h, seq))
	}
	fp := "sha256:" + h
	for n := 1; n <= rec.ReconcileAttempt; n++ {
		keys = append(keys, attemptKey(h, kv.AttemptID(fp, n)))
	}
	keys = append(keys, attemptKey(h, kv.OperatorAttemptID(fp)))
	for _, key := range keys {
		rev, err := r.cas.Revision(key)
		switch {
		case err != nil:
			return fmt.Errorf("journal: sweep: %w", err)
		case rev == 0, rev > t:
			continue
		}
		if _, err := r.purge(key, rev); err != nil {
			return err
		}
	}
	return nil
}

// purge removes key if its revision is still rev; removed is false when it
// changed since.
func (r *Journal) purge(key string, rev uint64) (removed bool, err error) {
	if removed, err = r.cas.Purge(key, rev, markerTTL); err != nil {
		return false, fmt.Errorf("journal: sweep: %w", err)
	}
	return removed, nil
}
