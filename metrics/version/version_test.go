package version

import (
	"runtime/debug"
	"testing"
)

func TestFrom(t *testing.T) {
	for _, c := range []struct {
		name   string
		bi     debug.BuildInfo
		want   Info
		semver string
	}{
		{"nothing recorded", debug.BuildInfo{GoVersion: "go1.26.0"},
			Info{Version: Devel, Revision: Unknown, Time: Unknown, GoVersion: "go1.26.0"}, "0.0.0-devel"},
		{"go run", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}},
			Info{Version: Devel, Revision: Unknown, Time: Unknown, GoVersion: "go1.26.0"}, "0.0.0-devel"},
		{"tagged", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.4.2"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2025-11-29T12:00:00Z"}, {Key: "vcs.modified", Value: "false"},
		}}, Info{Version: "v1.4.2", Revision: "0123abcd", Time: "2025-11-29T12:00:00Z", GoVersion: "go1.26.0"}, "1.4.2"},
		{"pseudo-version, dirty", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.0.0-20251129120000-0123456789ab+dirty"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "true"},
		}}, Info{Version: "v0.0.0-20251129120000-0123456789ab+dirty", Revision: "0123456789abcdef", Time: Unknown, Modified: true, GoVersion: "go1.26.0"}, "0.0.0-20251129120000-0123456789ab+dirty"},
		{"not semver", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1"}},
			Info{Version: "v1", Revision: Unknown, Time: Unknown, GoVersion: "go1.26.0"}, "0.0.0-devel"},
	} {
		got := From(&c.bi)
		if got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
		if s := got.SemVer(); s != c.semver {
			t.Errorf("%s: semver %q, want %q", c.name, s, c.semver)
		}
	}
	if g := Get(); g.Version == "" || g.Revision == "" || g.Time == "" || !semVer.MatchString(g.SemVer()) {
		t.Errorf("Get() = %+v", g)
	}
}
