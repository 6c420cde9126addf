package admin_test

import (
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// TestReplayRefusedAcrossClockJumps: the processor's clock jumps far
// forward and back again. Whatever happens meanwhile — requests refused as
// stale, a request accepted whose sender's clock had jumped too, the
// retention sweep running — a request accepted before the jump is never
// accepted again once the clock is back, on one node (the store's nonces)
// and on a cluster (the shared bucket).
func TestReplayRefusedAcrossClockJumps(t *testing.T) {
	t.Run("single node", func(t *testing.T) { testClockJumps(t) })
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("a three-server cluster")
		}
		testClockJumps(t, testenv.Clustered())
	})
}

func testClockJumps(t *testing.T, opts ...testenv.Option) {
	clock := stages.NewManualClock(time.Now())
	env := testenv.New(t, append(opts, testenv.WithClock(clock), testenv.WithConfig(func(c *config.Config) {
		c.Retention.SweepInterval = 10 * time.Millisecond // sweeps run while the clock is ahead
	}))...)
	list := subjects.AdminReconcileList
	t0 := clock.Now()
	ms := func(d time.Duration) int64 { return t0.Add(d).UnixMilli() }
	request := func(stamp int64) ([]byte, func() string) {
		body := listBody(stamp, newNonce(t))
		hdr := sign(t, env.Operator, body)
		return body, func() string { return ask(t, env, list, body, hdr) }
	}
	_, first := request(ms(0))
	if code := first(); code != "" {
		t.Fatalf("first request: %s", code)
	}
	_, second := request(ms(time.Second))
	if code := second(); code != "" {
		t.Fatalf("second request: %s", code)
	}

	// The processor's clock alone jumps an hour ahead: requests stamped by
	// the operators' right clocks are stale, and nothing is forgotten.
	clock.Set(t0.Add(time.Hour))
	if code := first(); code != admin.CodeStale {
		t.Fatalf("replay while the clock is ahead: %q", code)
	}
	_, right := request(ms(2 * time.Second))
	if code := right(); code != admin.CodeStale {
		t.Fatalf("a request while the clock is ahead: %q", code)
	}
	env.Quiesce(t)
	clock.Set(t0.Add(5 * time.Second))
	if code := first(); code != admin.CodeReplayed {
		t.Errorf("replay once the clock is back: %q", code)
	}

	// Ahead again, and this time an operator whose clock jumped too gets a
	// request accepted: the nonces of the first requests may be forgotten
	// now, and their replays are refused as too old.
	clock.Set(t0.Add(time.Hour))
	_, ahead := request(ms(time.Hour))
	if code := ahead(); code != "" {
		t.Fatalf("a request stamped with the clock ahead: %q", code)
	}
	_, more := request(ms(time.Hour + time.Second))
	if code := more(); code != "" {
		t.Fatalf("another one: %q", code)
	}
	env.Quiesce(t)
	clock.Set(t0.Add(5 * time.Second))
	for name, replay := range map[string]func() string{"first": first, "second": second} {
		if code := replay(); code != admin.CodeStale && code != admin.CodeReplayed {
			t.Errorf("replay of the %s request once the clock is back: %q", name, code)
		}
	}
	// The price: requests stamped more than the window before one
	// accepted are refused until the clocks pass it.
	_, now := request(ms(6 * time.Second))
	if code := now(); code != admin.CodeStale {
		t.Errorf("a request stamped long before one accepted: %q", code)
	}
	if code := ahead(); code != admin.CodeStale {
		t.Errorf("the request accepted ahead, replayed with the clock back: %q", code)
	}
}
