package kvtest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv"
)

// NonceWindow is the window between accepted stamps the nonces
// RunNonces checks are opened with.
const NonceWindow = 10 * time.Second

// OpenNonces opens fresh nonces with window NonceWindow and returns them
// with a function that opens one more instance over the same storage:
// another processor sharing them (for a single node, the same store).
type OpenNonces func(t *testing.T) (s kv.Nonces, another func() kv.Nonces)

// RunNonces is the conformance suite every kv.Nonces backend passes: a
// nonce is claimed once, across instances; what is refused as too old
// follows the newest stamp accepted, never a clock.
func RunNonces(t *testing.T, open OpenNonces) {
	now := time.Now().UnixMilli()
	w := NonceWindow.Milliseconds()
	claim := func(t *testing.T, s kv.Nonces, nonce string, stamp int64, want kv.NonceClaim) {
		t.Helper()
		if got, err := s.ClaimNonce(nonce, stamp); err != nil || got != want {
			t.Fatalf("ClaimNonce(%s, %d) = %v, %v; want %v", nonce, stamp, got, err, want)
		}
	}

	t.Run("once", func(t *testing.T) {
		s, another := open(t)
		claim(t, s, "nonce-a-abcdefgh", now, kv.NonceFresh)
		claim(t, s, "nonce-a-abcdefgh", now, kv.NonceReplayed)
		claim(t, another(), "nonce-a-abcdefgh", now+1, kv.NonceReplayed)
		claim(t, another(), "nonce-b-abcdefgh", now, kv.NonceFresh)
	})

	t.Run("racing claims", func(t *testing.T) {
		_, another := open(t)
		ns := []kv.Nonces{another(), another(), another()}
		for round := range 5 {
			RaceNonce(t, ns, fmt.Sprintf("nonce-race-%d-abcdefgh", round), now)
		}
	})

	t.Run("window follows the newest stamp", func(t *testing.T) {
		s, another := open(t)
		claim(t, s, "nonce-first-abcdefgh", now, kv.NonceFresh)
		// Inside the window of the newest stamp, before or after it.
		claim(t, s, "nonce-before-abcdefgh", now-w, kv.NonceFresh)
		claim(t, s, "nonce-after-abcdefgh", now+1000, kv.NonceFresh)
		later := now + w + 2000
		claim(t, another(), "nonce-later-abcdefgh", later, kv.NonceFresh)
		// More than the window before the newest stamp: too old, on any
		// instance, a fresh nonce or a replay alike.
		claim(t, s, "nonce-old-abcdefgh", later-w-1, kv.NonceTooOld)
		claim(t, another(), "nonce-old-2-abcdefgh", now, kv.NonceTooOld)
		if got, err := another().ClaimNonce("nonce-first-abcdefgh", now); err != nil || got == kv.NonceFresh {
			t.Fatalf("a replay after the window moved: %v, %v", got, err)
		}
		// The newest stamp never moves back.
		claim(t, s, "nonce-back-abcdefgh", later-w, kv.NonceFresh)
		claim(t, s, "nonce-back-2-abcdefgh", later-w-1, kv.NonceTooOld)
	})
}

// RaceNonce claims nonce, stamped stamp, on every one of ns at once and
// fails t unless exactly one claim was fresh.
func RaceNonce(t *testing.T, ns []kv.Nonces, nonce string, stamp int64) {
	t.Helper()
	var fresh atomic.Int64
	var wg sync.WaitGroup
	for _, n := range ns {
		wg.Go(func() {
			c, err := n.ClaimNonce(nonce, stamp)
			if err != nil {
				t.Error(err)
				return // not a win: an error's claim is meaningless
			}
			if c == kv.NonceFresh {
				fresh.Add(1)
			}
		})
	}
	wg.Wait()
	if fresh.Load() != 1 {
		t.Fatalf("%s: %d claims of one nonce were fresh, want 1", nonce, fresh.Load())
	}
}
