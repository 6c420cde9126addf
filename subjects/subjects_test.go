package subjects_test

import (
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/subjects"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hostPattern is the host token's format (SPEC §1), which ValidHost's
// byte loop replaced.
var hostPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

var hostSamples = []string{"", "h1", "H-1_a", "a.b", "a b", "a*", "a>", "é", "\xff", strings.Repeat("h", 64), strings.Repeat("h", 65), "h\n"}

// TestValidHost: ValidHost accepts exactly what the format matches.
func TestValidHost(t *testing.T) {
	for _, h := range hostSamples {
		if got, want := subjects.ValidHost(h), hostPattern.MatchString(h); got != want {
			t.Errorf("%q: %v, want %v", h, got, want)
		}
	}
}

func FuzzValidHost(f *testing.F) {
	for _, h := range hostSamples {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, h string) {
		if got, want := subjects.ValidHost(h), hostPattern.MatchString(h); got != want {
			t.Fatalf("%q: %v, want %v", h, got, want)
		}
	})
}
