package pebble

import (
	"bytes"
	"testing"

	"github.com/portcullis/portcullis/kv"
)

func TestGroundingCheckpoint(t *testing.T) {
	s := open(t)
	key := kv.GroundingKey("ACTIONS_GROUNDING", 7, []byte("body"))
	if _, found, err := s.Grounding(key); found || err != nil {
		t.Fatalf("empty store: found=%v err=%v", found, err)
	}
	want := kv.Grounding{Referent: "svc:payments-prod", ObservationRef: "catalog:9", AtMs: 5}
	b := s.NewBatch()
	b.PutGrounding(key, want)
	if err := b.Commit(Sync); err != nil {
		t.Fatal(err)
	}
	got, found, err := s.Grounding(key)
	if !found || err != nil || got != want {
		t.Fatalf("got %+v %v %v", got, found, err)
	}
	// Another sequence, stream or body is another input.
	for _, other := range [][]byte{
		kv.GroundingKey("ACTIONS_GROUNDING", 8, []byte("body")),
		kv.GroundingKey("OTHER_GROUNDING", 7, []byte("body")),
		kv.GroundingKey("ACTIONS_GROUNDING", 7, []byte("body2")),
	} {
		if bytes.Equal(other, key) {
			t.Fatal("key collision")
		}
		if _, found, _ := s.Grounding(other); found {
			t.Fatal("checkpoint found under another input's key")
		}
	}
	if k := groundingKey(key); k[0] != prefixGrounding || len(k) != 33 {
		t.Errorf("key layout %x", k)
	}
}
