package pebble

import (
	"github.com/portcullis/portcullis/kv"
)

// groundingKey is the Pebble key of a checkpoint (kv.GroundingKey).
func groundingKey(key []byte) []byte { return append([]byte{prefixGrounding}, key...) }

// Grounding returns the checkpoint at key (kv.GroundingKey).
func (s *Store) Grounding(key []byte) (kv.Grounding, bool, error) {
	var g kv.Grounding
	found, err := s.get(groundingKey(key), &g)
	return g, found, err
}

var _ kv.Groundings = (*Store)(nil)

// PutGrounding records a checkpoint in a synced batch of its own.
func (s *Store) PutGrounding(key []byte, g kv.Grounding) error {
	b := s.NewBatch()
	b.PutGrounding(key, g)
	return b.Commit(Sync)
}

// PutGrounding records a checkpoint.
func (b *Batch) PutGrounding(key []byte, g kv.Grounding) {
	b.set(groundingKey(key), g)
	if len(key) > 0 {
		b.file(ClassGrounding, g.AtMs, key)
	}
}
