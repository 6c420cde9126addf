//go:build !race

package stages_test

// raceEnabled: the tests run under the race detector.
const raceEnabled = false
