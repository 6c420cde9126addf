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
// bounded by lagTimeout. A failed read keeps the gauges' last values and
// marks the stage's consumer unavailable for readiness until a read
// succeeds again.
func (p *Processor) refreshLag(ctx context.Context, ws []*stageWatch) {
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, lagTimeout)
			defer cancel()
			c, err := p.js.Consumer(rctx, w.r.Stream(), w.r.Stage())
			if ctx.Err() != nil {
				return // stopping: not a failure of the consumer
			}
			stage := w.r.Stage()
			if err != nil {
				if !w.infoFailed.Swap(true) {
					p.log.Warn("stage consumer info unavailable; reported not ready until it is", "stage", stage, "err", err)
				}
				return
			}
			if w.infoFailed.Swap(false) {
				p.log.Info("stage consumer info available again", "stage", stage)
			}
			info := c.CachedInfo()
			p.metrics.ConsumerPending.WithLabelValues(stage).Set(float64(info.NumPending))
			p.metrics.ConsumerAckPending.WithLabelValues(stage).Set(float64(info.NumAckPending))
		})
	}
	wg.Wait()
}
