package jetstream

import (
	"errors"
	"fmt"
	"sync"

	"github.com/portcullis/portcullis/kv"
)

// CAS is the compare-and-set every replicated store commits its records
// with (the journal's, the approvals'): a per-key Lock that starts a
// session, the first Load under it remembered as what the session's
// Commit compares with (never a blind read-then-write), and a Swap
// against that revision that recognizes its own write when one timed out.
//
// A session is named by an id of the caller's (a fingerprint, a record
// key); the bucket key is given to each read and write. T is the value
// stored at the record's key; ID returns a version's commit id
// (CommitID), by which Swap recognizes its own write read back.
type CAS[T any] struct {
	Handle
	ID func(*T) string
	// Conflict and Uncertain are the store's own sentinels, which Swap's
	// errors wrap (besides kv.ErrUncertain itself).
	Conflict, Uncertain error

	locks    kv.KeyedMutex
	mu       sync.Mutex
	sessions map[string]*session[T]
}

// Version is what a session remembers: the revision its first Load read
// (0: nothing was found) and that version; Clean is the caller's mark
// that the version's follow-up writes are stored (MarkClean).
type Version[T any] struct {
	Rev   uint64
	Cur   *T
	Clean bool
}

type session[T any] struct {
	loaded bool
	Version[T]
}

// Lock serializes this process's work on id and starts the session that
// remembers what Load read.
func (c *CAS[T]) Lock(id string) func() {
	unlock := c.locks.Lock(id)
	c.mu.Lock()
	if c.sessions == nil {
		c.sessions = map[string]*session[T]{}
	}
	s := &session[T]{}
	c.sessions[id] = s
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		if c.sessions[id] == s {
			delete(c.sessions, id)
		}
		c.mu.Unlock()
		unlock()
	}
}

// Load reads key (nil, 0 when it has no value). The first Load of a
// session is what its Commit compares with; a later one (by the caller,
// or by a reader that does not hold the Lock) never moves it forward: a
// revision remembered too early only makes the compare-and-set fail.
func (c *CAS[T]) Load(id, key string) (*T, uint64, error) {
	var v T
	rev, found, err := c.Get(key, &v)
	if err != nil {
		return nil, 0, err
	}
	cur := &v
	if !found {
		cur, rev = nil, 0
	}
	c.mu.Lock()
	if s := c.sessions[id]; s != nil && !s.loaded {
		s.loaded, s.Version = true, Version[T]{Rev: rev, Cur: cur}
	}
	c.mu.Unlock()
	return cur, rev, nil
}

// Session returns what id's session remembered; loaded is false when
// there is none (not under Lock) or it has no Load yet.
func (c *CAS[T]) Session(id string) (v Version[T], loaded bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.sessions[id]; s != nil && s.loaded {
		return s.Version, true
	}
	return Version[T]{}, false
}

// Remember makes the version just written at rev what id's session
// compares with next (nothing without a session).
func (c *CAS[T]) Remember(id string, rev uint64, cur *T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.sessions[id]; s != nil {
		s.loaded, s.Version = true, Version[T]{Rev: rev, Cur: cur}
	}
}

// Forget drops what id's session remembered: its next Commit compares
// with a fresh read.
func (c *CAS[T]) Forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.sessions[id]; s != nil {
		s.loaded, s.Version = false, Version[T]{}
	}
}

// MarkClean marks the session's version clean if it is still cur.
func (c *CAS[T]) MarkClean(id string, cur *T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.sessions[id]; s != nil && s.Cur == cur {
		s.Clean = true
	}
}

// Swap is the compare-and-set of key: Create when rev is 0, else Update
// against rev; a failure that is not a clear conflict is settled by
// reading the value back (Budget.Swap, within SettleTimeout). It returns
// the new revision, or an error wrapping Conflict (another writer first:
// nothing was written), Uncertain, or the refusal; short names the record
// in it.
func (c *CAS[T]) Swap(key, short string, rev uint64, v *T) (uint64, error) {
	newRev, err := SwapJSON(c.Budget(), c.KV, key, v, rev, c.Settle(), c.ID)
	switch {
	case errors.Is(err, ErrConflict):
		return 0, fmt.Errorf("%w: record %s changed since it was read", c.Conflict, short)
	case errors.Is(err, ErrUncertain):
		return 0, fmt.Errorf("%w: record %s: %w", c.Uncertain, short, err)
	case err != nil:
		return 0, fmt.Errorf("%s: write %s: %w", c.Name, short, err)
	}
	return newRev, nil
}
