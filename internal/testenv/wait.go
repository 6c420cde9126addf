package testenv

import (
	"testing"
	"time"
)

// WaitFor polls cond until it holds and fails the test after WaitTimeout,
// saying what it waited for. It is for conditions outside the pipeline's
// streams — a gauge, a log line, an error a client was told about; wait
// for outcomes and events with the Recorder, and call Env.Quiesce before
// asserting that something did not happen.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	WaitForWithin(t, WaitTimeout, what, cond)
}

// WaitForWithin is WaitFor with its own bound, for what takes longer than
// WaitTimeout by design (a soak's backlog, a binary's first start).
func WaitForWithin(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(timeout, cond) {
		t.Fatalf("testenv: timed out after %s waiting for %s", timeout, what)
	}
}

// Poll polls cond until it holds or timeout passes, and reports whether it
// held: for a test that reports a condition never met itself (and goes on
// to the next one) instead of failing at once.
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return cond()
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
