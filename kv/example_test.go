package kv_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/pebble"
	"github.com/portcullis/portcullis/schema"
)

// A stage reaches its state through a kv interface; here the intent
// journal, on the Pebble store one processor keeps on disk. Under the
// fingerprint's lock: load, decide, commit — the commit is synced before
// the provider is called.
func ExampleJournal() {
	dir, err := os.MkdirTemp("", "kv-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	store, err := pebble.Open(dir, pebble.Options{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	var journal kv.Journal = pebble.NewJournal(store)

	fp := "sha256:" + strings.Repeat("ab", 32)
	unlock := journal.Lock(fp)
	_, found, err := journal.Load(fp)
	fmt.Println("found:", found, err)

	rec := kv.NewIntent(kv.Identity{
		Fingerprint: fp, IdempotencyKey: kv.Hex(fp),
		Target: schema.Target{Provider: "demo", Capability: "inventory.adjust", Operation: "adjust_stock", Environment: "test", Referent: "sku-1001"},
	}, "fake", 1000)
	rec.State, rec.DispatchAttempts = kv.StateInFlight, 1
	fmt.Println("commit:", journal.Commit(fp, kv.IntentWrites{Record: &rec}))
	unlock()

	got, found, err := journal.Load(fp)
	fmt.Println("found:", found, err)
	fmt.Println(got.State, got.Provider, got.Referent, got.DispatchAttempts)
	// Output:
	// found: false <nil>
	// commit: <nil>
	// found: true <nil>
	// in_flight demo sku-1001 1
}
