package pebble_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/kvtest"
	"github.com/portcullis/portcullis/kv/pebble"
)

// TestTimersConformance runs the timer table through kv.FireDue, as
// stages.Scheduler does, every few milliseconds of the real clock.
func TestTimersConformance(t *testing.T) {
	kvtest.RunTimers(t, func(t *testing.T) (kv.Timers, func(string) string, func() []string) {
		st, err := pebble.Open(t.TempDir(), pebble.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var fired []string
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ctx.Err() == nil {
				if err := kv.FireDue(st, time.Now().UnixMilli(), func(tm kv.Timer) error {
					mu.Lock()
					defer mu.Unlock()
					fired = append(fired, string(tm.Data))
					return nil
				}); err != nil {
					t.Errorf("FireDue: %v", err)
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
		t.Cleanup(func() {
			cancel()
			<-done
			if err := st.Close(); err != nil {
				t.Error(err)
			}
		})
		return st, func(id string) string { return "timers." + id }, func() []string {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(fired)
		}
	})
}

// TestOutcomeLogConformance runs the store's outcome records; a restart
// closes the store and opens its directory again.
func TestOutcomeLogConformance(t *testing.T) {
	kvtest.RunOutcomeLog(t, func(t *testing.T) (kv.OutcomeLog, func() kv.OutcomeLog) {
		dir := t.TempDir()
		open := func() *pebble.Store {
			st, err := pebble.Open(dir, pebble.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
		st := open()
		t.Cleanup(func() { st.Close() })
		return st, func() kv.OutcomeLog {
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			st = open()
			return st
		}
	})
}
