package engine

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/portcullis/portcullis/stages"
)

// credits bound each host's proposals inside the pipeline
// (streams.host_pipeline_max_msgs): admission and the grants consumer take
// a host's next message only while the host has fewer than that many in
// the stage streams every host shares. The rest wait in the host's own
// ingress streams — back-pressure on that host alone, where its budget
// (ingress_max_bytes, ingress_max_msgs) refuses what does not fit — and
// no host's backlog can fill a stage stream another host's hand-offs need.
//
// The count is the JetStream state of the host's own consumers on the
// stage streams (each one's messages not yet delivered plus those awaiting
// an ack): what the streams hold for the host, whichever processor put it
// there, before or after any crash — never a count of this processor's
// alone. It is read again at most every creditsFresh, and at once
// (creditsRetry apart) while the host is at its bound; between two reads
// the messages this processor let through since the last read began are
// counted on top. So the bound holds but for the proposals other
// processors let through within one read, and those admission is
// handling at the moment of a read (at most its max in flight each).
type credits struct {
	js    jetstream.JetStream
	limit int64
	// consumers are each host's consumers on the stage streams.
	consumers map[string][]stages.Source
	log       *slog.Logger
	// waiting counts the hosts at their bound (actions_hosts_at_pipeline_bound).
	waiting prometheus.Gauge

	mu    sync.Mutex
	hosts map[string]*hostCredits
}

// How often a host's count is read: at least every creditsFresh while it
// sends, every creditsRetry while it waits at its bound.
const (
	creditsFresh = time.Second
	creditsRetry = 50 * time.Millisecond
)

// hostCredits is what credits knows of one host. mu is held through a
// read, so that a host's fetchers (admission's, grants') read once.
type hostCredits struct {
	mu     sync.Mutex
	known  bool
	at     time.Time // when the last read began
	inside int64     // the host's messages in the stage streams, then
	passed int64     // messages let through since at
	bound  bool      // at the bound, as last seen
}

func newCredits(js jetstream.JetStream, limit int64, consumers []Consumer, log *slog.Logger, waiting prometheus.Gauge) *credits {
	c := &credits{js: js, limit: limit, consumers: map[string][]stages.Source{}, log: log, waiting: waiting, hosts: map[string]*hostCredits{}}
	for _, r := range consumers {
		if !r.Internal {
			continue
		}
		for _, src := range r.Sources {
			if src.Host != "" {
				c.consumers[src.Host] = append(c.consumers[src.Host], src)
			}
		}
	}
	return c
}

// admit is stages.RunnerConfig.Admit: it returns once src's host has room
// in the pipeline (a source of several hosts' at once), or with ctx's
// error.
func (c *credits) admit(ctx context.Context, src stages.Source) error {
	if src.Host == "" || len(c.consumers[src.Host]) == 0 {
		return nil
	}
	h := c.host(src.Host)
	for {
		h.mu.Lock()
		age := time.Since(h.at)
		if h.known && age < creditsFresh && h.inside+h.passed < c.limit {
			h.passed++
			c.atBound(src.Host, h, false)
			h.mu.Unlock()
			return nil
		}
		if !h.known || age >= creditsRetry {
			start := time.Now()
			if n, ok := c.read(ctx, src.Host); ok {
				h.known, h.at, h.inside, h.passed = true, start, n, 0
				if n < c.limit {
					h.mu.Unlock()
					continue
				}
			}
		}
		if h.known && h.inside+h.passed >= c.limit {
			c.atBound(src.Host, h, true)
		}
		h.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(creditsRetry):
		}
	}
}

// atBound records whether host h is at its bound (h.mu held).
func (c *credits) atBound(host string, h *hostCredits, bound bool) {
	if h.bound == bound {
		return
	}
	h.bound = bound
	if bound {
		c.waiting.Inc()
		c.log.Info("a host's proposals inside the pipeline are at its bound: its next proposals and grants wait in its own ingress", "host", host, "host_pipeline_max_msgs", c.limit)
		return
	}
	c.waiting.Dec()
	c.log.Info("a host's proposals inside the pipeline are below its bound again", "host", host)
}

func (c *credits) host(name string) *hostCredits {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.hosts[name]
	if h == nil {
		h = &hostCredits{}
		c.hosts[name] = h
	}
	return h
}

// read sums the messages host's consumers on the stage streams have not
// delivered or await acks for; false if JetStream did not say.
func (c *credits) read(ctx context.Context, host string) (int64, bool) {
	var n int64
	for _, src := range c.consumers[host] {
		rctx, cancel := context.WithTimeout(ctx, lagTimeout)
		cons, err := c.js.Consumer(rctx, src.Stream, src.Durable)
		cancel()
		if err != nil {
			return 0, false
		}
		info := cons.CachedInfo()
		n += int64(info.NumPending) + int64(info.NumAckPending)
	}
	return n, true
}
