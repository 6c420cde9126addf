package kvtest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv"
)

// OpenTimers opens fresh timers and returns them with subject, the
// subject a timer of id may fire on (a stage's timer subject, for
// backends that check), and fired, the Data of every timer published so
// far in the order published — by the backend's own firing: a scheduler
// over kv/pebble's timer queue (kv.FireDue), the server's message
// schedules on JetStream.
type OpenTimers func(t *testing.T) (ts kv.Timers, subject func(id string) string, fired func() []string)

// RunTimers is the conformance suite every kv.Timers backend passes: a
// timer fires once, not before it is due (at once when it is past), and
// arming it again (same ID and MsgID) replaces it. Its times are real:
// JetStream's schedules fire on the server's clock.
func RunTimers(t *testing.T, open OpenTimers) {
	ctx := context.Background()
	arm := func(t *testing.T, ts kv.Timers, subject func(string) string, id, msgID, data string, due time.Time) {
		t.Helper()
		tm := kv.Timer{ID: id, DueMs: due.UnixMilli(), Subject: subject(id), Data: []byte(data), MsgID: msgID}
		if err := ts.Arm(ctx, tm); err != nil {
			t.Fatalf("Arm(%s): %v", id, err)
		}
	}
	// waitFired waits until fired holds n timers, failing on any fired
	// before notBefore says it may be.
	waitFired := func(t *testing.T, fired func() []string, n int, notBefore map[string]time.Time) []string {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			got := fired()
			for _, d := range got {
				if at, ok := notBefore[d]; ok && time.Now().Before(at.Add(-10*time.Millisecond)) {
					t.Fatalf("%s fired %s before it was due", d, time.Until(at))
				}
			}
			if len(got) >= n {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("fired %q, want %d timers", got, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	t.Run("fires when due", func(t *testing.T) {
		ts, subject, fired := open(t)
		now := time.Now()
		later := now.Add(700 * time.Millisecond)
		arm(t, ts, subject, "later", "later/1", "later", later)
		arm(t, ts, subject, "past", "past/1", "past", now.Add(-time.Second))
		got := waitFired(t, fired, 2, map[string]time.Time{"later": later})
		if !slices.Equal(got, []string{"past", "later"}) {
			t.Fatalf("fired %q, want the past timer at once, then the later one", got)
		}
		// Each fires once.
		time.Sleep(500 * time.Millisecond)
		if got := fired(); len(got) != 2 {
			t.Fatalf("fired %q: a timer fired twice", got)
		}
	})

	t.Run("armed again, replaced", func(t *testing.T) {
		ts, subject, fired := open(t)
		now := time.Now()
		second := now.Add(900 * time.Millisecond)
		arm(t, ts, subject, "poll", "poll/1", "first", now.Add(300*time.Millisecond))
		arm(t, ts, subject, "poll", "poll/1", "second", second)
		got := waitFired(t, fired, 1, map[string]time.Time{"second": second, "first": second})
		// Until well after the second due time: a second message would be
		// the replaced timer firing too.
		time.Sleep(time.Until(second.Add(700 * time.Millisecond)))
		if got = fired(); strings.Join(got, " ") != "second" {
			t.Fatalf("fired %q, want the timer armed again only", got)
		}
	})
}
