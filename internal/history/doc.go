// Package history records what the clients and providers of a test run
// see — proposals and grants published, every outcome, each request a
// provider received, operator resolutions and reads, each with its time —
// and checks the contract's invariants over the whole run (issue 26,
// item 1): at most one effect per idempotency key; one terminal answer per
// proposal, consistent with what the provider did; no outcome before its
// cause; each approval ended once; each reconcile attempt id used once;
// and the operator's receipt and activity reads linearizable against the
// receipts the outcomes announced (checked with porcupine, whose HTML
// visualisation is written on a failure).
//
// The crash and cluster tests record a Recorder's events as they run
// (ObserveFake for the provider, Propose/Grant around their publishes,
// ReadDuring for operator reads in the background, Resolve for a
// settlement) and end with CheckRun, which reads the outcomes stream
// (ReadOutcomes) and fails the test on any Violation. Every checker is
// shown failing on a planted history in check_test.go.
//
// Violations are value-free: they name proposal ids (chosen by the
// tests), shortened keys and closed codes, never a payload.
//
// It owns the tests' histories and their checkers. It imports the wire
// packages (schema, subjects), the fake provider and the operator client,
// and porcupine: never a stage, a store, the journal or the engine — it
// judges what clients see, not how the processor works; only tests import
// it.
package history
