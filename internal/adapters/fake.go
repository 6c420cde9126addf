package adapters

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// DispatchFunc answers a dispatch in place of the fake's script.
type DispatchFunc func(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error)

// ReconcileFunc answers a reconcile in place of the fake's script.
type ReconcileFunc func(ctx context.Context, req schema.ReconcileRequest) (schema.AdapterReply, error)

// Fake is a scripted provider for tests and the demo. It answers the
// successive outcomes of its script (the last one repeats), or whatever a
// hook set with OnDispatch/OnReconcile returns, and it counts what it saw so
// that tests can assert that each idempotency key was delivered at most
// once. It is safe for concurrent use.
//
// It behaves like the real adapters at the seam: requests are checked the
// same way, a context already done means ErrNotInvoked, and replies (also a
// hook's) pass the same validation, so a hook returning an invalid reply
// yields ErrMalformedReply. A hook simulates a transport failure by
// returning ErrNotInvoked ("no responders"), ErrTimeout or any other error.
//
// Like a real connector (SPEC §4), it never acts on a dispatch that
// reaches it after its not_after_ms by its own clock (SetClock; the wall
// clock by default): it answers schema.LateReply without calling the hook
// or the script, and counts the request as late (LateFor), neither
// dispatched nor delivered.
type Fake struct {
	name string

	mu          sync.Mutex
	now         func() time.Time
	script      FakeScript
	onDispatch  DispatchFunc
	onReconcile ReconcileFunc
	dispatches  int
	reconciles  int
	keys        map[string]*fakeCounts
	attempts    map[string]int // reconcile requests by attempt id
	observe     func(FakeRequest)
}

// FakeRequest is what the fake saw of one request, for a test's history
// (internal/history): value-free, no payload.
type FakeRequest struct {
	Method         string // MethodDispatch or MethodReconcile
	Key, AttemptID string
	At             time.Time // when it arrived
	Late           bool      // a dispatch refused past its not_after_ms
	// Effect: a dispatch the provider acted on — it arrived in time and
	// was not answered rejected or failed_before_dispatch (one that got no
	// answer acted: the fake counts it delivered).
	Effect bool
}

// Observe calls fn with every request the fake answers, once its answer is
// known; nil stops observing.
func (f *Fake) Observe(fn func(FakeRequest)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.observe = fn
}

func (f *Fake) observed(r FakeRequest) {
	f.mu.Lock()
	fn := f.observe
	f.mu.Unlock()
	if fn != nil {
		fn(r)
	}
}

type fakeCounts struct {
	dispatches, delivered, reconciles, late int
}

// NewFake returns a fake provider named name with script (empty lists mean
// "confirmed").
func NewFake(name string, script FakeScript) *Fake {
	return &Fake{name: name, script: script, now: time.Now, keys: map[string]*fakeCounts{}, attempts: map[string]int{}}
}

// SetClock sets the clock the fake reads not_after_ms against: a test's
// manual clock, or the wall clock shifted to play a connector whose clock
// is off. nil restores the wall clock.
func (f *Fake) SetClock(now func() time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now == nil {
		now = time.Now
	}
	f.now = now
}

// Kind implements Adapter.
func (f *Fake) Kind() string { return KindFake }

// OnDispatch replaces the script for dispatches; nil restores it.
func (f *Fake) OnDispatch(fn DispatchFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onDispatch = fn
}

// OnReconcile replaces the script for reconciles; nil restores it.
func (f *Fake) OnReconcile(fn ReconcileFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onReconcile = fn
}

// TimeOut makes every dispatch and reconcile time out after the request may
// have reached the provider (ErrTimeout): its effects stay unknown, and
// reconciliation gives up after its attempts (tests of indeterminate
// actions).
func (f *Fake) TimeOut() {
	f.OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{}, ErrTimeout
	})
	f.OnReconcile(func(context.Context, schema.ReconcileRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{}, ErrTimeout
	})
}

// Dispatches returns how many dispatch calls reached the fake.
func (f *Fake) Dispatches() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dispatches
}

// Reconciles returns how many reconcile calls reached the fake.
func (f *Fake) Reconciles() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reconciles
}

// DispatchesFor returns how many dispatch calls carried idempotency key.
func (f *Fake) DispatchesFor(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.keys[key]; c != nil {
		return c.dispatches
	}
	return 0
}

// ReconcilesFor returns how many reconcile calls carried idempotency key.
func (f *Fake) ReconcilesFor(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.keys[key]; c != nil {
		return c.reconciles
	}
	return 0
}

// DeliveredFor returns how many dispatches of key the provider "received":
// calls whose result was not ErrNotInvoked.
func (f *Fake) DeliveredFor(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.keys[key]; c != nil {
		return c.delivered
	}
	return 0
}

// LateFor returns how many dispatches of key came after their
// not_after_ms and were refused without acting.
func (f *Fake) LateFor(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.keys[key]; c != nil {
		return c.late
	}
	return 0
}

// Late returns how many dispatches came after their not_after_ms, in all.
func (f *Fake) Late() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.keys {
		n += c.late
	}
	return n
}

// Delivered returns DeliveredFor of every key delivered at least once.
func (f *Fake) Delivered() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, c := range f.keys {
		if c.delivered > 0 {
			out[k] = c.delivered
		}
	}
	return out
}

// Attempted returns how many reconcile requests carried attemptID.
func (f *Fake) Attempted(attemptID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attempts[attemptID]
}

// AtMostOnce reports every idempotency key delivered more than once and
// every reconciliation attempt id queried more than once (SPEC §3, §6), or
// nil. Keys are shortened to their first 12 characters.
func (f *Fake) AtMostOnce() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for key, c := range f.keys {
		if c.delivered > 1 {
			errs = append(errs, fmt.Errorf("idempotency key %.12s… reached %s %d times", key, f.name, c.delivered))
		}
	}
	for id, n := range f.attempts {
		if n > 1 {
			errs = append(errs, fmt.Errorf("reconciliation attempt %s queried %d times", id, n))
		}
	}
	return errors.Join(errs...)
}

func (f *Fake) counts(key string) *fakeCounts {
	c := f.keys[key]
	if c == nil {
		c = &fakeCounts{}
		f.keys[key] = c
	}
	return c
}

// Dispatch implements Adapter.
func (f *Fake) Dispatch(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
	if _, err := encodeDispatch(f.name, &req); err != nil {
		return schema.AdapterReply{}, err
	}
	if err := ctx.Err(); err != nil {
		return schema.AdapterReply{}, notSent(f.name, MethodDispatch, err)
	}
	reply, err := f.answerDispatch(ctx, req, false)
	if err != nil {
		return schema.AdapterReply{}, err
	}
	if reply, err = checkReply(reply, false); err != nil {
		return schema.AdapterReply{}, fmt.Errorf("adapters: %s %s: %w", f.name, MethodDispatch, err)
	}
	return reply, nil
}

// Reconcile implements Adapter.
func (f *Fake) Reconcile(ctx context.Context, req schema.ReconcileRequest) (schema.AdapterReply, error) {
	if _, err := encodeReconcile(f.name, &req); err != nil {
		return schema.AdapterReply{}, err
	}
	if err := ctx.Err(); err != nil {
		return schema.AdapterReply{}, notSent(f.name, MethodReconcile, err)
	}
	reply, err := f.answerReconcile(ctx, req)
	if err != nil {
		return schema.AdapterReply{}, err
	}
	if reply, err = checkReply(reply, true); err != nil {
		return schema.AdapterReply{}, fmt.Errorf("adapters: %s %s: %w", f.name, MethodReconcile, err)
	}
	return reply, nil
}

// answerDispatch counts a dispatch and returns the hook's or the script's
// answer, not yet validated. A request that arrived over the wire counts as
// delivered whatever the hook says. One that came after its not_after_ms
// is refused (schema.LateReply) and counts only as late.
func (f *Fake) answerDispatch(ctx context.Context, req schema.DispatchRequest, overWire bool) (schema.AdapterReply, error) {
	at := time.Now()
	f.mu.Lock()
	if schema.Late(req.NotAfterMs, f.now().UnixMilli()) {
		f.counts(req.IdempotencyKey).late++
		f.mu.Unlock()
		f.observed(FakeRequest{Method: MethodDispatch, Key: req.IdempotencyKey, At: at, Late: true})
		return schema.LateReply(), nil
	}
	n := f.dispatches
	f.dispatches++
	f.counts(req.IdempotencyKey).dispatches++
	hook := f.onDispatch
	f.mu.Unlock()

	var reply schema.AdapterReply
	var err error
	if hook != nil {
		reply, err = hook(ctx, req) // outside the lock: a hook may block
	} else {
		reply = scripted(f.script.Dispatch, n, MethodDispatch, req.IdempotencyKey)
	}
	delivered := overWire || !errors.Is(err, ErrNotInvoked)
	if delivered {
		f.mu.Lock()
		f.counts(req.IdempotencyKey).delivered++
		f.mu.Unlock()
	}
	declined := err == nil && (reply.Outcome == schema.ReplyRejected || reply.Outcome == schema.ReplyFailedBeforeDispatch)
	f.observed(FakeRequest{Method: MethodDispatch, Key: req.IdempotencyKey, At: at, Effect: delivered && !declined})
	return reply, err
}

func (f *Fake) answerReconcile(ctx context.Context, req schema.ReconcileRequest) (schema.AdapterReply, error) {
	f.observed(FakeRequest{Method: MethodReconcile, Key: req.IdempotencyKey, AttemptID: req.AttemptID, At: time.Now()})
	f.mu.Lock()
	n := f.reconciles
	f.reconciles++
	f.counts(req.IdempotencyKey).reconciles++
	f.attempts[req.AttemptID]++
	hook := f.onReconcile
	f.mu.Unlock()
	if hook != nil {
		return hook(ctx, req)
	}
	return scripted(f.script.Reconcile, n, MethodReconcile, req.IdempotencyKey), nil
}

// Serve runs the fake as a provider connector on NATS: it answers requests
// on `<prefix>.provider.<name>.dispatch|reconcile` through nc, so that a
// processor using the nats adapter (possibly in another process, killed and
// restarted by a crash test) talks to it, and its counters outlive that
// process. Every request that arrives counts as delivered. A hook's reply is
// sent as is, unvalidated (to test MALFORMED_ADAPTER_RESULT); a hook's error
// sends nothing, so the caller times out (no responders is simulated by not
// serving). A request that does not strictly decode, or names another
// provider, gets no answer and is not counted. stop unsubscribes and waits
// for answers in progress; hooks see their context cancelled.
func (f *Fake) Serve(nc *nats.Conn, subj subjects.Subjects) (stop func(), err error) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex // orders wg.Add before stop's wg.Wait
		stopped bool
	)
	answer := func(m *nats.Msg, fn func() (schema.AdapterReply, error)) {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		wg.Add(1)
		go func() { // concurrently, like a real connector: a hook may block
			defer wg.Done()
			if reply, err := fn(); err == nil {
				_ = m.Respond(schema.MustMarshal(reply))
			}
		}()
	}
	ds, err := nc.Subscribe(subj.ProviderDispatch(f.name), func(m *nats.Msg) {
		var req schema.DispatchRequest
		if schema.Decode(m.Data, &req) != nil {
			return
		}
		if _, err := encodeDispatch(f.name, &req); err != nil {
			return
		}
		answer(m, func() (schema.AdapterReply, error) { return f.answerDispatch(ctx, req, true) })
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("adapters: fake %s: serve: %w", f.name, err)
	}
	rs, err := nc.Subscribe(subj.ProviderReconcile(f.name), func(m *nats.Msg) {
		var req schema.ReconcileRequest
		if schema.Decode(m.Data, &req) != nil {
			return
		}
		if _, err := encodeReconcile(f.name, &req); err != nil {
			return
		}
		answer(m, func() (schema.AdapterReply, error) { return f.answerReconcile(ctx, req) })
	})
	if err != nil {
		_ = ds.Unsubscribe()
		cancel()
		return nil, fmt.Errorf("adapters: fake %s: serve: %w", f.name, err)
	}
	if err := nc.Flush(); err != nil {
		_ = ds.Unsubscribe()
		_ = rs.Unsubscribe()
		cancel()
		return nil, fmt.Errorf("adapters: fake %s: serve: %w", f.name, err)
	}
	return func() {
		_ = ds.Unsubscribe()
		_ = rs.Unsubscribe()
		mu.Lock()
		stopped = true
		mu.Unlock()
		cancel()
		wg.Wait()
	}, nil
}

// scripted builds the n-th (0-based) scripted reply: the n-th outcome, or
// the last one once the script is exhausted.
func scripted(outcomes []string, n int, method, key string) schema.AdapterReply {
	outcome := schema.ReplyConfirmed
	if len(outcomes) > 0 {
		outcome = outcomes[min(n, len(outcomes)-1)]
	}
	short := key[:16] // checked: 64 hex digits
	r := schema.AdapterReply{
		Outcome:          outcome,
		ProviderActionID: "fake:" + short,
		EvidenceRefs:     []string{"fake:" + method + ":" + short},
	}
	switch outcome {
	case schema.ReplyRejected:
		r.ErrorCode = "FAKE_REJECTED"
	case schema.ReplyFailedBeforeDispatch:
		r.ErrorCode = "FAKE_FAILED_BEFORE_DISPATCH"
	case schema.ReplyIndeterminate:
		r.ErrorCode = "FAKE_INDETERMINATE"
	}
	return r
}
