//go:build !crashtest

package fault

import "testing"

// A production build ignores PORTCULLIS_FAULT: an environment variable
// must never be able to kill a processor.
func TestEnvironmentArmsNothingInProductionBuilds(t *testing.T) {
	t.Setenv(Env, DispatchAfterInFlight)
	Hit(DispatchAfterInFlight) // returns: no crashtest tag
	var got []string
	restore := Set(func(name string) { got = append(got, name) })
	defer restore()
	Hit(DispatchAfterReply)
	if len(got) != 1 || got[0] != DispatchAfterReply {
		t.Errorf("hook saw %v", got)
	}
}
