package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
)

// reach is what this processor last learnt of each provider's
// reachability from its own calls: a call that provably reached nobody
// (adapters.ErrNotInvoked: NATS "no responders" when no connector serves
// the provider, a refused connection) makes the provider unreachable, a
// reply makes it reachable again. Dispatches to an unreachable provider
// wait (retried within its unavailable_retry, then ADAPTER_UNAVAILABLE):
// that wait is said in the log (once per episode), on /readyz's body and
// in actions_provider_unreachable. Provider names are configured, never
// input.
type reach struct {
	log     *slog.Logger
	metrics *metrics.Metrics
	now     func() time.Time
	retry   map[string]time.Duration // unavailable_retry by provider

	mu    sync.Mutex
	since map[string]time.Time // unreachable providers, since
}

func newReach(log *slog.Logger, m *metrics.Metrics, now func() time.Time, retry map[string]time.Duration) *reach {
	return &reach{log: log, metrics: m, now: now, retry: retry, since: map[string]time.Time{}}
}

// observe records what one call to provider (adapter kind) showed.
func (r *reach) observe(ctx context.Context, provider, kind, call string, err error) {
	switch {
	case ctx.Err() != nil:
		return // this processor gave up on the call: nothing learnt
	case err == nil:
		r.mu.Lock()
		since, was := r.since[provider]
		delete(r.since, provider)
		r.mu.Unlock()
		if was {
			r.metrics.ProviderUnreachable.WithLabelValues(provider).Set(0)
			r.log.Info("provider reachable again: its calls are answered", "provider", provider, "adapter", kind,
				"unreachable_for", r.now().Sub(since).Round(time.Millisecond).String())
		}
	case errors.Is(err, adapters.ErrNotInvoked) && !errors.Is(err, adapters.ErrInvalidRequest):
		r.mu.Lock()
		_, was := r.since[provider]
		if !was {
			r.since[provider] = r.now()
		}
		r.mu.Unlock()
		if !was {
			r.metrics.ProviderUnreachable.WithLabelValues(provider).Set(1)
			r.log.Warn("provider unreachable: nobody answers its requests (adapter nats: no connector serves actions.provider.<name>); "+
				"its dispatches wait and are retried for unavailable_retry, then end FAILED_BEFORE_DISPATCH (ADAPTER_UNAVAILABLE), nothing sent; "+
				"its reconciliation polls wait",
				"provider", provider, "adapter", kind, "call", call, "unavailable_retry", r.retry[provider].String())
		}
	}
}

// detail is /readyz's line per unreachable provider, sorted.
func (r *reach) detail() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.since))
	for p, since := range r.since {
		out = append(out, fmt.Sprintf("provider %s: unreachable for %s (nobody answers its requests); dispatches wait up to %s, then end ADAPTER_UNAVAILABLE",
			p, r.now().Sub(since).Round(time.Second), r.retry[p]))
	}
	slices.Sort(out)
	return out
}

// watch wraps a provider's adapter so that its calls feed r.
func (r *reach) watch(provider string, a adapters.Adapter) adapters.Adapter {
	return &watched{Adapter: a, provider: provider, r: r}
}

type watched struct {
	adapters.Adapter
	provider string
	r        *reach
}

func (w *watched) Dispatch(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
	reply, err := w.Adapter.Dispatch(ctx, req)
	w.r.observe(ctx, w.provider, w.Kind(), "dispatch", err)
	return reply, err
}

func (w *watched) Reconcile(ctx context.Context, req schema.ReconcileRequest) (schema.AdapterReply, error) {
	reply, err := w.Adapter.Reconcile(ctx, req)
	w.r.observe(ctx, w.provider, w.Kind(), "reconcile", err)
	return reply, err
}
