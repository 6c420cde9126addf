package stages

import "sync"

// Bulkheads is implemented by a handler whose inputs use outside capacity
// that other inputs must not be starved of (SPEC §3, Isolation): a
// provider, a candidate source. The runner then handles at most limit
// inputs of one key at a time; the others wait in a queue of their key
// without holding any of the stage's in-flight slots, so that inputs of
// other keys keep flowing while one key is saturated (a provider that
// hangs, a source that never answers).
type Bulkheads interface {
	// Bulkhead names the bulkhead an input belongs to and its limit; ""
	// (or a limit < 1) for none. It must be cheap and must not fail: it
	// reads the input before Handle validates it, so that a key it cannot
	// read is "" and Handle refuses the input as usual.
	Bulkhead(in *Input) (key string, limit int)
}

// WithBulkhead returns h, whose inputs the runner limits per key as
// bulkhead says (see Bulkheads).
func WithBulkhead(h Handler, bulkhead func(in *Input) (key string, limit int)) Handler {
	return bulkheaded{Handler: h, fn: bulkhead}
}

type bulkheaded struct {
	Handler
	fn func(in *Input) (string, int)
}

func (b bulkheaded) Bulkhead(in *Input) (string, int) { return b.fn(in) }

// Unwrap returns the handler WithBulkhead wrapped.
func (b bulkheaded) Unwrap() Handler { return b.Handler }

// admission is what the bulkheads decided for an input.
type admission int

const (
	admitRun   admission = iota // run it now: a slot of its key is taken
	admitQueue                  // it waits in its key's queue
	admitDefer                  // every queue is full: redeliver it later
)

// bulkheads counts inputs in flight per key and queues the ones over their
// key's limit, in arrival order. A queued input holds no in-flight slot of
// the runner; when an input of its key finishes, the first queued one
// takes over that input's key slot and in-flight slot.
type bulkheads struct {
	mu     sync.Mutex
	active map[string]int
	queues map[string][]*flight
	queued int
	// max bounds the inputs queued across keys: each holds a delivered,
	// unacknowledged message (and its memory).
	max    int
	closed bool
}

func newBulkheads(max int) *bulkheads {
	return &bulkheads{active: map[string]int{}, queues: map[string][]*flight{}, max: max}
}

// enter admits f to key, whose limit is limit. force queues f even when
// every queue is full.
func (b *bulkheads) enter(key string, limit int, f *flight, force bool) admission {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.active[key] < limit && len(b.queues[key]) == 0:
		b.active[key]++
		return admitRun
	case b.closed || (b.queued >= b.max && !force):
		return admitDefer
	}
	b.queues[key] = append(b.queues[key], f)
	b.queued++
	return admitQueue
}

// leave ends an input of key. It returns the queued input that takes over
// its slot, if any (the key's count is then unchanged).
func (b *bulkheads) leave(key string) *flight {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q := b.queues[key]; len(q) > 0 && !b.closed {
		next := q[0]
		q[0] = nil
		if len(q) == 1 {
			delete(b.queues, key)
		} else {
			b.queues[key] = q[1:]
		}
		b.queued--
		return next
	}
	if b.active[key]--; b.active[key] <= 0 {
		delete(b.active, key)
	}
	return nil
}

// close stops queueing and returns every queued input (to be redelivered).
func (b *bulkheads) close() []*flight {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	var out []*flight
	for k, q := range b.queues {
		out = append(out, q...)
		delete(b.queues, k)
	}
	b.queued = 0
	return out
}

// Queued is the number of inputs waiting in bulkhead queues.
func (r *Runner) Queued() int {
	r.bulk.mu.Lock()
	defer r.bulk.mu.Unlock()
	return r.bulk.queued
}

// bulkheadOf asks the handler for in's bulkhead, if it has bulkheads.
func (r *Runner) bulkheadOf(in *Input) (string, int) {
	b, ok := r.h.(Bulkheads)
	if !ok {
		return "", 0
	}
	key, limit := b.Bulkhead(in)
	if limit < 1 {
		return "", 0
	}
	return key, limit
}
