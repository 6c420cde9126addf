package testenv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/schema/jsonschema"
)

// ValidateActivity validates every record in the activity bucket against
// its JSON Schema and fails the test on a violation. It returns how many
// records it checked. It is best effort about reaching them: a bucket that
// does not exist, or a server that is gone, checks nothing. Every Env runs
// it when its test ends, while the processor still runs.
func (e *Env) ValidateActivity(t testing.TB) int {
	t.Helper()
	v, err := jsonschema.Default()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if e.NC == nil || !e.NC.IsConnected() {
		return 0
	}
	kv, err := e.JS.KeyValue(ctx, e.Subjects.ActivityBucket())
	if err != nil {
		return 0
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return 0
	}
	defer func() { _ = keys.Stop() }()
	n := 0
	for k := range keys.Keys() {
		entry, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return n
		}
		if err := v.Validate(jsonschema.Activity, entry.Value()); err != nil {
			t.Errorf("activity record %s breaks its schema: %v\n%s", k, err, entry.Value())
		}
		n++
	}
	return n
}
