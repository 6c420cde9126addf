package stages_test

import (
	"testing"

	"github.com/portcullis/portcullis/internal/bench"
)

// cpuPerOp reports, beside ns/op (wall time, which on a shared machine
// grows with everyone else's load), the CPU the process spent per
// operation, garbage collection included (bench.CPUTime, what `processor
// bench` reports): call it before the loop, and the function it returns
// after.
func cpuPerOp(b *testing.B) func() {
	start := bench.CPUTime()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(bench.CPUTime()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}
