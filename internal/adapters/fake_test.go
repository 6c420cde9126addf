package adapters_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/schema"
)

func TestFakeScript(t *testing.T) {
	f := adapters.NewFake("inventory", adapters.FakeScript{
		Dispatch:  []string{"indeterminate", "rejected", "acknowledged"},
		Reconcile: []string{"indeterminate", "confirmed"},
	})
	req := dispatchReq("inventory", "script")
	short := req.IdempotencyKey[:16]
	for i, want := range []string{"indeterminate", "rejected", "acknowledged", "acknowledged", "acknowledged"} {
		r, err := f.Dispatch(t.Context(), req)
		if err != nil || r.Outcome != want {
			t.Fatalf("dispatch %d: %+v, %v; want %s", i, r, err, want)
		}
		if r.ProviderActionID != "fake:"+short || len(r.EvidenceRefs) != 1 || r.EvidenceRefs[0] != "fake:dispatch:"+short {
			t.Fatalf("dispatch %d: ids %+v", i, r)
		}
		if (want == "rejected") != (r.ErrorCode == "FAKE_REJECTED") {
			t.Fatalf("dispatch %d: error code %q", i, r.ErrorCode)
		}
	}
	for i, want := range []string{"indeterminate", "confirmed", "confirmed"} {
		r, err := f.Reconcile(t.Context(), reconcileReq("script", "att"))
		if err != nil || r.Outcome != want || r.EvidenceRefs[0] != "fake:reconcile:"+short {
			t.Fatalf("reconcile %d: %+v, %v; want %s", i, r, err, want)
		}
	}
	if f.Dispatches() != 5 || f.DispatchesFor(req.IdempotencyKey) != 5 || f.DeliveredFor(req.IdempotencyKey) != 5 {
		t.Fatalf("counts %d %d %d", f.Dispatches(), f.DispatchesFor(req.IdempotencyKey), f.DeliveredFor(req.IdempotencyKey))
	}
	if f.Reconciles() != 3 || f.ReconcilesFor(req.IdempotencyKey) != 3 || f.ReconcilesFor(key("other")) != 0 {
		t.Fatal("reconcile counts")
	}
	if f.Kind() != "fake" {
		t.Fatal(f.Kind())
	}
}

func TestFakeDefaultScript(t *testing.T) {
	f := adapters.NewFake("demo", adapters.FakeScript{})
	if r, err := f.Dispatch(t.Context(), dispatchReq("demo", "d")); err != nil || r.Outcome != "confirmed" {
		t.Fatalf("%+v %v", r, err)
	}
	if r, err := f.Reconcile(t.Context(), reconcileReq("d", "a")); err != nil || r.Outcome != "confirmed" {
		t.Fatalf("%+v %v", r, err)
	}
}

// TestFakeHooks: hooks replace the script, simulate transport failures
// (counted as delivered unless ErrNotInvoked), and their replies are
// validated like a real connector's.
func TestFakeHooks(t *testing.T) {
	f := adapters.NewFake("inventory", adapters.FakeScript{Dispatch: []string{"rejected"}})
	req := dispatchReq("inventory", "hooks")
	k := req.IdempotencyKey
	var seen schema.DispatchRequest
	steps := []struct {
		reply schema.AdapterReply
		err   error
		want  string
	}{
		{err: adapters.ErrNotInvoked, want: "not_invoked"},
		{err: adapters.ErrTimeout, want: "timeout"},
		{err: errors.New("connector crashed"), want: "unknown"},
		{reply: schema.AdapterReply{Outcome: "confirmed", EvidenceRefs: []string{"no colon"}}, want: "malformed"},
		{reply: schema.AdapterReply{Outcome: "acknowledged", ProviderActionID: "p-1"}, want: "ok"},
	}
	for i, s := range steps {
		f.OnDispatch(func(_ context.Context, r schema.DispatchRequest) (schema.AdapterReply, error) {
			seen = r
			return s.reply, s.err
		})
		r, err := f.Dispatch(t.Context(), req)
		if class(err) != s.want {
			t.Fatalf("step %d: %s (%v), want %s", i, class(err), err, s.want)
		}
		if s.want == "ok" && r.ProviderActionID != "p-1" {
			t.Fatalf("step %d: %+v", i, r)
		}
	}
	if seen.Referent != req.Referent {
		t.Fatal("hook did not see the request")
	}
	if f.DispatchesFor(k) != 5 || f.DeliveredFor(k) != 4 {
		t.Fatalf("dispatches %d delivered %d, want 5 and 4", f.DispatchesFor(k), f.DeliveredFor(k))
	}
	if d := f.Delivered(); len(d) != 1 || d[k] != 4 {
		t.Fatalf("Delivered %v", d)
	}
	f.OnDispatch(nil)
	if r, err := f.Dispatch(t.Context(), req); err != nil || r.Outcome != "rejected" {
		t.Fatalf("script not restored: %+v %v", r, err)
	}

	f.OnReconcile(func(context.Context, schema.ReconcileRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: "acknowledged"}, nil
	})
	if _, err := f.Reconcile(t.Context(), reconcileReq("hooks", "a")); class(err) != "malformed" {
		t.Fatalf("acknowledged reconcile: %s (%v)", class(err), err)
	}
}

func TestFakeContextDone(t *testing.T) {
	f := adapters.NewFake("inventory", adapters.FakeScript{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := f.Dispatch(ctx, dispatchReq("inventory", "x")); class(err) != "not_invoked" {
		t.Fatalf("%s (%v)", class(err), err)
	}
	if _, err := f.Reconcile(ctx, reconcileReq("x", "a")); class(err) != "not_invoked" {
		t.Fatalf("%s (%v)", class(err), err)
	}
	if f.Dispatches() != 0 || f.Reconciles() != 0 || len(f.Delivered()) != 0 {
		t.Fatal("counted calls that never reached the fake")
	}
}

// TestFakeConcurrent runs under -race: counts stay exact.
func TestFakeConcurrent(t *testing.T) {
	f := adapters.NewFake("inventory", adapters.FakeScript{Dispatch: []string{"confirmed", "rejected"}})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := dispatchReq("inventory", string(rune('a'+i%4)))
			for range 25 {
				if _, err := f.Dispatch(t.Context(), req); err != nil {
					t.Error(err)
				}
				if _, err := f.Reconcile(t.Context(), reconcileReq(string(rune('a'+i%4)), "x")); err != nil {
					t.Error(err)
				}
			}
			if i == 3 {
				f.OnDispatch(nil)
			}
		}()
	}
	wg.Wait()
	if f.Dispatches() != 400 || f.Reconciles() != 400 {
		t.Fatalf("%d %d", f.Dispatches(), f.Reconciles())
	}
	for _, s := range []string{"a", "b", "c", "d"} {
		if n := f.DeliveredFor(key(s)); n != 100 {
			t.Fatalf("key %s delivered %d", s, n)
		}
	}
}

// TestFakeServe: the fake as a NATS connector, driven through the nats
// adapter (as a processor in another process would).
func TestFakeServe(t *testing.T) {
	f := newNATSFixture(t, "", 500*time.Millisecond)
	fake := adapters.NewFake("inventory", adapters.FakeScript{Dispatch: []string{"acknowledged"}, Reconcile: []string{"confirmed"}})
	stop, err := fake.Serve(f.peer, f.subj)
	if err != nil {
		t.Fatal(err)
	}
	req := dispatchReq("inventory", "served")
	k := req.IdempotencyKey
	if r, err := f.adapter.Dispatch(t.Context(), req); err != nil || r.Outcome != "acknowledged" || r.ProviderActionID != "fake:"+k[:16] {
		t.Fatalf("dispatch: %+v %v", r, err)
	}
	if r, err := f.adapter.Reconcile(t.Context(), reconcileReq("served", "a1")); err != nil || r.Outcome != "confirmed" {
		t.Fatalf("reconcile: %+v %v", r, err)
	}

	fake.OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{}, adapters.ErrTimeout
	})
	if _, err := f.adapter.Dispatch(t.Context(), req); class(err) != "timeout" {
		t.Fatalf("silent hook: %s (%v)", class(err), err)
	}
	fake.OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: "done"}, nil
	})
	if _, err := f.adapter.Dispatch(t.Context(), req); class(err) != "malformed" {
		t.Fatalf("malformed hook: %s (%v)", class(err), err)
	}
	blocked := make(chan struct{})
	fake.OnDispatch(func(ctx context.Context, _ schema.DispatchRequest) (schema.AdapterReply, error) {
		close(blocked)
		<-ctx.Done() // released by stop
		return schema.AdapterReply{}, ctx.Err()
	})
	done := make(chan error, 1)
	go func() {
		_, err := f.adapter.Dispatch(t.Context(), req)
		done <- err
	}()
	<-blocked
	stop() // must not hang on the blocked hook
	if err := <-done; class(err) != "timeout" {
		t.Fatalf("dispatch during stop: %s (%v)", class(err), err)
	}
	if _, err := f.adapter.Dispatch(t.Context(), req); class(err) != "not_invoked" {
		t.Fatalf("after stop: %s (%v)", class(err), err)
	}
	if fake.DeliveredFor(k) != 4 || fake.DispatchesFor(k) != 4 || fake.Reconciles() != 1 {
		t.Fatalf("delivered %d dispatches %d reconciles %d", fake.DeliveredFor(k), fake.DispatchesFor(k), fake.Reconciles())
	}
}

// The fake answers its script in order (the last outcome repeats) and
// counts what each idempotency key delivered.
func ExampleFake() {
	fake := adapters.NewFake("demo", adapters.FakeScript{Dispatch: []string{"indeterminate", "confirmed"}})
	req := dispatchReq("demo", "example")
	for range 3 {
		r, err := fake.Dispatch(context.Background(), req)
		fmt.Println(r.Outcome, r.ProviderActionID, err)
	}
	fmt.Println("delivered:", fake.DeliveredFor(req.IdempotencyKey))
	// Output:
	// indeterminate fake:50d858e0985ecc7f <nil>
	// confirmed fake:50d858e0985ecc7f <nil>
	// confirmed fake:50d858e0985ecc7f <nil>
	// delivered: 3
}

// The fake, like a real connector, never acts on a dispatch that reaches
// it after its not_after_ms by its own clock, in process or over the wire:
// it answers schema.LateReply without calling its hook, and counts the
// request as late — neither dispatched nor delivered.
func TestFakeRefusesLate(t *testing.T) {
	f := newNATSFixture(t, "", 500*time.Millisecond)
	fake := adapters.NewFake("inventory", adapters.FakeScript{})
	var hooked atomic.Int32
	fake.OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
		hooked.Add(1)
		return schema.AdapterReply{Outcome: "confirmed"}, nil
	})
	stop, err := fake.Serve(f.peer, f.subj)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	req := dispatchReq("inventory", "late")
	k := req.IdempotencyKey
	fake.SetClock(func() time.Time { return time.UnixMilli(req.NotAfterMs + 1) }) // just past it
	for name, a := range map[string]adapters.Adapter{"in process": fake, "over the wire": f.adapter} {
		if r, err := a.Dispatch(t.Context(), req); err != nil || !r.IsLate() {
			t.Errorf("%s: %+v %v", name, r, err)
		}
	}
	fake.SetClock(func() time.Time { return time.UnixMilli(req.NotAfterMs) }) // its last moment
	if r, err := f.adapter.Dispatch(t.Context(), req); err != nil || r.Outcome != "confirmed" {
		t.Errorf("at not_after_ms: %+v %v", r, err)
	}
	if fake.LateFor(k) != 2 || fake.Late() != 2 || fake.DispatchesFor(k) != 1 || fake.DeliveredFor(k) != 1 || hooked.Load() != 1 {
		t.Errorf("late %d/%d, dispatched %d, delivered %d, hook %d", fake.LateFor(k), fake.Late(), fake.DispatchesFor(k), fake.DeliveredFor(k), hooked.Load())
	}
}
