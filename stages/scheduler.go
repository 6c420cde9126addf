package stages

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/kv"
)

// Scheduler publishes durable timers (kv.Timer) when they fall due: approval
// expiries to the authorization stage, reconciliation polls to the
// reconciliation stage. Timers live in a kv.TimerQueue (the processor's
// Pebble store), so they survive restarts; a timer that came due while the
// processor was down fires at start. Between
// firings it sleeps until the earliest timer is due or a new one is added.
type Scheduler struct {
	Store kv.TimerQueue
	JS    jetstream.JetStream
	// Seal seals each timer message: timers fire on internal subjects.
	Seal  Sealer
	Clock Clock
	Log   *slog.Logger
	// MaxSleep bounds one sleep, so that a timer written behind the
	// store's back (by another process, in a test) is still found.
	// Default 1m.
	MaxSleep time.Duration
}

// Run fires due timers until ctx is cancelled.
func (s *Scheduler) Run(ctx context.Context) error {
	maxSleep := s.MaxSleep
	if maxSleep <= 0 {
		maxSleep = time.Minute
	}
	log := s.Log
	if log == nil {
		log = slog.Default()
	}
	added := s.Store.TimerAdded()
	for {
		sleep := maxSleep
		if err := s.FireDue(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Warn("timers: firing failed; will retry", "err", err)
			sleep = time.Second
		} else if due, ok, err := s.Store.NextTimerDue(); err == nil && ok {
			sleep = min(sleep, time.Duration(due-NowMs(s.Clock))*time.Millisecond)
		}
		wake, stop := s.Clock.After(sleep)
		select {
		case <-ctx.Done():
			stop()
			return nil
		case <-added:
		case <-wake:
		}
		stop()
	}
}

// FireDue publishes every due timer, sealed, and deletes it once its
// PubAck arrived (kv.FireDue). A crash between the two republishes under
// the same message id.
func (s *Scheduler) FireDue(ctx context.Context) error {
	return kv.FireDue(s.Store, NowMs(s.Clock), func(tm kv.Timer) error {
		m := nats.NewMsg(tm.Subject)
		m.Data = tm.Data
		s.Seal.Seal(tm.Subject, tm.Data, m.Header)
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := s.JS.PublishMsg(pctx, m, jetstream.WithMsgID(s.Seal.MsgID(tm.MsgID))); err != nil {
			return fmt.Errorf("timers: publish %s: %w", tm.ID, err)
		}
		return nil
	})
}
