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
// key's limit. A queued input holds no in-flight slot of the runner; when
// an input of its key finishes, a queued one takes over that input's key
// slot and in-flight slot: the queue takes its lanes — one per host, by
// the input's subject — in turns, each lane in arrival order, so that one
// host's burst for a provider delays another host's proposal for it by a
// turn, not by the burst.
type bulkheads struct {
	mu     sync.Mutex
	active map[string]int
	queues map[string]*lanes
	queued int
	// max bounds the inputs queued across keys: each holds a delivered,
	// unacknowledged message (and its memory).
	max    int
	closed bool
}

// lanes are one key's queue: a queue per lane, and the lanes that hold
// inputs in the order they take turns.
type lanes struct {
	q     map[string][]*flight
	order []string
	next  int
	n     int
}

func (l *lanes) push(lane string, f *flight) {
	if len(l.q[lane]) == 0 {
		l.order = append(l.order, lane)
	}
	l.q[lane] = append(l.q[lane], f)
	l.n++
}

// pop takes the first input of the lane whose turn it is.
func (l *lanes) pop() *flight {
	l.next %= len(l.order)
	lane := l.order[l.next]
	q := l.q[lane]
	f := q[0]
	q[0] = nil
	l.n--
	if len(q) == 1 {
		delete(l.q, lane)
		l.order = append(l.order[:l.next], l.order[l.next+1:]...)
	} else {
		l.q[lane] = q[1:]
		l.next++
	}
	return f
}

func newBulkheads(max int) *bulkheads {
	return &bulkheads{active: map[string]int{}, queues: map[string]*lanes{}, max: max}
}

// enter admits f, of lane, to key, whose limit is limit. force queues f
// even when every queue is full. A queued f gives its source's slot back
// (the caller frees it): its done becomes nothing, under the lock the
// queue's takers hold.
func (b *bulkheads) enter(key, lane string, limit int, f *flight, force bool) admission {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.active[key] < limit && b.queues[key] == nil:
		b.active[key]++
		return admitRun
	case b.closed || (b.queued >= b.max && !force):
		return admitDefer
	}
	l := b.queues[key]
	if l == nil {
		l = &lanes{q: map[string][]*flight{}}
		b.queues[key] = l
	}
	f.done = func() {}
	l.push(lane, f)
	b.queued++
	return admitQueue
}

// leave ends an input of key. It returns the queued input that takes over
// its slot, if any (the key's count is then unchanged).
func (b *bulkheads) leave(key string) *flight {
	b.mu.Lock()
	defer b.mu.Unlock()
	if l := b.queues[key]; l != nil && !b.closed {
		next := l.pop()
		if l.n == 0 {
			delete(b.queues, key)
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
	for k, l := range b.queues {
		for _, lane := range l.order {
			out = append(out, l.q[lane]...)
		}
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
