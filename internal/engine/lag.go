package engine

import (
	"context"
	"sync"
	"time"

	"github.com/portcullis/portcullis/stages"
)

// Consumer lag polling defaults.
const (
	// DefaultLagPoll is how often each stage consumer's info is read.
	DefaultLagPoll = 5 * time.Second
	// lagTimeout bounds one read of one consumer's info.
	lagTimeout = 2 * time.Second
)

// watchStages hands the running stage runners to readiness and starts the
// loop that reads their consumers' pending counts, until ctx is cancelled.
func (p *Processor) watchStages(ctx context.Context, runners []*stages.Runner, every time.Duration) {
	ws := make([]*stageWatch, len(runners))
	for i, r := range runners {
		ws[i] = &stageWatch{r: r}
	}
	p.health.stages.Store(&ws)
	if every <= 0 {
		every = DefaultLagPoll
	}
	p.wg.Go(func() { p.watchLag(ctx, ws, every) })
}

// watchLag refreshes actions_consumer_pending_messages and
// actions_consumer_ack_pending_messages: at once, then every interval.
// Scrapes only read the gauges; JetStream is asked here, never in a scrape.
func (p *Processor) watchLag(ctx context.Context, ws []*stageWatch, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		p.refreshLag(ctx, ws)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refreshLag reads every stage consumer's info concurrently, each read
// bounded by lagTimeout, and sets each runner's gauges to the sum over its
// consumers (one per host for some stages). A failed read keeps the
// gauges' last values and marks the stage's consumers unavailable for
// readiness until a read succeeds again.
func (p *Processor) refreshLag(ctx context.Context, ws []*stageWatch) {
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() {
			stage := w.r.Stage()
			var pending, ackPending uint64
			var failed error
			for _, src := range w.r.Sources() {
				rctx, cancel := context.WithTimeout(ctx, lagTimeout)
				c, err := p.js.Consumer(rctx, src.Stream, src.Durable)
				cancel()
				if ctx.Err() != nil {
					return // stopping: not a failure of the consumer
				}
				if err != nil {
					failed = err
					break
				}
				info := c.CachedInfo()
				pending += info.NumPending
				ackPending += uint64(info.NumAckPending)
			}
			if failed != nil {
				if !w.infoFailed.Swap(true) {
					p.log.Warn("stage consumer info unavailable; reported not ready until it is", "stage", stage, "err", failed)
				}
				return
			}
			if w.infoFailed.Swap(false) {
				p.log.Info("stage consumer info available again", "stage", stage)
			}
			p.metrics.ConsumerPending.WithLabelValues(stage).Set(float64(pending))
			p.metrics.ConsumerAckPending.WithLabelValues(stage).Set(float64(ackPending))
		})
	}
	wg.Wait()
}
