// Package version reports what build of Portcullis is running, from the
// build information the Go toolchain embeds (debug.ReadBuildInfo): the
// main module's version and the VCS revision and commit time.
//
// It imports nothing of Portcullis.
package version

import (
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
)

// Placeholders for what a build does not record.
const (
	// Devel is the version of a build without a module version (go run,
	// go test, a build outside a tagged checkout without VCS stamping).
	Devel = "devel"
	// Unknown is the revision and time of a build without VCS information.
	Unknown = "unknown"
)

// Info describes a build.
type Info struct {
	// Version is the main module's version ("v1.2.3", a pseudo-version),
	// or Devel.
	Version string `json:"version"`
	// Revision is the VCS commit, or Unknown.
	Revision string `json:"revision"`
	// Time is the commit time (RFC 3339), or Unknown.
	Time string `json:"time"`
	// Modified is true when the working tree had uncommitted changes.
	Modified bool `json:"modified"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"go_version"`
}

// Get reads the running binary's build information.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: Devel, Revision: Unknown, Time: Unknown, GoVersion: runtime.Version()}
	}
	return From(bi)
}

// From reads a build's information (Get, and tests).
func From(bi *debug.BuildInfo) Info {
	in := Info{Version: Devel, Revision: Unknown, Time: Unknown, GoVersion: bi.GoVersion}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		in.Version = v
	}
	if in.GoVersion == "" {
		in.GoVersion = runtime.Version()
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if s.Value != "" {
				in.Revision = s.Value
			}
		case "vcs.time":
			if s.Value != "" {
				in.Time = s.Value
			}
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// semVer is the SemVer 2.0 grammar (the one nats.go/micro checks).
var semVer = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// SemVer is the version as SemVer without the leading "v" ("1.2.3",
// "0.0.0-20250101120000-abcdef123456+dirty"); a build without a module
// version, or one whose version is not SemVer, is "0.0.0-devel".
func (in Info) SemVer() string {
	v := strings.TrimPrefix(in.Version, "v")
	if in.Version == Devel || !semVer.MatchString(v) {
		return "0.0.0-" + Devel
	}
	return v
}
