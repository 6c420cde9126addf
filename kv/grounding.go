package kv

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/portcullis/portcullis/schema"
)

// Grounding is the grounding stage's checkpoint of a decision that asked a
// candidate source. A source may answer differently when asked again, so a
// redelivered input (a lost ack, a crash after publishing) reuses the
// recorded decision instead of asking again: one input never yields both a
// hand-off to authorization and a failure outcome. It holds a closed code or
// a referent and observation reference, never candidates or attributes.
type Grounding struct {
	// Code is the grounding incident's code; "" when grounded.
	Code           schema.Code `json:"code,omitempty"`
	Referent       string      `json:"referent,omitempty"`
	ObservationRef string      `json:"observation_ref,omitempty"`
	AtMs           int64       `json:"at_ms"`
}

// GroundingKey identifies one input message: its stream, sequence and a
// hash of its body (so that a recreated stream reusing sequences never
// matches an old checkpoint).
func GroundingKey(stream string, seq uint64, body []byte) []byte {
	h := sha256.New()
	h.Write([]byte("grounding\x00"))
	h.Write([]byte(stream))
	h.Write([]byte{0})
	h.Write(binary.BigEndian.AppendUint64(nil, seq))
	b := sha256.Sum256(body)
	h.Write(b[:])
	return h.Sum([]byte{prefixGrounding})
}

// Grounding returns the checkpoint at key.
func (s *Store) Grounding(key []byte) (Grounding, bool, error) {
	var g Grounding
	found, err := s.get(key, &g)
	return g, found, err
}

// PutGrounding records a checkpoint.
func (b *Batch) PutGrounding(key []byte, g Grounding) {
	b.set(key, g)
	if len(key) > 1 {
		b.file(ClassGrounding, g.AtMs, key[1:])
	}
}
