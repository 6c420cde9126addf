package stages

import (
	"sync"
	"time"
)

// Clock tells the time. Stages take it from their dependencies so that
// grant windows, approval TTLs and reconciliation backoff can be tested
// without sleeping.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed on this
	// clock, and a function that releases it early.
	After(d time.Duration) (<-chan time.Time, func())
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// After is time.NewTimer.
func (SystemClock) After(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// NowMs is c's time in Unix milliseconds.
func NowMs(c Clock) int64 { return c.Now().UnixMilli() }

// ManualClock is a Clock that moves only when told to. Safe for concurrent use.
type ManualClock struct {
	mu      sync.Mutex
	t       time.Time
	waiters map[*waiter]struct{}
}

type waiter struct {
	at time.Time
	c  chan time.Time
}

// NewManualClock starts a manual clock at t.
func NewManualClock(t time.Time) *ManualClock {
	return &ManualClock{t: t, waiters: map[*waiter]struct{}{}}
}

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// After fires once the clock is moved d or more ahead of now.
func (c *ManualClock) After(d time.Duration) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &waiter{at: c.t.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		w.c <- c.t
		return w.c, func() {}
	}
	c.waiters[w] = struct{}{}
	return w.c, func() {
		c.mu.Lock()
		delete(c.waiters, w)
		c.mu.Unlock()
	}
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set(c.t.Add(d))
}

// Set sets the clock's time.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set(t)
}

func (c *ManualClock) set(t time.Time) {
	c.t = t
	for w := range c.waiters {
		if !t.Before(w.at) {
			w.c <- t
			delete(c.waiters, w)
		}
	}
}
