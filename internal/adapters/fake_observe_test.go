package adapters_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/adapters"
)

// Observe sees every request the fake answers, and whether the provider
// acted: a dispatch answered confirmed or left unknown acted, one answered
// rejected or failed_before_dispatch did not, one past its not_after_ms
// was refused late; a reconcile carries its attempt id.
func TestFakeObserve(t *testing.T) {
	f := adapters.NewFake("inventory", adapters.FakeScript{Dispatch: []string{"confirmed", "indeterminate", "rejected", "failed_before_dispatch"}})
	var mu sync.Mutex
	var seen []adapters.FakeRequest
	f.Observe(func(r adapters.FakeRequest) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r)
	})
	req := dispatchReq("inventory", "observed")
	for range 4 {
		if _, err := f.Dispatch(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	f.SetClock(func() time.Time { return time.UnixMilli(req.NotAfterMs + 1) })
	if _, err := f.Dispatch(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reconcile(t.Context(), reconcileReq("observed", "att-1")); err != nil {
		t.Fatal(err)
	}
	f.Observe(nil)
	if _, err := f.Reconcile(t.Context(), reconcileReq("observed", "att-2")); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range seen {
		if r.Key != req.IdempotencyKey || r.At.IsZero() {
			t.Errorf("request %+v", r)
		}
		got = append(got, r.Method+map[bool]string{true: "/effect"}[r.Effect]+map[bool]string{true: "/late"}[r.Late]+r.AttemptID)
	}
	want := []string{"dispatch/effect", "dispatch/effect", "dispatch", "dispatch", "dispatch/late", "reconcileatt-1"}
	if !slices.Equal(got, want) {
		t.Errorf("observed %v, want %v", got, want)
	}
}
