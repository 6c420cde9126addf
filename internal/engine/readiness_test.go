package engine

import (
	"errors"
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
		name                           string
		stopping, connected, storeOpen bool
		storeErr                       error
		stages                         []stageState
		ready                          bool
		reason                         string
	}{
		{"ready", false, true, true, nil, ok, true, ""},
		{"stopping", true, true, true, nil, ok, false, "processor: stopping"},
		{"nats", false, false, true, nil, ok, false, "nats: disconnected"},
		{"nats first", false, false, true, failed, notConsuming, false, "nats: disconnected"},
		{"store closed", false, true, false, nil, ok, false, "store: not open"},
		{"store failed", false, true, true, failed, ok, false, "store: failed"},
		{"starting", false, true, true, nil, nil, false, "stages: starting"},
		{"not consuming", false, true, true, nil, notConsuming, false, "stage dispatch: not consuming"},
		{"consumer unavailable", false, true, true, nil, unreachable, false, "stage admission: consumer unavailable"},
		{"not consuming before unavailable", false, true, true, nil, []stageState{unreachable[0], notConsuming[1]}, false, "stage dispatch: not consuming"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ready, reason := readiness(tc.stopping, tc.connected, tc.storeOpen, tc.storeErr, tc.stages)
			if ready != tc.ready || reason != tc.reason {
				t.Errorf("readiness = %v %q, want %v %q", ready, reason, tc.ready, tc.reason)
			}
		})
	}
}
