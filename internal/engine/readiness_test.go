package engine

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
)

// Readiness names the first thing that is not ready, in the order the
// processor depends on them, without any value.
func TestReadinessReasons(t *testing.T) {
	ok := []stageState{{name: "admission", consuming: true, reachable: true}, {name: "dispatch", consuming: true, reachable: true}}
	notConsuming := []stageState{{name: "admission", consuming: true, reachable: true}, {name: "dispatch", reachable: true}}
	unreachable := []stageState{{name: "admission", consuming: true}, {name: "dispatch", consuming: true, reachable: true}}
	failed := errors.New("kv: store failed: disk on fire at /secret/path")
	for _, tc := range []struct {
		name                                     string
		stopping, connected, natsFull, storeOpen bool
		storeErr                                 error
		lowDisk                                  string
		stages                                   []stageState
		full                                     []string
		ready                                    bool
		reason                                   string
	}{
		{"ready", false, true, false, true, nil, "", ok, nil, true, ""},
		{"stopping", true, true, false, true, nil, "", ok, nil, false, "processor: stopping"},
		{"nats", false, false, false, true, nil, "", ok, nil, false, "nats: disconnected"},
		{"nats first", false, false, false, true, failed, "", notConsuming, nil, false, "nats: disconnected"},
		{"store closed", false, true, false, false, nil, "", ok, nil, false, "store: not open"},
		{"store failed", false, true, false, true, failed, "", ok, nil, false, "store: failed"},
		// A full disk is named (the error's text is not: it may hold a path).
		{"store full", false, true, false, true, fmt.Errorf("kv: store failed: pebble: fatal commit error: write /secret/path: %w", syscall.ENOSPC), "", ok, nil, false, "store: failed: no space left on device"},
		{"embedded nats store full", false, true, true, true, nil, "", ok, nil, false, "nats: store full (no space left on device)"},
		{"disconnected before full", false, false, true, true, nil, "", ok, nil, false, "nats: disconnected"},
		// A disk below the reserve: nothing fails, the stages wait.
		{"disk nearly full", false, true, false, true, nil, "store.dir", ok, nil, false, "disk: store.dir nearly full"},
		{"store failed before disk", false, true, false, true, failed, "nats.store_dir", ok, nil, false, "store: failed"},
		{"disk before starting", false, true, false, true, nil, "nats.store_dir", nil, nil, false, "disk: nats.store_dir nearly full"},
		{"starting", false, true, false, true, nil, "", nil, nil, false, "stages: starting"},
		{"not consuming", false, true, false, true, nil, "", notConsuming, nil, false, "stage dispatch: not consuming"},
		{"consumer unavailable", false, true, false, true, nil, "", unreachable, nil, false, "stage admission: consumer unavailable"},
		{"not consuming before unavailable", false, true, false, true, nil, "", []stageState{unreachable[0], notConsuming[1]}, nil, false, "stage dispatch: not consuming"},
		// Back-pressure: a stage stream full, nothing lost, the pipeline waits.
		{"stage full", false, true, false, true, nil, "", ok, []string{"grounding"}, false, "stage grounding full"},
		{"unavailable before full", false, true, false, true, nil, "", unreachable, []string{"grounding"}, false, "stage admission: consumer unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ready, reason := readiness(tc.stopping, tc.connected, tc.natsFull, tc.storeOpen, tc.storeErr, tc.lowDisk, tc.stages, tc.full)
			if ready != tc.ready || reason != tc.reason {
				t.Errorf("readiness = %v %q, want %v %q", ready, reason, tc.ready, tc.reason)
			}
		})
	}
}
