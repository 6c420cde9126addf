package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Defaults of the serving roles' configurations.
const (
	// DefaultQueue is the NATS queue group a Connector, Resolver or
	// CandidateSource subscribes in when its config names none: several
	// processes of one role share the requests, each request going to one.
	DefaultQueue = "portcullis"
	// DefaultMaxConcurrent bounds the handler calls one Connector,
	// Resolver or CandidateSource runs at once; it matches the processor's
	// default provider max_in_flight. Further requests wait in the
	// subscription's buffer (NATS drops them when that overflows, and the
	// processor's request times out).
	DefaultMaxConcurrent = 16
)

// server is what the three serving roles share: queue subscriptions,
// bounded concurrency, panics contained, and an orderly stop.
type server struct {
	nc   *nats.Conn
	log  *slog.Logger
	sem  chan struct{}
	ctx  context.Context // handlers' context; cancelled by Stop
	stop context.CancelFunc

	mu       sync.Mutex
	subs     []*nats.Subscription
	stopping bool
	wg       sync.WaitGroup
	before   error                  // the connection's last error before subscribing
	served   atomic.Pointer[func()] // test hook: called after each request is handled
}

func newServer(nc *nats.Conn, maxConcurrent int, log *slog.Logger) (*server, error) {
	if nc == nil {
		return nil, errors.New("client: no connection")
	}
	if maxConcurrent <= 0 {
		maxConcurrent = DefaultMaxConcurrent
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &server{nc: nc, log: log, sem: make(chan struct{}, maxConcurrent), ctx: ctx, stop: cancel, before: nc.LastError()}, nil
}

// subscribe serves subject in queue with handle, which runs on its own
// goroutine once a concurrency slot is free.
func (s *server) subscribe(subject, queue string, handle func(context.Context, *nats.Msg)) error {
	if queue == "" {
		queue = DefaultQueue
	}
	sub, err := s.nc.QueueSubscribe(subject, queue, func(m *nats.Msg) {
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return
		}
		s.wg.Add(1)
		s.mu.Unlock()
		select {
		case s.sem <- struct{}{}:
		case <-s.ctx.Done():
			s.wg.Done()
			return
		}
		go func() {
			defer s.wg.Done()
			defer func() { <-s.sem }()
			handle(s.ctx, m)
			if f := s.served.Load(); f != nil {
				(*f)()
			}
		}()
	})
	if err != nil {
		return fmt.Errorf("client: subscribe %s: %w", subject, err)
	}
	s.mu.Lock()
	s.subs = append(s.subs, sub)
	s.mu.Unlock()
	return nil
}

// ready flushes, so the server has every subscription before the caller
// goes on. NATS answers a forbidden subscription with an error before the
// flush's PONG, so a login that may not serve a subject is found now.
func (s *server) ready() error {
	if err := s.nc.Flush(); err != nil {
		return fmt.Errorf("client: flush: %w", err)
	}
	last := s.nc.LastError()
	if last == nil || last == s.before || !errors.Is(last, nats.ErrPermissionViolation) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sub := range s.subs {
		if strings.Contains(last.Error(), strconv.Quote(sub.Subject)) {
			return fmt.Errorf("client: subscribe %s: %w (is this connection logged in as the role that serves it?)", sub.Subject, last)
		}
	}
	return nil
}

// drain stops taking requests, lets every request already received be
// handled and answered, and returns when that is done or ctx ends (then it
// stops: handler contexts are cancelled, and it waits for them).
func (s *server) drain(ctx context.Context) error {
	s.mu.Lock()
	subs := s.subs
	s.mu.Unlock()
	for _, sub := range subs {
		if err := sub.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
			s.log.Warn("client: drain subscription failed", "subject", sub.Subject, "error", err)
		}
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !s.subsClosed(subs) {
		select {
		case <-ctx.Done():
			s.halt()
			return ctxError(ctx, "drain")
		case <-tick.C:
		}
	}
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		s.stop()
		return nil
	case <-ctx.Done():
		s.stop()
		<-done
		return ctxError(ctx, "drain")
	}
}

func (s *server) subsClosed(subs []*nats.Subscription) bool {
	if s.nc.IsClosed() {
		return true
	}
	for _, sub := range subs {
		if sub.IsValid() {
			return false
		}
	}
	return true
}

// halt stops at once: no more requests (those buffered get no reply; the
// processor's request times out, which it treats as indeterminate),
// handler contexts cancelled, and it waits for running handlers to return
// (each still sends its reply).
func (s *server) halt() {
	s.mu.Lock()
	s.stopping = true
	subs := s.subs
	s.mu.Unlock()
	for _, sub := range subs {
		_ = sub.Unsubscribe()
	}
	s.stop()
	s.wg.Wait()
}

// call runs a handler, turning a panic into an error.
func call[T any](f func() (T, error)) (v T, err error) {
	defer func() {
		if r := recover(); r != nil {
			var zero T
			v, err = zero, errPanic
		}
	}()
	return f()
}

var errPanic = errors.New("client: handler panicked")
