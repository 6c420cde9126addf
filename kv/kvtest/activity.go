package kvtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// OpenActivity opens fresh activity and returns it with a function that
// opens one more instance over the same storage: another processor
// sharing it.
type OpenActivity func(t *testing.T) (a kv.Activity, another func() kv.Activity)

// activityFP is the fingerprint the suite's snapshots are of.
const activityFP = "sha256:5a6883578c195c2db4563345d2872d693c6dfabca09b1ae4918d1cd00103e446"

// RunActivity is the conformance suite every kv.Activity backend passes:
// a snapshot is created by its first update, and updates of one
// fingerprint — from one instance or several, interleaved or at once —
// are never lost.
func RunActivity(t *testing.T, open OpenActivity) {
	ctx := context.Background()
	addProposal := func(id string) func(a *schema.Activity) {
		return func(a *schema.Activity) { a.AddProposal(schema.ProposalRef{Host: "h", ProposalID: id}) }
	}
	proposals := func(t *testing.T, a kv.Activity) int {
		t.Helper()
		got, err := a.Get(ctx, activityFP)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if got.Fingerprint != activityFP || got.Schema != schema.SchemaActivity {
			t.Fatalf("snapshot of %q, schema %q", got.Fingerprint, got.Schema)
		}
		return len(got.Proposals)
	}

	t.Run("none, then created", func(t *testing.T) {
		a, _ := open(t)
		if got, err := a.Get(ctx, activityFP); !errors.Is(err, kv.ErrNoActivity) {
			t.Fatalf("Get of nothing = %+v, %v; want ErrNoActivity", got, err)
		}
		if err := a.Update(ctx, activityFP, addProposal("p1")); err != nil {
			t.Fatal(err)
		}
		if n := proposals(t, a); n != 1 {
			t.Fatalf("%d proposals, want 1", n)
		}
	})

	t.Run("interleaved instances", func(t *testing.T) {
		a, another := open(t)
		b := another()
		steps := []kv.Activity{a, a, b, a, b, b}
		for i, s := range steps {
			if err := s.Update(ctx, activityFP, addProposal(fmt.Sprintf("p%d", i))); err != nil {
				t.Fatal(err)
			}
		}
		if n := proposals(t, b); n != len(steps) {
			t.Fatalf("%d proposals, want %d: an update was lost", n, len(steps))
		}
	})

	t.Run("concurrent updates", func(t *testing.T) {
		a, another := open(t)
		instances := []kv.Activity{a, another()}
		const each = 8
		var wg sync.WaitGroup
		errs := make(chan error, 2*each)
		for i, s := range instances {
			for j := range each {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- s.Update(ctx, activityFP, addProposal(fmt.Sprintf("p%d-%d", i, j)))
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := proposals(t, a); n != len(instances)*each {
			t.Fatalf("%d proposals, want %d: an update was lost", n, len(instances)*each)
		}
	})

	t.Run("a dispatch section only with its result", func(t *testing.T) {
		a, _ := open(t)
		if err := a.Update(ctx, activityFP, func(s *schema.Activity) {
			s.Dispatch = &schema.ActivityDispatch{StartedAtMs: 1}
		}); err != nil {
			t.Fatal(err)
		}
		got, err := a.Get(ctx, activityFP)
		if err != nil {
			t.Fatal(err)
		}
		if got.Dispatch != nil {
			t.Fatalf("a dispatch section without its result was stored: %+v", got.Dispatch)
		}
	})
}
