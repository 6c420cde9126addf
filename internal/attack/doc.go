// Package attack holds adversarial regression tests and nothing else: each
// test runs a real processor (package testenv: an embedded nats-server with
// JetStream and a Pebble store on disk) and attacks it the way a hostile
// second tenant, or a hostile publisher on a host's subjects, would —
// squatting proposal ids, replaying and re-signing messages, naming another
// tenant's security domain, weaponizing grants and declines, flooding junk,
// nesting JSON deeply and planting secrets — then asserts the exact
// outcome kinds, incident codes, subjects and provider dispatch counts that
// the contract (PROTOCOL.md §2, §2.7, §3) requires.
//
// Every test names the finding it guards (measured against an older
// processor); the fixes live in the production packages, and these tests
// keep them fixed. Absence is asserted only after a positive sync point:
// every stage's consumer has nothing pending and nothing unacknowledged,
// and the outcomes and incidents streams (not only what a subscriber
// happened to see) are read back.
//
// It imports what a test needs; no production package imports it.
package attack
