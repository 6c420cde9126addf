package kv

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// countNonces counts the two kinds of nonce records.
func countNonces(t *testing.T, s *Store) (byHash, byExpiry int) {
	t.Helper()
	err := s.ForEach(func(k, _ []byte) error {
		switch k[0] {
		case prefixNonce:
			byHash++
		case prefixNonceExpiry:
			byExpiry++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return byHash, byExpiry
}

func claim(t *testing.T, s *Store, nonce string, expires, now int64) bool {
	t.Helper()
	fresh, err := s.ClaimNonce(nonce, expires, now)
	if err != nil {
		t.Fatal(err)
	}
	return fresh
}

func TestClaimNonce(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const nonce = "n0nce-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	if !claim(t, s, nonce, 2000, 1000) {
		t.Fatal("first claim refused")
	}
	if claim(t, s, nonce, 2500, 1500) {
		t.Fatal("replay accepted")
	}
	if !claim(t, s, "other", 2000, 1000) {
		t.Fatal("another nonce refused")
	}
	// No record holds the nonce itself.
	_ = s.ForEach(func(k, v []byte) error {
		if bytes.Contains(k, []byte(nonce)) || bytes.Contains(v, []byte(nonce)) {
			t.Error("a nonce is stored in the clear")
		}
		return nil
	})

	// Across a restart.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if claim(t, s, nonce, 2500, 2000) {
		t.Fatal("replay accepted after reopening")
	}
	// Expired: claimable again, and the sweep removes the other expired one.
	if !claim(t, s, nonce, 4000, 2001) {
		t.Fatal("expired nonce refused")
	}
	if h, e := countNonces(t, s); h != 1 || e != 1 {
		t.Errorf("records after renewal: %d by hash, %d by expiry", h, e)
	}
	if claim(t, s, nonce, 5000, 3999) {
		t.Fatal("renewed nonce replayed")
	}
}

// TestNonceSweepIsBounded: one claim deletes at most MaxNonceSweep expired
// nonces, earliest first; later claims finish the job.
func TestNonceSweepIsBounded(t *testing.T) {
	s := open(t)
	const n = MaxNonceSweep*2 + 5
	for i := range n {
		if !claim(t, s, fmt.Sprint("old-", i), int64(100+i), 0) {
			t.Fatal("fresh nonce refused")
		}
	}
	live := 1000
	if !claim(t, s, "live", 10_000, int64(live)) {
		t.Fatal("fresh nonce refused")
	}
	if h, e := countNonces(t, s); h != n+1-MaxNonceSweep || e != h {
		t.Fatalf("after one sweep: %d by hash, %d by expiry", h, e)
	}
	// The earliest went first.
	for i, want := range map[int]bool{0: false, MaxNonceSweep - 1: false, MaxNonceSweep: true, n - 1: true} {
		var exp int64
		if found, err := s.get(nonceKey(nonceHash(fmt.Sprint("old-", i))), &exp); err != nil || found != want {
			t.Errorf("old-%d: found %v, want %v (%v)", i, found, want, err)
		}
	}
	for i := 0; i < 3; i++ {
		claim(t, s, fmt.Sprint("new-", i), 10_000, int64(live))
	}
	if h, e := countNonces(t, s); h != 1+3 || e != h {
		t.Errorf("after more claims: %d by hash, %d by expiry", h, e)
	}
	if claim(t, s, "live", 10_000, 9_999) {
		t.Error("a live nonce was swept")
	}
}

func TestClaimNonceConcurrent(t *testing.T) {
	s := open(t)
	var fresh atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			ok, err := s.ClaimNonce("same", 2000, 1000)
			if err != nil {
				t.Error(err)
			}
			if ok {
				fresh.Add(1)
			}
		})
	}
	wg.Wait()
	if fresh.Load() != 1 {
		t.Errorf("%d claims of one nonce succeeded", fresh.Load())
	}
}
