package engine

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/portcullis/portcullis/internal/config"
)

// EmbeddedMemoryLimit is the Go soft memory limit (runtime/debug
// SetMemoryLimit) of a process that runs the embedded nats-server beside
// the processor, unless GOMEMLIMIT says otherwise.
//
// Why: most of such a process's heap under load is the server's file-store
// block caches (a 4–8 MiB buffer per stream block being written or read,
// held weakly once flushed) and its sync.Pool of them, which only a
// collection frees. With the default GOGC the heap grows to twice what is
// live before one runs: draining 100,000 queued proposals peaked at about
// 700 MiB of heap objects for about 340 MiB live (BENCHMARKS.md). The limit
// makes the collector run before the heap passes it instead; below it,
// nothing changes.
const EmbeddedMemoryLimit = 384 << 20

// memoryHeadroom is how far above the live heap limitGuard keeps the
// limit: the live heap times 5/4. A soft limit below what is live makes
// the collector run without pause (up to half the CPU, Go's cap); a
// deployment whose live heap outgrows EmbeddedMemoryLimit gets a limit
// that grows with it, and so collections at most about four times as
// often as with GOGC=100, never continuously.
const memoryHeadroom = 5.0 / 4

// memoryGuardEvery is how often limitGuard reads the live heap.
const memoryGuardEvery = 2 * time.Second

// LimitMemory sets the process's soft memory limit for a processor that
// runs the embedded server (EmbeddedMemoryLimit), unless c uses an external
// server or the GOMEMLIMIT environment variable sets one (which then rules
// alone). It is the process's owner's call, not the engine's: the command
// makes it before engine.Start; tests that start several engines in one
// process do not. restore stops the guard and puts back the limit before.
func LimitMemory(c *config.Config) (restore func()) {
	if c == nil || !c.NATS.Embedded || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	before := debug.SetMemoryLimit(EmbeddedMemoryLimit)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { limitGuard(EmbeddedMemoryLimit, stop) })
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			wg.Wait()
			debug.SetMemoryLimit(before)
		})
	}
}

// limitGuard keeps the soft limit at least memoryHeadroom above the live
// heap, and at base when the live heap leaves room for it, until stop.
func limitGuard(base int64, stop <-chan struct{}) {
	t := time.NewTicker(memoryGuardEvery)
	defer t.Stop()
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	current := base
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return // the runtime no longer reports it: leave the limit as it is
		}
		want := guardedLimit(base, sample[0].Value.Uint64())
		if want != current {
			debug.SetMemoryLimit(want)
			current = want
		}
	}
}

// guardedLimit is the limit for a live heap of live bytes: base, or
// memoryHeadroom above live when that is higher, changed in steps of at
// least an eighth so that a heap hovering near the threshold does not move
// it at every reading.
func guardedLimit(base int64, live uint64) int64 {
	want := int64(float64(live) * memoryHeadroom)
	if want <= base {
		return base
	}
	const step = 8
	// Round up to the next eighth of base above want.
	unit := base / step
	return (want + unit - 1) / unit * unit
}
