// Package fault provides named fault points for crash tests.
//
// A point is a call to Hit("name") on a path where a crash matters (between
// the in-flight write and the provider call, say). Normally it does nothing.
// In a binary built with the build tag `crashtest` (testenv builds its
// `processor` that way; production builds never are), a process started
// with PORTCULLIS_FAULT=name (or name#N, to crash on the N-th hit) kills
// itself with SIGKILL there, so that a test can restart it and check what
// survived. With PORTCULLIS_FAULT=name@pause (or name#N@pause) it stops
// itself with SIGSTOP there instead, once, after writing PauseLog and the
// point's name to standard error: frozen as a long GC pause, a stalled VM
// or a partition would freeze it, until the test sends SIGCONT and it
// carries on where it stopped. Tests inside one process can arm a function
// instead with Set.
//
// It imports nothing of Portcullis: every layer may mark a point. It sits
// beside the stages, public, because the runner and the stages mark points
// and a public package imports nothing of internal/; it is not a stage
// (internal/rules: rules.Shared).
package fault

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Env is the environment variable that arms a fault point.
const Env = "PORTCULLIS_FAULT"

// Fault points. Each names the moment just before which the process dies.
const (
	AdmissionAfterRecord     = "admission.after_record"     // delivery recorded, hand-off not yet published
	RunnerBeforeOutcome      = "runner.before_outcome"      // outcomes decided, not yet published (a publish delayed or retried)
	RunnerAfterPublish       = "runner.after_publish"       // outputs published, input not yet acked
	DispatchBeforeInFlight   = "dispatch.before_inflight"   // nothing written yet
	DispatchAfterInFlight    = "dispatch.after_inflight"    // in-flight synced, provider not yet called
	DispatchBeforeSend       = "dispatch.before_send"       // request built and its lease checked, not yet sent
	DispatchAfterReply       = "dispatch.after_reply"       // provider answered, receipt not yet written
	DispatchAfterReceipt     = "dispatch.after_receipt"     // receipt synced, outcome not yet published
	DispatchAfterOutcome     = "dispatch.after_outcome"     // outcome published, input not yet acked
	ReconcileAfterCheckpoint = "reconcile.after_checkpoint" // attempt recorded, provider not yet queried
	ReconcileAfterReply      = "reconcile.after_reply"      // provider answered, result not yet written
)

// PauseLog starts the line a process writes to standard error just before
// it stops itself at a point armed with "@pause".
const PauseLog = "fault: pausing (SIGSTOP) at "

// pauseAction is the suffix that makes a point pause instead of crash.
const pauseAction = "@pause"

var (
	// crash and pause are set only in crashtest builds (crash.go); nil,
	// the environment variable arms nothing.
	crash func()
	pause func(name string)

	envOnce  sync.Once
	envName  string
	envAfter int64
	envPause bool
	hits     atomic.Int64

	mu   sync.RWMutex
	hook func(name string)
)

func loadEnv() {
	if crash == nil {
		return // not a crashtest build: the environment arms nothing
	}
	if v := os.Getenv(Env); v != "" {
		envName, envAfter, envPause = parse(v)
	}
}

// parse reads name[#N][@pause]: the point, the hit it acts on (N ≥ 1,
// default 1), and whether it pauses rather than crashes.
func parse(v string) (name string, after int64, pause bool) {
	v, pause = strings.CutSuffix(v, pauseAction)
	name, n, found := strings.Cut(v, "#")
	after = 1
	if found {
		if k, err := strconv.ParseInt(n, 10, 64); err == nil && k > 0 {
			after = k
		}
	}
	return name, after, pause
}

// Hit marks a fault point. It returns normally unless the point is armed.
func Hit(name string) {
	mu.RLock()
	h := hook
	mu.RUnlock()
	if h != nil {
		h(name)
	}
	envOnce.Do(loadEnv)
	if envName != name {
		return
	}
	n := hits.Add(1)
	switch {
	case envPause && n == envAfter:
		pause(name) // once: after SIGCONT the process goes on
	case !envPause && n >= envAfter:
		crash()
	}
}

// Set installs fn to run at every Hit, for in-process tests; nil removes it.
// It returns a function that restores the previous hook.
func Set(fn func(name string)) (restore func()) {
	mu.Lock()
	prev := hook
	hook = fn
	mu.Unlock()
	return func() {
		mu.Lock()
		hook = prev
		mu.Unlock()
	}
}
