package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

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

	locks kv.KeyedMutex
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

// Update applies edit to the fingerprint's snapshot (a new one if none)
// and writes it with compare-and-set, retrying on a concurrent writer.
// Writers in this process are serialized per fingerprint; the CAS guards
// against other processors. The snapshot is read from the bucket only when
// this store did not write it last: a fingerprint it has not seen is
// created outright (and read only if that finds it exists), one it wrote
// is updated at the revision it wrote.
func (s *Activity) Update(ctx context.Context, fingerprint string, edit func(a *schema.Activity)) error {
	key := ActivityKey(fingerprint)
	unlock := s.locks.Lock(key)
	defer unlock()
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
		if known && rev != 0 {
			if err := schema.Decode(cur, &a); err != nil {
				return fmt.Errorf("activity: decode: %w", err)
			}
		} else {
			a = schema.Activity{Schema: schema.SchemaActivity, Fingerprint: fingerprint}
		}
		edit(&a)
		// A dispatch section is written with its result or not at all (the
		// schema has no status for one without): an edit that could not
		// complete it — reconciliation's, before the dispatch's receipt can
		// be read — leaves it to a later write.
		if a.Dispatch != nil && a.Dispatch.FinishedAtMs == 0 {
			a.Dispatch = nil
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
