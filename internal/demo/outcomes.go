package demo

import (
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
	deadline := time.Now().Add(timeout)
	t := time.AfterFunc(timeout, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
	defer t.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.by[pid]) < n {
		if time.Now().After(deadline) {
			return schema.Outcome{}, fmt.Errorf("%s: outcome %d did not arrive within %s (got %d)", pid, n, timeout, len(r.by[pid]))
		}
		r.cond.Wait()
	}
	return r.by[pid][n-1], nil
}
