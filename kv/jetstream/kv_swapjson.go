package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/kv"
)

// CommitID returns a fresh random id for a write to carry, by which
// SwapJSON recognises the write when it reads the key back.
func CommitID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// SwapJSON is Swap of v encoded as deterministic JSON: a value read back
// is this write's when it decodes to a T whose commit id (commit) is v's.
func SwapJSON[T any](b Budget, kv jetstream.KeyValue, key string, v *T, rev uint64, settle time.Duration, commit func(*T) string) (uint64, error) {
	data, err := json.Marshal(v, json.Deterministic(true))
	if err != nil {
		return 0, fmt.Errorf("kv: encode: %w", err)
	}
	id := commit(v)
	return b.Swap(kv, key, data, rev, settle, func(value []byte) bool {
		var got T
		return json.Unmarshal(value, &got) == nil && commit(&got) == id
	})
}

// GetJSON reads key from the stream's leader, retrying as b does, and
// decodes its value into v. found is false (v untouched) when the key has
// no value; a value that does not decode is kv.ErrCorrupt.
func GetJSON(b Budget, store jetstream.KeyValue, key string, v any) (rev uint64, found bool, err error) {
	var e jetstream.KeyValueEntry
	err = b.Do(func(ctx context.Context) (err error) {
		e, err = store.Get(ctx, key)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if err := json.Unmarshal(e.Value(), v); err != nil {
		return 0, false, fmt.Errorf("%w: %w", kv.ErrCorrupt, err)
	}
	return e.Revision(), true, nil
}

// Import is what importing one record into a shared bucket found
// (`processor migrate` moving a single node's state into a cluster).
type Import int

// Import results.
const (
	// Created: the record was written now.
	Created Import = iota
	// Present: the key already holds this record, or a later version of
	// it (an earlier import's, advanced by the cluster since).
	Present
	// Conflict: the key holds another record. It is never overwritten.
	Conflict
)

// ImportJSON creates key with v unless it exists (Handle.Claim); an
// existing value is Present when same says it is v's record, else
// Conflict (one that does not decode too).
func ImportJSON[T any](h Handle, key string, v *T, same func(got *T) bool) (Import, error) {
	var got T
	_, won, err := h.Claim(key, v, &got)
	switch {
	case won:
		return Created, nil
	case errors.Is(err, kv.ErrCorrupt):
		return Conflict, nil
	case err != nil:
		return 0, fmt.Errorf("kv: import: %w", err)
	case same(&got):
		return Present, nil
	}
	return Conflict, nil
}
