package pebble

import (
	"testing"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/kvtest"
)

// The checkpoint's Pebble key is its prefix and the 32-byte GroundingKey
// (RunGroundings checks the rest).
func TestGroundingKeyLayout(t *testing.T) {
	key := kv.GroundingKey("ACTIONS_GROUNDING", 7, []byte("body"))
	if k := groundingKey(key); k[0] != prefixGrounding || len(k) != 33 {
		t.Errorf("key layout %x", k)
	}
}

func TestGroundings(t *testing.T) {
	kvtest.RunGroundings(t, func(t *testing.T) (kv.Groundings, func() kv.Groundings) {
		dir := t.TempDir()
		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, func() kv.Groundings {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s, err = Open(dir, Options{}); err != nil {
				t.Fatal(err)
			}
			return s
		}
	})
}
