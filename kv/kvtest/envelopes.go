package kvtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/kv"
)

// EnvelopeBudget is each host's budget, in bytes, of the envelopes
// RunEnvelopes checks are opened with.
const EnvelopeBudget = 64 << 10

// OpenEnvelopes opens fresh envelopes, every host's budget
// EnvelopeBudget, for the hosts "a" and "b", and returns them with a
// function that opens one more instance over the same storage: another
// processor sharing them.
type OpenEnvelopes func(t *testing.T) (e kv.Envelopes, another func() kv.Envelopes)

// RunEnvelopes is the conformance suite every kv.Envelopes backend
// passes: what is kept is read back (by every instance) until it is
// replaced or dropped, and each host's budget is its own — a host whose
// budget is spent is refused alone (kv.ErrBudget), a retry of a write
// already kept is no new write, and a drop makes room again.
func RunEnvelopes(t *testing.T, open OpenEnvelopes) {
	ctx := context.Background()
	get := func(t *testing.T, e kv.Envelopes, host, key string) ([]byte, error) {
		t.Helper()
		data, at, err := e.Get(ctx, host, key)
		if err == nil && at <= 0 {
			t.Fatalf("Get(%s, %s): stored at %d", host, key, at)
		}
		return data, err
	}

	t.Run("kept, replaced, dropped", func(t *testing.T) {
		e, another := open(t)
		if _, err := get(t, e, "a", "p1"); !errors.Is(err, kv.ErrNotKept) {
			t.Fatalf("Get of nothing: %v, want ErrNotKept", err)
		}
		if err := e.Keep(ctx, "a", "p1", []byte("one"), "p1/1"); err != nil {
			t.Fatal(err)
		}
		if err := e.Keep(ctx, "a", "p2", []byte("other"), "p2/1"); err != nil {
			t.Fatal(err)
		}
		if data, err := get(t, another(), "a", "p1"); err != nil || string(data) != "one" {
			t.Fatalf("another instance reads %q, %v", data, err)
		}
		if err := e.Keep(ctx, "a", "p1", []byte("two"), "p1/2"); err != nil {
			t.Fatal(err)
		}
		if data, err := get(t, e, "a", "p1"); err != nil || string(data) != "two" {
			t.Fatalf("replaced: %q, %v", data, err)
		}
		if _, err := get(t, e, "b", "p1"); !errors.Is(err, kv.ErrNotKept) {
			t.Fatalf("another host's key: %v, want ErrNotKept", err)
		}
		if err := another().Drop(ctx, "a", "p1"); err != nil {
			t.Fatal(err)
		}
		if _, err := get(t, e, "a", "p1"); !errors.Is(err, kv.ErrNotKept) {
			t.Fatalf("dropped: %v, want ErrNotKept", err)
		}
		if data, err := get(t, e, "a", "p2"); err != nil || string(data) != "other" {
			t.Fatalf("a key not dropped: %q, %v", data, err)
		}
		if err := e.Drop(ctx, "a", "never"); err != nil {
			t.Fatalf("dropping nothing: %v", err)
		}
	})

	t.Run("a budget per host", func(t *testing.T) {
		e, _ := open(t)
		big := bytes.Repeat([]byte("x"), 20<<10)
		kept := 0
		for i := range 10 {
			err := e.Keep(ctx, "b", fmt.Sprintf("k%d", i), big, fmt.Sprintf("id-%d", i))
			if errors.Is(err, kv.ErrBudget) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			kept++
		}
		if kept == 0 || kept*len(big) > EnvelopeBudget {
			t.Fatalf("host b kept %d envelopes of 20 KiB in a budget of %d KiB", kept, EnvelopeBudget>>10)
		}
		// b's budget is spent; a's is whole.
		if err := e.Keep(ctx, "a", "p1", big, "a-1"); err != nil {
			t.Fatalf("host a refused while b's budget is spent: %v", err)
		}
		if data, err := get(t, e, "a", "p1"); err != nil || !bytes.Equal(data, big) {
			t.Fatalf("a's envelope: %d bytes, %v", len(data), err)
		}
		// The same write again is one write (its message id), even when
		// the budget is spent.
		if err := e.Keep(ctx, "b", "k0", big, "id-0"); err != nil {
			t.Errorf("the same envelope kept again: %v", err)
		}
		if err := e.Drop(ctx, "b", "k0"); err != nil {
			t.Fatal(err)
		}
		if err := e.Keep(ctx, "b", "z", []byte(strings.Repeat("z", 10<<10)), "id-z"); err != nil {
			t.Errorf("b refused after a drop made room: %v", err)
		}
	})
}
