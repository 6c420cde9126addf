// Package retention removes what the Pebble store no longer needs: every
// record class has a horizon after its last change (configuration block
// `retention`), and a background sweep reads the store's time-ordered
// expiry index (kv/retention.go) up to each horizon, decides from the
// records themselves and deletes — the index itself and an intent's
// receipts and attempts by range deletion.
//
// What is kept, and for how long after its last change:
//
//   - per proposal — delivery record, admission record, last outcome,
//     dispatch-time end, approval record — and grounding checkpoints:
//     Horizons.Proposals, at least streams.max_age. Until then a message
//     can still be redelivered or replayed from its stream, and a repeat of
//     a delivery or proposal is recognized and answered with its recorded
//     outcome. A parked proposal is never removed (its approval timer
//     decides it first).
//   - a finished intent journal with its receipts and attempts:
//     Horizons.Receipts, at least streams.max_age and the longest a grant
//     can authorize (approval.max_grant_lifetime + clock_skew). Every
//     replay that could still reach a provider — a message in a stream, a
//     host's retry under its grant — finds the receipt and is answered
//     with it. An intent that is not finished (verification or
//     reconciliation pending, or exhausted and waiting for an operator)
//     is never removed.
//
// Operator nonces are not this sweep's: each claim removes those it no
// longer needs (pebble.Store.ClaimNonce), by the stamps of accepted requests
// rather than any clock.
package retention

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/portcullis/portcullis/kv"

	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/portcullis/portcullis/schema"
)

// Horizons say how long records are kept after their last change.
type Horizons struct {
	// Proposals: deliveries, admissions, last outcomes, dispatch-time
	// ends, approval records, grounding checkpoints.
	Proposals time.Duration
	// Receipts: finished intent journals, their receipts and attempts.
	Receipts time.Duration
}

// Sweeper removes expired records from a store.
type Sweeper struct {
	Store    *pebble.Store
	Horizons Horizons
	// LockProposal serializes with the writers of a proposal's records
	// (admission's and the approvals' locks); LockIntent with the
	// journal's (kv.Journal.Lock). Either may be nil (tests).
	LockProposal func(ref schema.ProposalRef) (unlock func())
	LockIntent   func(fingerprint string) (unlock func())
	// Now is the processor's clock, in Unix ms.
	Now func() int64
	// Batch bounds the index entries read at once. Default 256.
	Batch int
	Log   *slog.Logger
	// Shared, when set, sweeps what the processors of a cluster share
	// (the replicated journal, the operator nonces) after the store: each
	// removal there a compare-and-set of its own, so that every
	// processor may run it at once. nil on one node.
	Shared func(ctx context.Context, h Horizons, now int64) (Stats, error)
}

// Stats counts what one sweep removed (and the entities it looked at and
// kept for later: parked, pending, not finished).
type Stats struct {
	Proposals, Deliveries, Groundings, Intents, Nonces int
	Kept                                               int
}

func (st Stats) removed() int {
	return st.Proposals + st.Deliveries + st.Groundings + st.Intents + st.Nonces
}

func (s *Sweeper) batch() int {
	if s.Batch <= 0 {
		return 256
	}
	return s.Batch
}

func (s *Sweeper) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

func noLock() {}

// Run sweeps at once and then every interval until ctx is cancelled. A
// failed sweep is logged and tried again at the next interval. Its first
// sweep files the records of a store written before the expiry index
// existed (pebble.Store.FileUnfiled).
func (s *Sweeper) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	if n, err := s.Store.FileUnfiled(); err != nil {
		s.log().Warn("retention: filing older records failed; they are kept", "err", err)
	} else if n > 0 {
		s.log().Info("retention: filed records written before the expiry index", "records", n)
	}
	for {
		st, err := s.Sweep(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.log().Warn("retention sweep failed; will retry", "err", err)
		case st.removed() > 0:
			s.log().Info("retention sweep", "proposals", st.Proposals, "deliveries", st.Deliveries,
				"grounding_checkpoints", st.Groundings, "intents", st.Intents, "nonces", st.Nonces, "kept", st.Kept)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sweep removes every record past its horizon, a batch at a time, until
// none is left or ctx is cancelled.
func (s *Sweeper) Sweep(ctx context.Context) (Stats, error) {
	var st Stats
	now := s.Now()
	classes := []struct {
		class   byte
		horizon time.Duration
		one     func(f pebble.Filed, cutoff, now int64, st *Stats) error
	}{
		{pebble.ClassProposal, s.Horizons.Proposals, s.proposal},
		{pebble.ClassDelivery, s.Horizons.Proposals, s.delivery},
		{pebble.ClassGrounding, s.Horizons.Proposals, s.grounding},
		{pebble.ClassIntent, s.Horizons.Receipts, s.intent},
	}
	for _, c := range classes {
		cutoff := now - c.horizon.Milliseconds()
		for {
			if err := ctx.Err(); err != nil {
				return st, nil
			}
			// Entries filed in cutoff's own minute may hold records
			// written after the cutoff: only whole minutes before it.
			entries, err := s.Store.FiledBefore(c.class, cutoff-pebble.FileBucketMs, s.batch())
			if err != nil {
				return st, err
			}
			if len(entries) == 0 {
				break
			}
			for _, f := range entries {
				if err := c.one(f, cutoff, now, &st); err != nil {
					return st, err
				}
			}
			b := s.Store.NewBatch()
			b.Unfile(entries)
			// NoSync: a sweep lost in a crash is done again by the next.
			if err := b.Commit(pebble.NoSync); err != nil {
				return st, err
			}
			if len(entries) < s.batch() {
				break
			}
		}
	}
	if s.Shared != nil && ctx.Err() == nil {
		shared, err := s.Shared(ctx, s.Horizons, now)
		st.Proposals += shared.Proposals
		st.Intents += shared.Intents
		st.Nonces += shared.Nonces
		st.Kept += shared.Kept
		if err != nil {
			return st, fmt.Errorf("retention: shared buckets: %w", err)
		}
	}
	return st, nil
}

func commit(b *pebble.Batch) error {
	if b.Empty() {
		return nil
	}
	return b.Commit(pebble.NoSync)
}

// proposal removes a proposal's records when the newest of them is older
// than cutoff and it is not parked.
func (s *Sweeper) proposal(f pebble.Filed, cutoff, now int64, st *Stats) error {
	ref, err := pebble.ProposalOf(f)
	if err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	unlock := noLock
	if s.LockProposal != nil {
		unlock = s.LockProposal(ref)
	}
	defer unlock()
	newest := int64(-1)
	if a, found, err := s.Store.Admitted(ref); err != nil {
		return err
	} else if found {
		newest = max(newest, a.AtMs)
	}
	if o, found, err := s.Store.LastOutcome(ref); err != nil {
		return err
	} else if found {
		newest = max(newest, o.AtMs)
	}
	if e, found, err := s.Store.Ended(ref); err != nil {
		return err
	} else if found {
		newest = max(newest, e.AtMs)
	}
	var rec kv.Approval
	parked := false
	if found, err := s.Store.Approval(ref, &rec); err != nil {
		return err
	} else if found {
		newest = max(newest, rec.StampMs())
		parked = rec.Parked()
	}
	pending, err := s.Store.TimerPending(kv.ApprovalTimerID(ref))
	if err != nil {
		return err
	}
	b := s.Store.NewBatch()
	switch {
	case newest < 0:
		return nil // gone already
	case newest >= cutoff:
		return nil // written since: filed again then
	case parked || pending:
		st.Kept++
		b.Refile(f, now) // its expiry decides it first; look again later
	default:
		st.Proposals++
		b.DeleteProposal(ref, kv.ApprovalTimerID(ref))
	}
	return commit(b)
}

func (s *Sweeper) delivery(f pebble.Filed, cutoff, _ int64, st *Stats) error {
	d, found, err := s.Store.DeliveryFiled(f)
	if err != nil || !found || d.AtMs >= cutoff {
		return err
	}
	st.Deliveries++
	b := s.Store.NewBatch()
	b.DeleteDeliveryFiled(f)
	return commit(b)
}

func (s *Sweeper) grounding(f pebble.Filed, cutoff, _ int64, st *Stats) error {
	g, found, err := s.Store.GroundingFiled(f)
	if err != nil || !found || g.AtMs >= cutoff {
		return err
	}
	st.Groundings++
	b := s.Store.NewBatch()
	b.DeleteGroundingFiled(f)
	return commit(b)
}

// intent removes a finished journal whose last change is older than
// cutoff, with its receipts and attempts.
func (s *Sweeper) intent(f pebble.Filed, cutoff, now int64, st *Stats) error {
	fp, err := pebble.FingerprintOf(f)
	if err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	unlock := noLock
	if s.LockIntent != nil {
		unlock = s.LockIntent(fp)
	}
	defer unlock()
	var rec kv.Intent
	found, err := s.Store.Intent(fp, &rec)
	if err != nil || !found {
		return err
	}
	last := rec.UpdatedAtMs
	if at, known, err := s.Store.IntentWritten(fp); err != nil {
		return err
	} else if known {
		last = at // a proposal answered from the journal wrote it since
	}
	if last >= cutoff {
		return nil // written since: filed again then
	}
	pending, err := s.Store.TimerPending(kv.IntentTimerID(fp))
	if err != nil {
		return err
	}
	b := s.Store.NewBatch()
	if !rec.Finished() || pending {
		st.Kept++
		b.Refile(f, now)
	} else {
		st.Intents++
		b.DeleteIntent(fp, kv.IntentTimerID(fp))
	}
	return commit(b)
}
