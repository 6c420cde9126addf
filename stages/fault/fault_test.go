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

func TestParse(t *testing.T) {
	for _, c := range []struct {
		v     string
		name  string
		after int64
		pause bool
	}{
		{"dispatch.after_inflight", "dispatch.after_inflight", 1, false},
		{"runner.after_publish#4", "runner.after_publish", 4, false},
		{"dispatch.after_inflight@pause", "dispatch.after_inflight", 1, true},
		{"dispatch.before_send#3@pause", "dispatch.before_send", 3, true},
		{"dispatch.before_send#0", "dispatch.before_send", 1, false},
	} {
		if name, after, pause := parse(c.v); name != c.name || after != c.after || pause != c.pause {
			t.Errorf("parse(%q) = %q, %d, %v", c.v, name, after, pause)
		}
	}
}
