package jetstream

import (
	"context"
	"errors"
	"time"

	"github.com/portcullis/portcullis/kv"

	"github.com/go-json-experiment/json"
	"github.com/nats-io/nats.go/jetstream"
)

// The watcher of Replicated: it keeps the set of parked proposals (Count,
// Parked) current with every processor's commits.
//
// It reads the whole bucket once (the latest value of every key) into a
// fresh set, then every change as the stream stores it. nats.go's ordered
// consumer re-creates itself after a missed heartbeat or a gap, resuming
// after the last message it delivered; if the watch ends (the connection
// closed, the consumer could not be re-created), watch starts over with a
// fresh read of the bucket.
//
// This processor's own commits are applied at once (applyLocal), so that
// Count and Parked reflect them before the watcher delivers them; local
// remembers their revisions until it does, so that an older version it
// delivers meanwhile is not applied over them.

// watchCreateTimeout bounds the creation of the watcher's consumer: a
// JetStream API request that finds no leader gets no answer at all.
const watchCreateTimeout = 10 * time.Second

// watchRetry is the pause before watching again after the watch ended.
const watchRetry = time.Second

func (r *Approvals) watch(ctx context.Context) {
	defer close(r.stopped)
	for {
		err := r.watchOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("approvals: the bucket's watcher stopped; watching again (actions_approvals_pending may lag meanwhile)", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(watchRetry):
		}
	}
}

func (r *Approvals) watchOnce(ctx context.Context) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel() // also ends the subscription (nats.go unsubscribes on its context's end)
	created := make(chan struct{})
	go func() {
		select {
		case <-created:
		case <-time.After(watchCreateTimeout):
			cancel()
		}
	}()
	w, err := r.cas.KV.WatchAll(wctx)
	close(created)
	if err != nil {
		return err
	}
	defer func() {
		_ = w.Stop()
		// nats.go's handler blocks on a full Updates channel: drain it
		// until the subscription's close closes it, or give up.
		timeout := time.After(2 * time.Second)
		for {
			select {
			case _, ok := <-w.Updates():
				if !ok {
					return
				}
			case <-timeout:
				return
			}
		}
	}()

	// The initial read: the latest value of every key, into fresh; initRev
	// the revisions read of the keys local holds.
	fresh := map[string]parkedEntry{}
	initRev := map[string]uint64{}
	initial := true
	for {
		var e jetstream.KeyValueEntry
		var ok bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok = <-w.Updates():
		}
		if !ok {
			return errors.New("approvals: the watch ended")
		}
		if e == nil {
			if initial {
				r.swapIn(fresh, initRev)
				initial, fresh, initRev = false, nil, nil
				r.initOnce.Do(func() { close(r.initialized) })
			}
			continue
		}
		rec := r.decodeWatched(e)
		if initial {
			r.cmu.Lock()
			if _, mine := r.local[e.Key()]; mine {
				initRev[e.Key()] = e.Revision()
			}
			r.seen = max(r.seen, e.Revision())
			r.cmu.Unlock()
			if rec != nil && rec.Parked() {
				fresh[e.Key()] = parkedEntry{rev: e.Revision(), ref: rec.Ref(), expiresAtMs: rec.ExpiresAtMs}
			}
			continue
		}
		r.applyWatched(e.Key(), e.Revision(), rec)
	}
}

// decodeWatched is the record of a watched entry; nil when the key was
// deleted or purged, or its value does not decode (logged, value-free).
func (r *Approvals) decodeWatched(e jetstream.KeyValueEntry) *kv.Approval {
	if e.Operation() != jetstream.KeyValuePut {
		return nil
	}
	var s approvalStored
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		r.log.Warn("approvals: a record in the bucket does not decode; not counted", "key", short(e.Key()))
		return nil
	}
	return &s.Record
}

// swapIn makes the initial read the set of parked proposals, with this
// processor's commits the read did not include applied over it.
func (r *Approvals) swapIn(fresh map[string]parkedEntry, initRev map[string]uint64) {
	r.cmu.Lock()
	defer r.cmu.Unlock()
	for key, le := range r.local {
		if initRev[key] >= le.rev {
			delete(r.local, key) // the read holds it, or something newer
			continue
		}
		if le.entry != nil {
			fresh[key] = *le.entry
		} else {
			delete(fresh, key)
		}
	}
	r.parked = fresh
}

// applyWatched applies a version the watcher delivered after its initial
// read, unless this processor's own newer commit is applied already.
func (r *Approvals) applyWatched(key string, rev uint64, rec *kv.Approval) {
	r.cmu.Lock()
	defer r.cmu.Unlock()
	r.seen = max(r.seen, rev)
	if le, ok := r.local[key]; ok {
		if le.rev >= rev {
			if le.rev == rev {
				delete(r.local, key)
			}
			return
		}
		delete(r.local, key)
	}
	if e, ok := r.parked[key]; ok && e.rev >= rev {
		return
	}
	if rec != nil && rec.Parked() {
		r.parked[key] = parkedEntry{rev: rev, ref: rec.Ref(), expiresAtMs: rec.ExpiresAtMs}
	} else {
		delete(r.parked, key)
	}
}

// applyLocal applies this processor's own commit of rec at rev, unless
// the watcher has delivered that far already (it applied this version, or
// will apply a newer one of the key).
func (r *Approvals) applyLocal(key string, rev uint64, rec *kv.Approval) {
	r.cmu.Lock()
	defer r.cmu.Unlock()
	if rev <= r.seen {
		return
	}
	le := localEntry{rev: rev}
	if rec.Parked() {
		e := parkedEntry{rev: rev, ref: rec.Ref(), expiresAtMs: rec.ExpiresAtMs}
		le.entry = &e
		r.parked[key] = e
	} else {
		delete(r.parked, key)
	}
	r.local[key] = le
}

// localEntry is one of this processor's commits the watcher has not
// delivered yet: its revision, and its parked entry (nil: not parked).
type localEntry struct {
	rev   uint64
	entry *parkedEntry
}
