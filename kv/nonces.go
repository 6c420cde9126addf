package kv

import (
	"crypto/sha256"
	"fmt"
)

// Nonces of signed operator requests (SPEC §2.8): a nonce claimed once is
// refused again until its expiry, across restarts. Each claim is two
// value-free records, neither of which holds the nonce itself:
//
//	'n' sha256(nonce)              → expires_at_ms   (the replay check)
//	'N' expires_at_ms sha256(nonce) → empty          (the sweep, in expiry order)
//
// Every claim deletes up to MaxNonceSweep expired nonces in the same synced
// batch, so the records never outgrow the requests of the last window.

// MaxNonceSweep bounds the expired nonces one claim deletes. It is far
// above one, so that the sweep keeps up with any rate of claims.
const MaxNonceSweep = 64

// nonceLock serializes claims: a claim reads, then writes, and a sweep must
// not delete a record that a concurrent claim has just renewed. Operator
// requests are rare, so one lock costs nothing.
const nonceLock = "kv/nonces"

func nonceHash(nonce string) []byte {
	h := sha256.New()
	h.Write([]byte("nonce\x00"))
	h.Write([]byte(nonce))
	return h.Sum(nil)
}

func nonceKey(hash []byte) []byte { return append([]byte{prefixNonce}, hash...) }

func nonceExpiryKey(expiresAtMs int64, hash []byte) []byte {
	return append(appendUint64([]byte{prefixNonceExpiry}, uint64(max(expiresAtMs, 0))), hash...)
}

// ClaimNonce records nonce until expiresAtMs and reports whether it was
// fresh: false if the nonce was claimed before and has not expired by
// nowMs (a replay; nothing is written). A fresh claim is synced before
// ClaimNonce returns, so the caller may act on it. Expired nonces, of any
// claim, are deleted along the way (at most MaxNonceSweep per call).
func (s *Store) ClaimNonce(nonce string, expiresAtMs, nowMs int64) (fresh bool, err error) {
	unlock := s.locks.Lock(nonceLock)
	defer unlock()
	hash := nonceHash(nonce)
	var prevExpiry int64
	found, err := s.get(nonceKey(hash), &prevExpiry)
	if err != nil {
		return false, err
	}
	if found && prevExpiry >= nowMs {
		return false, nil
	}
	b := s.NewBatch()
	if found {
		b.delete(nonceExpiryKey(prevExpiry, hash)) // expired but not yet swept
	}
	if err := s.sweepNonces(b, nowMs); err != nil {
		return false, err
	}
	b.set(nonceKey(hash), expiresAtMs)
	b.ops = append(b.ops, op{key: nonceExpiryKey(expiresAtMs, hash), val: []byte{}})
	if err := b.Commit(Sync); err != nil {
		return false, fmt.Errorf("kv: claim nonce: %w", err)
	}
	return true, nil
}

// sweepNonces adds to b the deletion of up to MaxNonceSweep nonces that
// expired before nowMs, earliest first.
func (s *Store) sweepNonces(b *Batch, nowMs int64) error {
	lower := []byte{prefixNonceExpiry}
	upper := appendUint64([]byte{prefixNonceExpiry}, uint64(max(nowMs, 0)))
	n := 0
	return s.scanRange(lower, upper, func(key, _ []byte) (bool, error) {
		if len(key) != 1+8+sha256.Size {
			return false, fmt.Errorf("%w: nonce expiry key", ErrCorrupt)
		}
		b.delete(key)
		b.delete(nonceKey(key[9:]))
		n++
		return n < MaxNonceSweep, nil
	})
}
