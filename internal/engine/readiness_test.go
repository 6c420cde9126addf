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
		full                           []string
		ready                          bool
		reason                         string
	}{
		{"ready", false, true, true, nil, ok, nil, true, ""},
		{"stopping", true, true, true, nil, ok, nil, false, "processor: stopping"},
		{"nats", false, false, true, nil, ok, nil, false, "nats: disconnected"},
		{"nats first", false, false, true, failed, notConsuming, nil, false, "nats: disconnected"},
		{"store closed", false, true, false, nil, ok, nil, false, "store: not open"},
		{"store failed", false, true, true, failed, ok, nil, false, "store: failed"},
		{"starting", false, true, true, nil, nil, nil, false, "stages: starting"},
		{"not consuming", false, true, true, nil, notConsuming, nil, false, "stage dispatch: not consuming"},
		{"consumer unavailable", false, true, true, nil, unreachable, nil, false, "stage admission: consumer unavailable"},
		{"not consuming before unavailable", false, true, true, nil, []stageState{unreachable[0], notConsuming[1]}, nil, false, "stage dispatch: not consuming"},
		// Back-pressure: a stage stream full, nothing lost, the pipeline waits.
		{"stage full", false, true, true, nil, ok, []string{"grounding"}, false, "stage grounding full"},
		{"unavailable before full", false, true, true, nil, unreachable, []string{"grounding"}, false, "stage admission: consumer unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ready, reason := readiness(tc.stopping, tc.connected, tc.storeOpen, tc.storeErr, tc.stages, tc.full)
			if ready != tc.ready || reason != tc.reason {
				t.Errorf("readiness = %v %q, want %v %q", ready, reason, tc.ready, tc.reason)
			}
		})
	}
}
