package kv

// Nonces remember the nonces of accepted operator requests (SPEC §2.8).
//
// What they may forget is decided by the stamps of accepted requests, never
// by a clock: a nonce is forgotten only once its request's requested_at_ms
// is more than the window older than the newest requested_at_ms accepted,
// and a request stamped that old is refused (NonceTooOld, answered stale)
// whether its nonce is remembered or not. The processor's clock only
// decides staleness (admin.MaxRequestSkew), so a clock that jumps far
// forward and back again cannot make a replay acceptable: while it is
// ahead, requests stamped by right clocks are refused as stale and nothing
// is forgotten; a request accepted while it was ahead raises the newest
// stamp, and every request stamped more than the window before it is
// refused from then on.
//
// The Pebble backend keeps one processor's nonces in its store; the
// JetStream one a cluster's, in a bucket every processor shares.
type Nonces interface {
	// ClaimNonce claims nonce for a request stamped requestedAtMs: fresh,
	// replayed (claimed before) or too old. An error leaves it unknown
	// whether the claim was stored; the request is then refused.
	ClaimNonce(nonce string, requestedAtMs int64) (NonceClaim, error)
}
