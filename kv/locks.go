package kv

import (
	"sync"

	"github.com/portcullis/portcullis/schema"
)

// ProposalLockKey is the lock (Store.Lock) of a proposal's admission
// records: admission holds it while it decides on a proposal, the
// retention sweep while it removes them.
func ProposalLockKey(ref schema.ProposalRef) string {
	return "proposal/" + ref.Host + "\x00" + ref.ProposalID
}

// KeyedMutex serializes work per key (a fingerprint, a proposal id) without
// one global lock. Entries are reference-counted and removed when unused.
// The zero value is ready to use.
type KeyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// Lock locks key and returns its unlock function.
func (k *KeyedMutex) Lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
