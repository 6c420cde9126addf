package demo

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// outcomes records every outcome by proposal.
type outcomes struct {
	mu   sync.Mutex
	cond *sync.Cond
	by   map[string][]schema.Outcome
}

func recordOutcomes(nc *nats.Conn, s subjects.Subjects) (*outcomes, error) {
	r := &outcomes{by: map[string][]schema.Outcome{}}
	r.cond = sync.NewCond(&r.mu)
	_, err := nc.Subscribe(s.HostOutcomes(hostName), func(m *nats.Msg) { // the host hears its own outcomes
		var o schema.Outcome
		if schema.Decode(m.Data, &o) != nil {
			return
		}
		r.mu.Lock()
		r.by[o.ProposalID] = append(r.by[o.ProposalID], o)
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	return r, nc.Flush()
}

func (r *outcomes) wait(pid string, n int, timeout time.Duration) (schema.Outcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	o, err := r.waitCtx(ctx, pid, n)
	if err != nil {
		return o, fmt.Errorf("%s: outcome %d did not arrive within %s (got %d)", pid, n, timeout, r.count(pid))
	}
	return o, nil
}

// waitCtx waits for the n-th (1-based) outcome of a proposal until ctx is
// done.
func (r *outcomes) waitCtx(ctx context.Context, pid string, n int) (schema.Outcome, error) {
	stop := context.AfterFunc(ctx, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
	defer stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.by[pid]) < n {
		if err := ctx.Err(); err != nil {
			return schema.Outcome{}, err
		}
		r.cond.Wait()
	}
	return r.by[pid][n-1], nil
}

func (r *outcomes) count(pid string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.by[pid])
}
