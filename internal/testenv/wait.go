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
	deadline := time.Now().Add(WaitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("testenv: timed out after %s waiting for %s", WaitTimeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
