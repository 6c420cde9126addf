package engine

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/portcullis/portcullis/internal/config"
)

func TestGuardedLimit(t *testing.T) {
	const base = 384 << 20
	for _, c := range []struct {
		live uint64
		want int64
	}{
		{0, base},
		{200 << 20, base},
		{base * 4 / 5, base},         // exactly the headroom
		{base*4/5 + 1, base * 9 / 8}, // just over: the next eighth
		{400 << 20, 528 << 20},       // 500 MiB wanted, in steps of 48 MiB
		{2 << 30, 2592 << 20},        // a big live heap: 2,560 MiB wanted, rounded up
		{math.MaxUint32, 5136 << 20}, // 5 GiB wanted, rounded up
	} {
		if got := guardedLimit(base, c.live); got != c.want {
			t.Errorf("guardedLimit(live %d MiB) = %d MiB, want %d MiB", c.live>>20, got>>20, c.want>>20)
		}
		if got := guardedLimit(base, c.live); float64(got) < float64(c.live)*memoryHeadroom {
			t.Errorf("guardedLimit(live %d) = %d: less than the headroom", c.live, got)
		}
	}
}

func TestLimitMemory(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	embedded := config.Dev(t.TempDir())
	external := config.Dev(t.TempDir())
	external.NATS.Embedded, external.NATS.URL = false, "nats://127.0.0.1:4222"

	restore := LimitMemory(embedded)
	if got := debug.SetMemoryLimit(-1); got != EmbeddedMemoryLimit {
		t.Errorf("embedded: limit %d, want %d", got, EmbeddedMemoryLimit)
	}
	restore()
	restore() // idempotent
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("after restore: limit %d, want %d as before", got, before)
	}

	LimitMemory(external)()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("external server: limit %d, want %d untouched", got, before)
	}
	t.Setenv("GOMEMLIMIT", "1GiB")
	restore = LimitMemory(embedded)
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("GOMEMLIMIT set: limit %d, want %d untouched", got, before)
	}
	restore()
}
