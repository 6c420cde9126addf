package pebble

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/kvtest"
)

// countNonces counts the two kinds of nonce records.
func countNonces(t *testing.T, s *Store) (byHash, byStamp int) {
	t.Helper()
	err := s.ForEach(func(k, _ []byte) error {
		switch k[0] {
		case prefixNonce:
			byHash++
		case prefixNonceStamp:
			byStamp++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return byHash, byStamp
}

// window is the tests' window between accepted stamps.
const window = 1000

func claim(t *testing.T, s *Store, nonce string, stamp int64) kv.NonceClaim {
	t.Helper()
	c, err := s.ClaimNonce(nonce, stamp, window)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClaimNonce(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const nonce = "n0nce-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	if c := claim(t, s, nonce, 10_000); c != kv.NonceFresh {
		t.Fatalf("first claim: %v", c)
	}
	if c := claim(t, s, nonce, 10_000); c != kv.NonceReplayed {
		t.Fatalf("replay: %v", c)
	}
	if c := claim(t, s, "other", 9_500); c != kv.NonceFresh {
		t.Fatalf("another nonce, stamped a little earlier: %v", c)
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
	if c := claim(t, s, nonce, 10_000); c != kv.NonceReplayed {
		t.Fatalf("replay after reopening: %v", c)
	}
	// A request stamped more than the window after both: the two are
	// forgotten, and their replays refused as too old.
	if c := claim(t, s, "later", 11_001); c != kv.NonceFresh {
		t.Fatalf("later claim: %v", c)
	}
	if h, e := countNonces(t, s); h != 1 || e != 1 {
		t.Errorf("records after the window moved on: %d by hash, %d by stamp", h, e)
	}
	for _, n := range []string{nonce, "other", "never-seen"} {
		if c := claim(t, s, n, 10_000); c != kv.NonceTooOld {
			t.Errorf("%s stamped 10000 after 11001 was accepted: %v", n, c)
		}
	}
	// At the window's edge: still taken.
	if c := claim(t, s, "edge", 10_001); c != kv.NonceFresh {
		t.Errorf("a claim at the window's edge: %v", c)
	}
}

// TestNonceForgottenOnlyByStamps: nothing but the stamps of accepted
// requests makes a nonce forgotten — no clock is consulted — and every
// request whose nonce could have been forgotten is refused.
func TestNonceForgottenOnlyByStamps(t *testing.T) {
	s := open(t)
	// A request accepted, then nothing for a long time: it stays.
	if c := claim(t, s, "first", 5_000); c != kv.NonceFresh {
		t.Fatal(c)
	}
	for range 3 {
		if c := claim(t, s, "first", 5_000); c != kv.NonceReplayed {
			t.Fatalf("replay: %v", c)
		}
	}
	// Stamps that go backwards inside the window are taken; the newest
	// stamp does not move back with them.
	for i, st := range []int64{5_900, 5_100, 4_950} {
		if c := claim(t, s, fmt.Sprint("back-", i), st); c != kv.NonceFresh {
			t.Errorf("stamp %d: %v", st, c)
		}
	}
	if c := claim(t, s, "too-far-back", 4_899); c != kv.NonceTooOld {
		t.Errorf("a stamp more than the window before the newest: %v", c)
	}
	// Forgotten ones are exactly those more than the window behind.
	if c := claim(t, s, "ahead", 6_150); c != kv.NonceFresh {
		t.Fatal(c)
	}
	for n, want := range map[string]kv.NonceClaim{"first": kv.NonceTooOld, "back-0": kv.NonceReplayed, "back-1": kv.NonceTooOld, "back-2": kv.NonceTooOld, "ahead": kv.NonceReplayed} {
		st := map[string]int64{"first": 5_000, "back-0": 5_900, "back-1": 5_100, "back-2": 4_950, "ahead": 6_150}[n]
		if c := claim(t, s, n, st); c != want {
			t.Errorf("replay of %s: %v, want %v", n, c, want)
		}
	}
	if h, _ := countNonces(t, s); h != 2 {
		t.Errorf("%d nonces kept, want back-0 and ahead", h)
	}
}

// TestNonceSweepIsBounded: one claim deletes at most MaxNonceSweep
// forgotten nonces, oldest stamp first; later claims finish the job.
func TestNonceSweepIsBounded(t *testing.T) {
	s := open(t)
	const n = MaxNonceSweep*2 + 5
	for i := range n {
		if c := claim(t, s, fmt.Sprint("old-", i), int64(100+i)); c != kv.NonceFresh {
			t.Fatalf("fresh nonce refused: %v", c)
		}
	}
	live := int64(100 + n + window)
	if c := claim(t, s, "live", live); c != kv.NonceFresh {
		t.Fatal(c)
	}
	if h, e := countNonces(t, s); h != n+1-MaxNonceSweep || e != h {
		t.Fatalf("after one sweep: %d by hash, %d by stamp", h, e)
	}
	// The oldest went first.
	for i, want := range map[int]bool{0: false, MaxNonceSweep - 1: false, MaxNonceSweep: true, n - 1: true} {
		var st int64
		if found, err := s.get(nonceKey(nonceHash(fmt.Sprint("old-", i))), &st); err != nil || found != want {
			t.Errorf("old-%d: found %v, want %v (%v)", i, found, want, err)
		}
	}
	for i := range 3 {
		claim(t, s, fmt.Sprint("new-", i), live)
	}
	if h, e := countNonces(t, s); h != 1+3 || e != h {
		t.Errorf("after more claims: %d by hash, %d by stamp", h, e)
	}
	if c := claim(t, s, "live", live); c != kv.NonceReplayed {
		t.Errorf("a live nonce was swept: %v", c)
	}
}

// TestNonceRecordsOfExpiries: records written before stamps were kept
// hold the request's expiry (its stamp or later): they are forgotten by
// that value, so never before their request is refused as too old.
func TestNonceRecordsOfExpiries(t *testing.T) {
	s := open(t)
	hash := nonceHash("legacy")
	b := s.NewBatch()
	b.set(nonceKey(hash), int64(60_000)) // stamped 0, expiring at 60000
	b.ops = append(b.ops, op{key: nonceStampKey(60_000, hash), val: []byte{}})
	if err := b.Commit(Sync); err != nil {
		t.Fatal(err)
	}
	claim(t, s, "x", 60_500)
	if c := claim(t, s, "legacy", 0); c != kv.NonceReplayed {
		t.Errorf("legacy replay: %v", c)
	}
	claim(t, s, "y", 61_001)
	if h, _ := countNonces(t, s); h != 2 {
		t.Errorf("%d records, want x and y", h)
	}
	if c := claim(t, s, "legacy", 0); c != kv.NonceTooOld {
		t.Errorf("legacy replay once forgotten: %v", c)
	}
}

func TestClaimNonceConcurrent(t *testing.T) {
	s := open(t)
	var fresh atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			c, err := s.ClaimNonce("same", 2000, window)
			if err != nil {
				t.Error(err)
			}
			if c == kv.NonceFresh {
				fresh.Add(1)
			}
		})
	}
	wg.Wait()
	if fresh.Load() != 1 {
		t.Errorf("%d claims of one nonce succeeded", fresh.Load())
	}
}

func TestNonces(t *testing.T) {
	kvtest.RunNonces(t, func(t *testing.T) (kv.Nonces, func() kv.Nonces) {
		s := open(t)
		n := Nonces{Store: s, Window: kvtest.NonceWindow}
		return n, func() kv.Nonces { return n }
	})
}
