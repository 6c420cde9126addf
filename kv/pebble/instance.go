package pebble

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

var instanceKey = append([]byte{prefixMeta}, "instance_id"...)

// InstanceID returns the store's processor instance id ("p_" and 16 hex
// digits): random, created and synced at the first call, then the same for
// as long as the store directory lives. A processor names itself with it in
// the records it shares with other processors (the writer of an in-flight
// dispatch), so that after a restart it recognizes its own records, and
// after losing its store directory it does not.
func (s *Store) InstanceID() (string, error) {
	s.idMu.Lock()
	defer s.idMu.Unlock()
	var id string
	found, err := s.get(instanceKey, &id)
	if err != nil {
		return "", fmt.Errorf("kv: instance id: %w", err)
	}
	if found && id != "" {
		return id, nil
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("kv: instance id: %w", err)
	}
	id = "p_" + hex.EncodeToString(b[:])
	batch := s.NewBatch()
	batch.set(instanceKey, id)
	if err := batch.Commit(Sync); err != nil {
		return "", fmt.Errorf("kv: instance id: %w", err)
	}
	return id, nil
}
