package stages

import (
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Wire coalesces the socket writes of one NATS connection (Deps.Wire): the
// runner holds it while it hands an input's messages, or a round of acks,
// to nats.go, and the bytes nats.go's flusher writes meanwhile go out in
// one write when the last hold is released.
//
// Why: nats.go kicks its flusher goroutine at every publish and ack, and
// on two cores that goroutine mostly runs at once. An input's own
// messages mostly shared a write already (its publish loop is quicker
// than the flusher's wake-up); what went out alone was each input's one
// hand-off, outcome or provider request — different inputs' messages,
// ready microseconds apart. Counted on the processor's connection in
// `processor bench -n 3000 -rate 100 -duration 3s -ack-share 0
// -nats-process` (3300 proposals, ~36700 messages sent, ~11 a proposal):
// 18800 to 21100 writes without holds (~6 a proposal, 9 in 10 of them one
// message), 11300 to 12100 with them (~3.5); the acker's rounds account
// for ~1300 of the difference, the yield at release for the rest. nats.go
// has no call that buffers without a round trip (Flush pings the server),
// so the batching sits under it, in the net.Conn its flusher writes to
// (nats.SetCustomDialer), without forking it.
//
// A hold never delays a write for long: holds cover only code that hands
// bytes to nats.go (no waiting for PubAcks or the store) and one yield,
// and whatever a hold keeps is written at MaxDelay at the latest even if
// the holder was descheduled or stalled (nats.go blocks an asynchronous
// publish while too many wait for their PubAcks). With nothing else
// runnable (a steady rate) the yield returns at once. The connection is
// shared (provider requests, activity and schedule writes, pulls): their
// bytes written during a hold wait for its end — what the goroutines
// runnable at that moment take to reach their next wait, at most
// MaxDelay.
//
// A write that fails after its bytes were kept fails the connection: the
// next write returns the error and the socket is closed, so nats.go
// reconnects. What was lost is what a broken connection loses anyway: a
// publish without its PubAck is sent again under the same message id, an
// input without its ack is redelivered.
type Wire struct {
	// MaxDelay bounds how long a hold keeps bytes back. Default
	// DefaultWireDelay.
	MaxDelay time.Duration
	// Dialer dials the connection's sockets; default a net.Dialer with
	// nats.DefaultTimeout (what nats.go dials with itself).
	Dialer *net.Dialer

	nc     atomic.Pointer[nats.Conn]
	writes atomic.Uint64
	// holds are the holds not released; atomic, so that taking one never
	// waits for a write in progress.
	holds atomic.Int32

	mu      sync.Mutex
	expired bool // the holds outlived MaxDelay: writes go through until none is left
	cur     *wireConn
	timer   *time.Timer
}

// DefaultWireDelay is Wire.MaxDelay's default: what another goroutine's
// write (a provider request) may wait for a hold whose thread the OS
// descheduled. The bench batched as much with 250µs as with 1ms (11700 to
// 12500 writes against 11300 to 12100).
const DefaultWireDelay = 250 * time.Microsecond

// wireWriteTimeout bounds a write of kept bytes (nats.go bounds its own
// with its FlusherTimeout; the kept bytes are written outside it).
var wireWriteTimeout = 5 * time.Second

// maxKept bounds the bytes a hold keeps back: nats.go's own buffer size, so
// a hold never makes a write larger than nats.go would.
const maxKept = 32 << 10

// Option is the nats.go option that dials the connection through w.
func (w *Wire) Option() nats.Option { return nats.SetCustomDialer(w) }

// Attach tells w the connection it serves, once connected: w then leaves
// the bytes nats.go still buffers at a release to its flusher's next
// write, which carries them together with the kept ones.
func (w *Wire) Attach(nc *nats.Conn) { w.nc.Store(nc) }

// Writes is the number of writes made on w's sockets.
func (w *Wire) Writes() uint64 {
	if w == nil {
		return 0
	}
	return w.writes.Load()
}

// Dial implements nats.CustomDialer.
func (w *Wire) Dial(network, address string) (net.Conn, error) {
	d := w.Dialer
	if d == nil {
		d = &net.Dialer{Timeout: nats.DefaultTimeout}
	}
	conn, err := d.Dial(network, address)
	if err != nil {
		return nil, err
	}
	c := &wireConn{Conn: conn, w: w}
	w.mu.Lock()
	if w.cur != nil {
		w.cur.kept = nil // the old socket's: never written to the new one
	}
	w.cur = c
	w.mu.Unlock()
	return c, nil
}

// Hold keeps the connection's writes back until the matching Release (or
// MaxDelay). Nil-safe: a nil Wire holds nothing.
func (w *Wire) Hold() {
	if w == nil {
		return
	}
	w.holds.Add(1)
}

// Release ends a Hold; the last one writes what was kept, in one write.
func (w *Wire) Release() {
	if w == nil {
		return
	}
	// Whatever is runnable now (inputs one group commit released, the
	// flusher nats.go just kicked, another stage's worker) adds its bytes
	// first: one write for all of them. Without this yield each hand-off
	// went out alone (measured: see Wire).
	runtime.Gosched()
	if w.holds.Add(-1) > 0 {
		return
	}
	w.mu.Lock()
	w.expired = false
	c := w.cur
	kept := c != nil && len(c.kept) > 0
	w.mu.Unlock()
	if !kept {
		return
	}
	if nc := w.nc.Load(); nc != nil {
		if n, err := nc.Buffered(); err == nil && n > 0 {
			// nats.go's flusher has been kicked for these and writes them
			// next, the kept bytes first, in one write (MaxDelay bounds it
			// if it does not come).
			return
		}
	}
	w.mu.Lock()
	if w.holds.Load() == 0 && c == w.cur {
		c.writeKept()
	}
	w.mu.Unlock()
}

// expire writes what was kept: a hold outlived MaxDelay.
func (w *Wire) expire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.holds.Load() > 0 {
		w.expired = true
	}
	if w.cur != nil {
		w.cur.writeKept()
	}
}

// wireConn is one socket of a Wire.
type wireConn struct {
	net.Conn
	w    *Wire
	kept []byte // written while held, not yet on the socket
	err  error  // a write of kept bytes failed: the connection is broken
}

func (c *wireConn) Write(p []byte) (int, error) {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if w.holds.Load() > 0 && !w.expired && c == w.cur && len(c.kept)+len(p) <= maxKept {
		if len(c.kept) == 0 {
			w.armLocked()
		}
		c.kept = append(c.kept, p...)
		return len(p), nil
	}
	if len(c.kept) > 0 {
		c.kept = append(c.kept, p...)
		if c.writeKept(); c.err != nil {
			return 0, c.err
		}
		return len(p), nil
	}
	w.writes.Add(1)
	return c.Conn.Write(p)
}

// armLocked starts the MaxDelay timer for bytes just kept.
func (w *Wire) armLocked() {
	d := w.MaxDelay
	if d <= 0 {
		d = DefaultWireDelay
	}
	if w.timer == nil {
		w.timer = time.AfterFunc(d, w.expire)
		return
	}
	w.timer.Reset(d)
}

// writeKept writes the kept bytes, w.mu held.
func (c *wireConn) writeKept() {
	if len(c.kept) == 0 || c.err != nil {
		return
	}
	if c.w.timer != nil {
		c.w.timer.Stop()
	}
	c.w.writes.Add(1)
	// Kept bytes are written after nats.go's own write returned, and it
	// clears its write deadline then: without one of our own, a socket
	// that takes nothing (a partition) would block this write, and with
	// w.mu every later write and nats.go's Close of the socket, for ever —
	// the connection could never reconnect. Every write nats.go makes arms
	// a fresh deadline first, so the one left here is never stale for it.
	_ = c.Conn.SetWriteDeadline(time.Now().Add(wireWriteTimeout))
	_, err := c.Conn.Write(c.kept)
	c.kept = c.kept[:0]
	if err != nil {
		// nats.go believes these bytes written: it must learn from its
		// next write, and from its reader, that the socket is gone.
		c.err = err
		_ = c.Conn.Close()
	}
}

func (c *wireConn) Close() error {
	c.w.mu.Lock()
	c.writeKept()
	c.w.mu.Unlock()
	return c.Conn.Close()
}
