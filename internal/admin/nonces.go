package admin

import "time"

// NonceWindow is how far apart the stamps of two accepted requests may
// lie: a request may be stamped MaxRequestSkew before or after the clock
// of the processor that accepts it, and the processors' clocks may
// disagree by margin. The nonces (kv.Nonces) forget a nonce only once a
// request stamped more than the window after it was accepted.
func NonceWindow(margin time.Duration) time.Duration { return 2*MaxRequestSkew + margin }
