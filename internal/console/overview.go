package console

import (
	"context"
	"sync"
	"time"

	"github.com/portcullis/portcullis/internal/admin"
)

// The overview asks status.get (every processor's readiness and stage
// counters) at most once a minSample; throughput is the difference of two
// samples at least minSample apart, summed over processors (each
// processor's counters are its own; one that restarted counts from zero).
// Consumer lag is the largest any processor last read (the consumers are
// shared: they agree but for when they read).

// minSample is the shortest time between two status requests.
const minSample = time.Second

type sampler struct {
	client *admin.Client
	now    func() time.Time

	mu         sync.Mutex
	prev, last *sample
}

type sample struct {
	at time.Time
	st *admin.Status
}

// overview is what the overview page shows.
type overview struct {
	Status *admin.Status
	// Interval is the time between the two samples the rates come from
	// (0: one sample so far, no rates yet).
	Interval time.Duration
	Stages   []stageRow
	Ready    int
	MaxRate  float64
}

// stageRow is one stage across processors.
type stageRow struct {
	Stage string
	// Rate is messages finished per second, RetryRate retried per second.
	Rate, RetryRate float64
	HasRate         bool
	// GaveUp and Rejected are totals since the processors started.
	GaveUp, Rejected uint64
	// Pending and AckPending are the consumer's lag.
	Pending, AckPending uint64
	// Consuming is how many processors' runners consume it, of Processors.
	Consuming, Processors int
}

// take returns the latest sample and the one before it, asking the
// processor when the latest is older than minSample.
func (s *sampler) take(ctx context.Context) (prev, last *sample, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.last != nil && now.Sub(s.last.at) < minSample {
		return s.prev, s.last, nil
	}
	st, err := s.client.Status(ctx)
	if err != nil {
		return nil, nil, err
	}
	if s.last != nil {
		s.prev = s.last
	}
	s.last = &sample{at: now, st: st}
	return s.prev, s.last, nil
}

func (s *sampler) overview(ctx context.Context) (*overview, error) {
	prev, last, err := s.take(ctx)
	if err != nil {
		return nil, err
	}
	return summarize(prev, last), nil
}

// summarize makes the overview of the latest sample, with rates against
// the previous one when there is one.
func summarize(prev, last *sample) *overview {
	o := &overview{Status: last.st}
	var before map[string]admin.ProcessorStatus
	if prev != nil {
		o.Interval = last.at.Sub(prev.at).Round(100 * time.Millisecond)
		before = map[string]admin.ProcessorStatus{}
		for _, p := range prev.st.Processors {
			before[p.ID] = p
		}
	}
	index := map[string]int{}
	for _, p := range last.st.Processors {
		if p.Ready {
			o.Ready++
		}
		old, seen := before[p.ID]
		for _, st := range p.Stages {
			i, ok := index[st.Stage]
			if !ok {
				i = len(o.Stages)
				index[st.Stage] = i
				o.Stages = append(o.Stages, stageRow{Stage: st.Stage})
			}
			row := &o.Stages[i]
			row.Processors++
			if st.Consuming {
				row.Consuming++
			}
			row.GaveUp += st.GaveUp
			row.Rejected += st.Rejected
			row.Pending = max(row.Pending, st.Pending)
			row.AckPending = max(row.AckPending, st.AckPending)
			if o.Interval <= 0 {
				continue
			}
			row.HasRate = true
			if !seen {
				continue // a processor new since the last sample has no baseline yet
			}
			var was admin.StageStatus
			for _, s := range old.Stages {
				if s.Stage == st.Stage {
					was = s
				}
			}
			secs := o.Interval.Seconds()
			row.Rate += float64(delta(was.Finished(), st.Finished())) / secs
			row.RetryRate += float64(delta(was.Retry, st.Retry)) / secs
		}
	}
	for _, r := range o.Stages {
		o.MaxRate = max(o.MaxRate, r.Rate)
	}
	return o
}

// delta is how much a counter grew; one that went back (its processor
// restarted with the same id) counts from zero.
func delta(was, is uint64) uint64 {
	if is < was {
		return is
	}
	return is - was
}
