package pebble

import (
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/portcullis/portcullis/kv"
)

// Nonces of signed operator requests (SPEC §2.8): a nonce claimed once is
// refused again, across restarts and whatever the processor's clock does.
// Each claim is two value-free records, neither of which holds the nonce
// itself, and the store keeps one fact about all of them:
//
//	'n' sha256(nonce)                 → requested_at_ms   (the replay check)
//	'N' requested_at_ms sha256(nonce) → nothing           (the sweep, oldest stamp first)
//	'z' "nonce_newest"                → the newest requested_at_ms accepted
//
// A nonce is forgotten only once its request's stamp is more than the
// window older than the newest stamp accepted, and a request stamped that
// old is refused (NonceTooOld) whether its nonce is still here or not. So
// no wall clock decides what is forgotten: a clock that jumps forward and
// back again cannot sweep a nonce its request could still be replayed
// with. (Records written before this rule held the request's expiry, which
// is at least its stamp: read as a stamp they are only kept longer.)
//
// Every claim deletes up to MaxNonceSweep forgotten nonces in the same
// synced batch, so the records never outgrow the requests of one window.

// MaxNonceSweep bounds the forgotten nonces one claim deletes. It is far
// above one, so that the sweep keeps up with any rate of claims.
const MaxNonceSweep = 64

// nonceLock serializes claims: a claim reads, then writes, and a sweep must
// not delete a record that a concurrent claim has just written. Operator
// requests are rare, so one lock costs nothing.
const nonceLock = "kv/nonces"

var nonceNewestKey = append([]byte{prefixMeta}, "nonce_newest"...)

func nonceHash(nonce string) []byte {
	h := sha256.New()
	h.Write([]byte("nonce\x00"))
	h.Write([]byte(nonce))
	return h.Sum(nil)
}

func nonceKey(hash []byte) []byte { return append([]byte{prefixNonce}, hash...) }

func nonceStampKey(stampMs int64, hash []byte) []byte {
	return append(appendUint64([]byte{prefixNonceStamp}, uint64(max(stampMs, 0))), hash...)
}

// ClaimNonce claims nonce for a request stamped requestedAtMs, with
// windowMs the longest two accepted requests' stamps may lie apart (the
// staleness bound on both sides, and a margin). A fresh claim is synced
// before ClaimNonce returns, so the caller may act on it; along the way it
// raises the newest stamp and deletes up to MaxNonceSweep nonces whose
// stamps fell more than windowMs behind it.
func (s *Store) ClaimNonce(nonce string, requestedAtMs, windowMs int64) (kv.NonceClaim, error) {
	unlock := s.locks.Lock(nonceLock)
	defer unlock()
	hash := nonceHash(nonce)
	var stamp int64
	found, err := s.get(nonceKey(hash), &stamp)
	if err != nil {
		return 0, err
	}
	if found {
		return kv.NonceReplayed, nil
	}
	var newest int64
	if _, err := s.get(nonceNewestKey, &newest); err != nil {
		return 0, err
	}
	if requestedAtMs < newest-windowMs {
		return kv.NonceTooOld, nil
	}
	b := s.NewBatch()
	if requestedAtMs > newest {
		newest = requestedAtMs
		b.set(nonceNewestKey, newest)
	}
	// The newest stamp is raised in the same batch as the deletions it
	// allows: no nonce is gone while the rule that refuses its replay is
	// not yet stored.
	if err := s.sweepNonces(b, newest-windowMs); err != nil {
		return 0, err
	}
	b.set(nonceKey(hash), requestedAtMs)
	b.ops = append(b.ops, op{key: nonceStampKey(requestedAtMs, hash), val: []byte{}})
	if err := b.Commit(Sync); err != nil {
		return 0, fmt.Errorf("kv: claim nonce: %w", err)
	}
	return kv.NonceFresh, nil
}

// sweepNonces adds to b the deletion of up to MaxNonceSweep nonces stamped
// before floorMs, oldest first.
func (s *Store) sweepNonces(b *Batch, floorMs int64) error {
	lower := []byte{prefixNonceStamp}
	upper := appendUint64([]byte{prefixNonceStamp}, uint64(max(floorMs, 0)))
	n := 0
	return s.scanRange(lower, upper, func(key, _ []byte) (bool, error) {
		if len(key) != 1+8+sha256.Size {
			return false, fmt.Errorf("%w: nonce stamp key", ErrCorrupt)
		}
		b.delete(key)
		b.delete(nonceKey(key[9:]))
		n++
		return n < MaxNonceSweep, nil
	})
}

// Nonces are one processor's operator request nonces (kv.Nonces), in its
// store.
type Nonces struct {
	Store *Store
	// Window is admin.NonceWindow of the processor's margin.
	Window time.Duration
}

var _ kv.Nonces = Nonces{}

// ClaimNonce claims nonce in the store (Store.ClaimNonce).
func (n Nonces) ClaimNonce(nonce string, requestedAtMs int64) (kv.NonceClaim, error) {
	return n.Store.ClaimNonce(nonce, requestedAtMs, n.Window.Milliseconds())
}
