package reconciliation_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
)

// A request lost in flight is found and sent again, not failed (issue 19,
// SPEC §6): the dispatch timed out without the provider ever receiving it
// (a server restarting under the request, a processor paused past its
// lease). Reconciliation asks; the provider says it never received it.
// Before the request's not_after_ms and the clock skew have passed that is
// not believed (Early); after, nothing can act on the request any more,
// so the intent is dispatched again — a new lease, a new receipt — and
// ends CONFIRMED, for every proposal of the intent. The provider acts
// once; every attempt id and receipt id is used once.
func TestLostRequestIsDispatchedAgain(t *testing.T) {
	env, clock := start(t)
	f := env.Fakes["demo"]
	var mu sync.Mutex
	acted, calls := 0, 0
	f.OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return schema.AdapterReply{}, adapters.ErrTimeout // lost on the way: nothing acted
		}
		acted++
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "inv:2"}, nil
	})
	f.OnReconcile(func(context.Context, schema.ReconcileRequest) (schema.AdapterReply, error) {
		mu.Lock()
		defer mu.Unlock()
		if acted == 0 {
			return schema.AdapterReply{Outcome: schema.ReplyFailedBeforeDispatch}, nil
		}
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed}, nil
	})
	// A second proposal of the same intent hears of it too.
	fp := twoLost(t, env, clock, "lost-1", "lost-2")

	// Polls before the fence: the provider's "never received" is not
	// believed yet, and nothing ends.
	clock.Advance(interval)
	env.Quiesce(t)
	if o := env.Recorder.Outcomes("lost-1"); o[len(o)-1].Terminal {
		t.Fatalf("ended before the request's not_after_ms and the clock skew passed: %+v", o[len(o)-1])
	}
	// Past the fence: found lost, dispatched again, confirmed.
	for range 12 {
		clock.Advance(10 * time.Second)
		env.Quiesce(t)
		if o := env.Recorder.Outcomes("lost-1"); o[len(o)-1].Kind == schema.KindConfirmed {
			break
		}
	}
	for _, id := range []string{"lost-1", "lost-2"} {
		outs := env.Recorder.Outcomes(id)
		if o := outs[len(outs)-1]; o.Kind != schema.KindConfirmed || o.Receipt == nil || o.Receipt.ProviderActionID != "inv:2" {
			t.Fatalf("%s: last outcome %+v, want CONFIRMED by the second dispatch", id, o)
		}
		for _, o := range outs {
			if o.Kind == schema.KindFailedBeforeDispatch {
				t.Errorf("%s was told FAILED_BEFORE_DISPATCH though its request was only lost", id)
			}
		}
	}
	mu.Lock()
	if calls != 2 || acted != 1 {
		t.Errorf("%d dispatch calls, %d acted; want the lost one and one that acted", calls, acted)
	}
	mu.Unlock()
	// (The fake counts the lost call as delivered — its hook played the
	// loss — so acted, not its counts, says what the provider did.)
	rs, err := env.Processor().Journal().Receipts(fp)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, r := range rs {
		if ids[r.ReceiptID] {
			t.Errorf("receipt id %s used twice", r.ReceiptID)
		}
		ids[r.ReceiptID] = true
	}
	if last := rs[len(rs)-1]; last.Status != schema.StatusConfirmed {
		t.Errorf("latest receipt %+v", last)
	}
	var rec kv.Intent
	if found, _ := env.Processor().Store().Intent(fp, &rec); !found || rec.Redispatches != 1 || rec.State != kv.StateDone {
		t.Errorf("record: %+v", rec)
	}
	if g := gauge(t, env); g != 0 {
		t.Errorf("actions_indeterminate_actions = %v", g)
	}
}

// An intent whose dispatch had an answer (the provider said indeterminate)
// is not sent again when a later reconcile says it never received it: the
// provider did receive the request then, and its finding stands.
func TestAnsweredRequestIsNotDispatchedAgain(t *testing.T) {
	env, clock := start(t)
	f := env.Fakes["demo"]
	f.OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: schema.ReplyIndeterminate}, nil
	})
	f.OnReconcile(func(context.Context, schema.ReconcileRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: schema.ReplyFailedBeforeDispatch}, nil
	})
	propose(t, env, clock, "answered-1")
	env.Recorder.Wait(t, "answered-1", last(schema.KindReconciliationRequired))
	for range 12 {
		clock.Advance(10 * time.Second)
		env.Quiesce(t)
		if o := env.Recorder.Outcomes("answered-1"); o[len(o)-1].Terminal {
			break
		}
	}
	outs := env.Recorder.Outcomes("answered-1")
	if o := outs[len(outs)-1]; o.Kind != schema.KindFailedBeforeDispatch {
		t.Errorf("last outcome %+v, want the provider's FAILED_BEFORE_DISPATCH", o)
	}
	if n := f.Dispatches(); n != 1 {
		t.Errorf("%d dispatches, want 1", n)
	}
}

// A poll nobody received (NATS no responders: the provider's connector is
// away, its server restarting) is not an answer: it never counts toward
// reconciliation.max_attempts, so an outage never exhausts reconciliation
// and ends the intent; the first answer after it does.
func TestUnansweredPollsNeverExhaust(t *testing.T) {
	env, clock := start(t)
	f := env.Fakes["demo"]
	timeoutDispatch(f)
	var mu sync.Mutex
	away := true
	f.OnReconcile(func(context.Context, schema.ReconcileRequest) (schema.AdapterReply, error) {
		mu.Lock()
		defer mu.Unlock()
		if away {
			return schema.AdapterReply{}, adapters.ErrNotInvoked
		}
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed}, nil
	})
	fp := propose(t, env, clock, "away-1")
	env.Recorder.Wait(t, "away-1", last(schema.KindReconciliationRequired))
	for n := 1; n <= 3*maxAttempts; n++ {
		clock.Advance(Backoff(n))
		o := env.Recorder.Wait(t, "away-1", nth(n+1))
		if o.Terminal || !sameStrings(incidents(o), "reconciliation/RECONCILE_UNAVAILABLE") {
			t.Fatalf("poll %d while the connector is away: %+v", n, o)
		}
	}
	mu.Lock()
	away = false
	mu.Unlock()
	clock.Advance(Backoff(3*maxAttempts + 1))
	if o := env.Recorder.Wait(t, "away-1", last(schema.KindConfirmed)); o.Receipt.Reconciliation.AttemptID != kv.AttemptID(fp, 3*maxAttempts+1) {
		t.Errorf("settled by %s", o.Receipt.Reconciliation.AttemptID)
	}
}

// A request lost in flight whose held envelope's grant has expired by the
// time it is found lost is not sent again — and the intent ends for every
// proposal: FAILED_BEFORE_DISPATCH (the provider never received it, and
// nothing more is sent), the expired grant an incident event. Before, the
// re-check ended only the proposal whose envelope was held and left the
// intent lost, its other proposals at RECONCILIATION_REQUIRED for good
// (internal/sim finding 8).
func TestLostRequestWithExpiredGrantEndsTheIntent(t *testing.T) {
	env, clock := start(t)
	f := env.Fakes["demo"]
	var mu sync.Mutex
	calls := 0
	f.OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return schema.AdapterReply{}, adapters.ErrTimeout // lost on the way: nothing acted
	})
	f.OnReconcile(func(context.Context, schema.ReconcileRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: schema.ReplyFailedBeforeDispatch}, nil
	})
	fp := twoLost(t, env, clock, "expired-1", "expired-2")

	// Past the grant's five minutes and the clock skew before any poll is
	// past the fence: the first poll that finds the request lost hands back
	// an envelope whose grant has expired.
	clock.Advance(6 * time.Minute)
	env.Quiesce(t)
	for range 12 {
		clock.Advance(10 * time.Second)
		env.Quiesce(t)
		if o := env.Recorder.Outcomes("expired-2"); o[len(o)-1].Terminal {
			break
		}
	}
	for _, id := range []string{"expired-1", "expired-2"} {
		outs := env.Recorder.Outcomes(id)
		o := outs[len(outs)-1]
		if o.Kind != schema.KindFailedBeforeDispatch || !o.Terminal || o.Incidents[0].Code != schema.CodeProviderFailedBeforeDispatch {
			t.Fatalf("%s: last outcome %+v, want a terminal FAILED_BEFORE_DISPATCH for the intent", id, o)
		}
	}
	mu.Lock()
	if calls != 1 {
		t.Errorf("%d dispatch calls, want only the lost one", calls)
	}
	mu.Unlock()
	var rec kv.Intent
	if found, _ := env.Processor().Store().Intent(fp, &rec); !found || rec.Redispatches != 1 || rec.State != kv.StateDone ||
		rec.Receipt == nil || rec.Receipt.Status != schema.StatusFailedBeforeDispatch {
		t.Errorf("record: %+v", rec)
	}
	if g := gauge(t, env); g != 0 {
		t.Errorf("actions_indeterminate_actions = %v", g)
	}
}

// twoLost proposes the lumber intent as first, then as second with the
// same grant, each once its dispatch left the effect unknown
// (RECONCILIATION_REQUIRED), and returns the intent's fingerprint.
func twoLost(t *testing.T, env *testenv.Env, clock stages.Clock, first, second string) string {
	t.Helper()
	m, fp := lumber(t, clock, first)
	env.PublishSigned(t, m, env.Host)
	env.Recorder.Wait(t, first, last(schema.KindReconciliationRequired))
	p := testenv.Set(testenv.Set(testenv.Lumber(second), "context.delivery.delivery_id", "delivery:"+second), "grant", m["grant"])
	env.PublishSigned(t, p, env.Host)
	env.Recorder.Wait(t, second, last(schema.KindReconciliationRequired))
	return fp
}
