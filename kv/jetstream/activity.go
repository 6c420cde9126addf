package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// ActivityKey is the bucket key of a fingerprint ("sha256:<hex>" or bare
// hex): its 64 hex digits.
func ActivityKey(fingerprint string) string { return schema.FingerprintKey(fingerprint) }

// Activity is kv.Activity on the JetStream KV bucket `<prefix>_activity`:
// the value-free activity snapshot of each intent, keyed by ActivityKey,
// which every processor of a cluster shares.
type Activity struct {
	KV jetstream.KeyValue
	// Now stamps UpdatedAtMs.
	Now func() int64
	// JS, if set, writes each snapshot with the subjects.HostHeader of the
	// share of the bucket it counts in (each host's is bounded: package
	// shares): Share's of the host of the intent's first proposal. nil:
	// written through KV, in no share.
	JS    jetstream.JetStream
	Share func(host string) string

	// Linger is how long an UpdateFollowed edit waits for the edit
	// expected to follow it (dispatch's, after authorization's) before
	// it is written alone; an Update of the intent meanwhile ends the
	// wait, and both are written at once. 0: no wait — edits made while a
	// write of the intent is under way still share the next write.
	Linger time.Duration

	locks kv.KeyedMutex
	// batches holds, per key, the edits waiting for the key's next write.
	batches map[string]*batch
	// pending counts the edits UpdateFollowed left waiting; closing ends
	// their waits (Close).
	pending sync.WaitGroup
	closing chan struct{}
	closed  bool
	// writes counts the snapshots written (Writes).
	writes atomic.Uint64
	// last remembers what this store last wrote for a key and at which
	// revision, so that the next update of the same intent (dispatch after
	// authorization, reconciliation after dispatch) writes at that revision
	// without reading it back first. A stale entry (another processor
	// wrote since) only costs a failed compare-and-set and a read.
	mu   sync.Mutex
	last map[string]written
}

var _ kv.Activity = (*Activity)(nil)

type written struct {
	rev  uint64
	data []byte
}

// maxRemembered bounds Activity.last: intents are updated a few times within
// seconds of each other, then rarely.
const maxRemembered = 8192

func (s *Activity) remembered(key string) (written, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.last[key]
	return w, ok
}

func (s *Activity) remember(key string, w written) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[string]written{}
	}
	if _, ok := s.last[key]; !ok && len(s.last) >= maxRemembered {
		for k := range s.last { // forget an arbitrary one
			delete(s.last, k)
			break
		}
	}
	s.last[key] = w
}

func (s *Activity) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.last, key)
}

// Get returns the snapshot of a fingerprint.
func (s *Activity) Get(ctx context.Context, fingerprint string) (*schema.Activity, error) {
	e, err := s.KV.Get(ctx, ActivityKey(fingerprint))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, kv.ErrNoActivity
	}
	if err != nil {
		return nil, fmt.Errorf("activity: get: %w", err)
	}
	var a schema.Activity
	if err := schema.Decode(e.Value(), &a); err != nil {
		return nil, fmt.Errorf("activity: decode: %w", err)
	}
	return &a, nil
}

// batch is the edits of one key written together.
type batch struct {
	edits []func(a *schema.Activity)
	// wake is closed when an edit no other is expected to follow joins
	// the batch: its first caller stops lingering.
	wake  chan struct{}
	woken bool
	done  chan struct{} // closed once written (or failed: err)
	err   error
}

// Update applies edit to the fingerprint's snapshot (a new one if none)
// and writes it with compare-and-set, retrying on a concurrent writer; it
// returns once the snapshot holding the edit is in the bucket (or with
// the write's error: a caller retries). Edits of one fingerprint in this
// process are coalesced: those made while a write of it is under way, or
// waiting (UpdateFollowed), are applied in order to one snapshot and
// written once; a batch that changes nothing is not written. The CAS
// guards against other processors. The snapshot is read from the bucket
// only when this store did not write it last: a fingerprint it has not
// seen is created outright (and read only if that finds it exists), one
// it wrote is updated at the revision it wrote.
func (s *Activity) Update(ctx context.Context, fingerprint string, edit func(a *schema.Activity)) error {
	key := ActivityKey(fingerprint)
	b, owner := s.join(key, edit, false)
	if !owner {
		// The batch's first caller writes it. Should ctx end first, the
		// edit is written all the same.
		select {
		case <-b.done:
			return b.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.flush(ctx, key, fingerprint, b)
}

// UpdateFollowed is kv.Activity's: it returns at once, the edit waiting up
// to Linger for the Update expected to follow it, which writes both at
// once; alone, it is written when Linger has passed, retried until
// written or Close. An edit that waits is lost should the process die
// first: its follower must make it again (dispatch applies the permit it
// was handed before its own edit).
func (s *Activity) UpdateFollowed(ctx context.Context, fingerprint string, edit func(a *schema.Activity)) error {
	s.mu.Lock()
	if s.closing == nil {
		s.closing = make(chan struct{})
	}
	closing, closed := s.closing, s.closed
	if !closed {
		s.pending.Add(1)
	}
	s.mu.Unlock()
	if closed {
		return s.Update(ctx, fingerprint, edit)
	}
	key := ActivityKey(fingerprint)
	b, owner := s.join(key, edit, true)
	if !owner {
		s.pending.Done()
		return nil
	}
	go func() {
		defer s.pending.Done()
		t := time.NewTimer(s.Linger)
		select {
		case <-t.C:
		case <-b.wake:
		case <-closing:
		}
		t.Stop()
		try := func(b *batch) error {
			ctx, cancel := context.WithTimeout(context.Background(), followedWriteTimeout)
			defer cancel()
			return s.flush(ctx, key, fingerprint, b)
		}
		wait := 50 * time.Millisecond
		for try(b) != nil {
			// Its edits go first in the key's next batch (those that
			// waited on this one had its error, and make theirs again):
			// written by that batch's writer, or here after a pause.
			var owner bool
			if b, owner = s.requeue(key, b.edits); !owner {
				return
			}
			select {
			case <-closing:
				_ = try(b) // one last try
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 2*time.Second)
		}
	}()
	return nil
}

// requeue puts edits first in key's waiting batch, a new one if none
// waits; owner: the caller made it.
func (s *Activity) requeue(key string, edits []func(a *schema.Activity)) (b *batch, owner bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, joined := s.batches[key]
	if !joined {
		b = &batch{wake: make(chan struct{}), done: make(chan struct{})}
		s.batches[key] = b
	}
	b.edits = append(append([]func(a *schema.Activity){}, edits...), b.edits...)
	return b, !joined
}

// followedWriteTimeout bounds each try of a write UpdateFollowed left to
// the background.
const followedWriteTimeout = 10 * time.Second

// Close writes every edit still waiting (UpdateFollowed) and returns once
// they are written, or tried once more when ctx ends.
func (s *Activity) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closing == nil {
		s.closing = make(chan struct{})
	}
	if !s.closed {
		s.closed = true
		close(s.closing)
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.pending.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("activity: edits still waiting at close: %w", ctx.Err())
	}
}

// join adds edit (nil: none) to key's waiting batch, a new one if none
// waits; owner: the caller made it, and writes it.
func (s *Activity) join(key string, edit func(a *schema.Activity), followed bool) (b *batch, owner bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.batches == nil {
		s.batches = map[string]*batch{}
	}
	b, joined := s.batches[key]
	if !joined {
		b = &batch{wake: make(chan struct{}), done: make(chan struct{})}
		s.batches[key] = b
	}
	if edit != nil {
		b.edits = append(b.edits, edit)
	}
	if !followed && !b.woken {
		b.woken = true
		close(b.wake)
	}
	return b, !joined
}

// flush writes batch b of key: edits join it until its write begins, past
// the key's lock (a write of the key's previous batch under way).
func (s *Activity) flush(ctx context.Context, key, fingerprint string, b *batch) error {
	unlock := s.locks.Lock(key)
	s.mu.Lock()
	if s.batches[key] == b {
		delete(s.batches, key)
	}
	edits := b.edits
	s.mu.Unlock()
	if len(edits) == 0 {
		unlock()
		close(b.done)
		return nil
	}
	b.err = s.write(ctx, fingerprint, key, edits)
	unlock()
	close(b.done)
	return b.err
}

// Writes is the number of snapshots this store has written.
func (s *Activity) Writes() uint64 { return s.writes.Load() }

// write applies edits in order to key's snapshot and writes it once
// (the key's lock held).
func (s *Activity) write(ctx context.Context, fingerprint, key string, edits []func(a *schema.Activity)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// known: the snapshot and revision to edit come from memory (the last
	// write here) or from a fresh read; fresh: nothing is known, try to
	// create.
	var cur []byte
	var rev uint64
	w, known := s.remembered(key)
	if known {
		cur, rev = w.data, w.rev
	}
	for range 10 {
		var a schema.Activity
		var before []byte
		if known && rev != 0 {
			if err := schema.Decode(cur, &a); err != nil {
				return fmt.Errorf("activity: decode: %w", err)
			}
			var err error
			if before, err = schema.Marshal(a); err != nil {
				return fmt.Errorf("activity: encode: %w", err)
			}
		} else {
			a = schema.Activity{Schema: schema.SchemaActivity, Fingerprint: fingerprint}
		}
		updated := a.UpdatedAtMs
		for _, edit := range edits {
			edit(&a)
		}
		// A dispatch section is written with its result or not at all (the
		// schema has no status for one without): an edit that could not
		// complete it — reconciliation's, before the dispatch's receipt can
		// be read — leaves it to a later write.
		if a.Dispatch != nil && a.Dispatch.FinishedAtMs == 0 {
			a.Dispatch = nil
		}
		if before != nil {
			// Nothing changed (a redelivered input's edit, one a later
			// state already covers): no write.
			a.UpdatedAtMs = updated
			if after, err := schema.Marshal(a); err == nil && bytes.Equal(after, before) {
				return nil
			}
		}
		if s.Now != nil {
			a.UpdatedAtMs = s.Now()
		}
		data, err := schema.Marshal(a)
		if err != nil {
			return fmt.Errorf("activity: encode: %w", err)
		}
		newRev, err := s.put(ctx, key, data, rev, &a)
		if err == nil {
			s.writes.Add(1)
			s.remember(key, written{rev: newRev, data: data})
			return nil
		}
		s.forget(key)
		if !Lost(err) {
			return fmt.Errorf("activity: write: %w", err)
		}
		// Someone else wrote it: read what is there and edit that.
		e, err := s.KV.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			cur, rev, known = nil, 0, true
		case err != nil:
			return fmt.Errorf("activity: get: %w", err)
		default:
			cur, rev, known = e.Value(), e.Revision(), true
		}
	}
	return errors.New("activity: too many concurrent updates")
}

// put writes data under key at revision rev (0: a key that has none),
// compare-and-set, as KV's Create and Update do — with the share's header
// when it can.
func (s *Activity) put(ctx context.Context, key string, data []byte, rev uint64, a *schema.Activity) (uint64, error) {
	if s.JS == nil {
		if rev == 0 {
			return s.KV.Create(ctx, key, data)
		}
		return s.KV.Update(ctx, key, data, rev)
	}
	share := subjects.Unattributed
	if len(a.Proposals) > 0 {
		share = a.Proposals[0].Host
		if s.Share != nil {
			share = s.Share(share)
		}
	}
	m := nats.NewMsg("$KV." + s.KV.Bucket() + "." + key)
	m.Data = data
	m.Header.Set(subjects.HostHeader, share)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	ack, err := s.JS.PublishMsg(ctx, m)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}
