package engine

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/subjects"
)

// historyBudget keeps each host's outcomes in the outcomes stream within
// its budget (streams.host_history_max_msgs): the stream is one for every
// host (SPEC §2.8 names it, and hosts read their outcomes from it by direct
// get), and it drops its oldest messages when full — so without a budget a
// host that produced outcomes fast enough would push every other host's
// out. Once a host has published a sixteenth of its budget since its last
// trim, its own oldest outcomes beyond the budget are purged (a filtered
// purge that keeps the newest: JetStream does the counting), in the
// background, one trim per host at a time. Processors trim independently;
// a trim is idempotent.
type historyBudget struct {
	js     jetstream.JetStream
	subj   subjects.Subjects
	budget uint64
	log    *slog.Logger

	mu       sync.Mutex
	since    map[string]uint64 // outcomes published since the host's last trim
	trimming map[string]bool
	wg       sync.WaitGroup
}

func newHistoryBudget(js jetstream.JetStream, subj subjects.Subjects, budget int64, log *slog.Logger) *historyBudget {
	return &historyBudget{js: js, subj: subj, budget: uint64(max(budget, 1)), log: log, since: map[string]uint64{}, trimming: map[string]bool{}}
}

// published counts an outcome stored for host (stages.Deps.OnOutcome).
func (b *historyBudget) published(host string) {
	b.mu.Lock()
	b.since[host]++
	due := b.since[host] >= max(b.budget/16, 1) && !b.trimming[host]
	if due {
		b.since[host], b.trimming[host] = 0, true
	}
	b.mu.Unlock()
	if due {
		b.wg.Go(func() { b.trim(host) })
	}
}

// trim purges host's outcomes beyond its budget, oldest first.
func (b *historyBudget) trim(host string) {
	defer func() {
		b.mu.Lock()
		b.trimming[host] = false
		b.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := b.js.Stream(ctx, b.subj.OutcomesStream())
	if err == nil {
		err = st.Purge(ctx, jetstream.WithPurgeSubject(b.subj.HostOutcomes(host)), jetstream.WithPurgeKeep(b.budget))
	}
	if err != nil {
		// The next sixteenth of the budget tries again.
		b.log.Warn("outcome history of a host not trimmed to its budget", "host", host, "err", err)
	}
}

// wait waits for the trims under way.
func (b *historyBudget) wait() { b.wg.Wait() }
