package bench

import (
	"runtime/metrics"
	"time"
)

// GoMemory is the Go runtime's own view of its memory at its peak during a
// phase (sampled every 100ms), to tell apart what the peak RSS holds: Go
// heap objects (live and not yet swept) against everything the runtime
// mapped (heap with its free and unreturned pages, stacks, metadata).
type GoMemory struct {
	HeapObjects uint64 // peak of /memory/classes/heap/objects:bytes
	Total       uint64 // peak of /memory/classes/total:bytes
}

// sampleMemory samples until stop is called, which returns the peaks.
// onPeak, when set, is called (at most every 5s) when the heap's objects
// reach a new peak: a heap profile written then shows what holds it.
func sampleMemory(onPeak func()) (stop func() GoMemory) {
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/total:bytes"}}
	quit, done := make(chan struct{}), make(chan GoMemory)
	go func() {
		var peak GoMemory
		var profiled time.Time
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(samples)
			h, t := samples[0].Value.Uint64(), samples[1].Value.Uint64()
			if h > peak.HeapObjects {
				peak.HeapObjects = h
				if onPeak != nil && time.Since(profiled) > 5*time.Second {
					onPeak()
					profiled = time.Now()
				}
			}
			peak.Total = max(peak.Total, t)
			select {
			case <-tick.C:
			case <-quit:
				done <- peak
				return
			}
		}
	}()
	return func() GoMemory { close(quit); return <-done }
}
