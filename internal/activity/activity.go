// Package activity keeps the value-free activity snapshot of each intent in
// the JetStream KV bucket `<prefix>_activity`, keyed by the fingerprint's
// 64 hex digits.
package activity

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// ErrNotFound is returned by Get for a fingerprint without activity.
var ErrNotFound = errors.New("activity: not found")

// Key is the bucket key of a fingerprint ("sha256:<hex>" or bare hex).
func Key(fingerprint string) string { return schema.FingerprintKey(fingerprint) }

// Store reads and updates activity snapshots.
type Store struct {
	KV jetstream.KeyValue
	// Now stamps UpdatedAtMs.
	Now func() int64

	locks kv.KeyedMutex
}

// Get returns the snapshot of a fingerprint.
func (s *Store) Get(ctx context.Context, fingerprint string) (*schema.Activity, error) {
	e, err := s.KV.Get(ctx, Key(fingerprint))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("activity: get: %w", err)
	}
	var a schema.Activity
	if err := schema.Decode(e.Value(), &a); err != nil {
		return nil, fmt.Errorf("activity: decode: %w", err)
	}
	return &a, nil
}

// Update applies edit to the fingerprint's snapshot (a new one if none)
// and writes it with compare-and-set, retrying on a concurrent writer.
// Writers in this process are serialized per fingerprint; the CAS guards
// against other processors.
func (s *Store) Update(ctx context.Context, fingerprint string, edit func(a *schema.Activity)) error {
	key := Key(fingerprint)
	unlock := s.locks.Lock(key)
	defer unlock()
	for range 10 {
		var a schema.Activity
		var rev uint64
		e, err := s.KV.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			a = schema.Activity{Schema: schema.SchemaActivity, Fingerprint: fingerprint}
		case err != nil:
			return fmt.Errorf("activity: get: %w", err)
		default:
			if err := schema.Decode(e.Value(), &a); err != nil {
				return fmt.Errorf("activity: decode: %w", err)
			}
			rev = e.Revision()
		}
		edit(&a)
		if s.Now != nil {
			a.UpdatedAtMs = s.Now()
		}
		data, err := schema.Marshal(a)
		if err != nil {
			return fmt.Errorf("activity: encode: %w", err)
		}
		if rev == 0 {
			_, err = s.KV.Create(ctx, key, data)
		} else {
			_, err = s.KV.Update(ctx, key, data, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongSequence(err) {
			return fmt.Errorf("activity: write: %w", err)
		}
	}
	return errors.New("activity: too many concurrent updates")
}

// isWrongSequence matches JetStream's "wrong last sequence" (10071) and its
// clustered variant.
func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == 10164
	}
	return false
}
