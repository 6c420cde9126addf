package testenv

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/jsonschema"
	"github.com/portcullis/portcullis/subjects"
)

// Recorder collects every outcome and incident event published under a
// prefix, decoding each strictly and validating it against its JSON Schema
// (schema/jsonschema): an outcome or event with a field the contract does
// not name, or that breaks the schema, fails the test.
type Recorder struct {
	t    testing.TB
	mu   sync.Mutex
	cond *sync.Cond

	outcomes map[schema.ProposalRef][]schema.Outcome
	events   []schema.IncidentEvent
	raw      [][]byte
	nc       *nats.Conn
	subs     []*nats.Subscription
}

// Record subscribes to outcomes and incidents on nc until the test ends.
func Record(t testing.TB, nc *nats.Conn, s subjects.Subjects) *Recorder {
	t.Helper()
	r := &Recorder{t: t, nc: nc, outcomes: map[schema.ProposalRef][]schema.Outcome{}}
	r.cond = sync.NewCond(&r.mu)
	v, err := jsonschema.Default()
	if err != nil {
		t.Fatal(err)
	}
	sub1, err := nc.Subscribe(s.Outcomes(), func(m *nats.Msg) {
		var o schema.Outcome
		err := json.Unmarshal(m.Data, &o, json.RejectUnknownMembers(true))
		r.mu.Lock()
		defer r.mu.Unlock()
		r.raw = append(r.raw, m.Data)
		if err != nil {
			t.Errorf("outcome on %s does not decode strictly: %v: %s", m.Subject, err, m.Data)
			return
		}
		if err := v.Validate(jsonschema.Outcome, m.Data); err != nil {
			t.Errorf("outcome on %s breaks its schema: %v\n%s", m.Subject, err, m.Data)
		}
		h, pid, ok := s.ParseOutcome(m.Subject)
		if !ok || pid != o.ProposalID {
			t.Errorf("outcome for %s published on %s", o.ProposalID, m.Subject)
		}
		o.Host = h
		ref := o.To()
		r.outcomes[ref] = append(r.outcomes[ref], o)
		r.cond.Broadcast()
	})
	if err != nil {
		t.Fatal(err)
	}
	sub2, err := nc.Subscribe(s.Incidents(), func(m *nats.Msg) {
		var e schema.IncidentEvent
		err := json.Unmarshal(m.Data, &e, json.RejectUnknownMembers(true))
		r.mu.Lock()
		defer r.mu.Unlock()
		r.raw = append(r.raw, m.Data)
		if err != nil {
			t.Errorf("incident event does not decode strictly: %v: %s", err, m.Data)
			return
		}
		if err := v.Validate(jsonschema.IncidentEvent, m.Data); err != nil {
			t.Errorf("incident event on %s breaks its schema: %v\n%s", m.Subject, err, m.Data)
		}
		if m.Subject != s.Incident(string(e.Phase)) {
			t.Errorf("incident of phase %s published on %s", e.Phase, m.Subject)
		}
		r.events = append(r.events, e)
		r.cond.Broadcast()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	r.subs = []*nats.Subscription{sub1, sub2}
	t.Cleanup(func() {
		for _, s := range r.subs {
			_ = s.Unsubscribe()
		}
	})
	return r
}

// Flush waits until the Recorder has handled every outcome and event the
// server sent it so far: everything published (and PubAcked) before Flush
// was called is then in Outcomes and Events. Env.Quiesce ends with it. The
// test fails after WaitTimeout.
func (r *Recorder) Flush(t testing.TB) {
	t.Helper()
	r.FlushWithin(t, WaitTimeout)
}

// FlushWithin is Flush with its own timeout.
func (r *Recorder) FlushWithin(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	// The server queues a message for this connection as it routes it:
	// an incident event as it is published, an outcome as the outcomes
	// stream republishes it once stored, before the stream's PubAck (one
	// queue, in order) — so the PONG answering this flush comes after
	// every message PubAcked before it (on one server).
	if err := r.nc.FlushTimeout(max(timeout, time.Millisecond)); err != nil {
		t.Fatalf("testenv: Recorder: flush: %v", err)
	}
	// Each subscription counts a message as pending until its handler
	// returned.
	for _, s := range r.subs {
		for {
			n, _, err := s.Pending()
			if err != nil {
				t.Fatalf("testenv: Recorder: %v", err)
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("testenv: Recorder: %d messages on %s still unhandled after %s", n, s.Subject, timeout)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// A Cond selects outcomes to wait for.
type Cond func(outs []schema.Outcome) bool

// Terminal is met once an outcome is terminal.
func Terminal(outs []schema.Outcome) bool {
	for _, o := range outs {
		if o.Terminal {
			return true
		}
	}
	return false
}

// Kind is met once an outcome of that kind arrived.
func Kind(kind schema.Kind) Cond {
	return func(outs []schema.Outcome) bool {
		for _, o := range outs {
			if o.Kind == kind {
				return true
			}
		}
		return false
	}
}

// Count is met once n outcomes arrived.
func Count(n int) Cond { return func(outs []schema.Outcome) bool { return len(outs) >= n } }

// WaitTimeout bounds every Wait, WaitFor and Quiesce (the *Within
// variants take their own bound).
const WaitTimeout = 20 * time.Second

// Ref names a proposal for the Recorder: "<h>/<proposal_id>", or a bare
// proposal id of the default host (HostName).
func Ref(id string) schema.ProposalRef {
	if h, pid, ok := strings.Cut(id, "/"); ok {
		return schema.ProposalRef{Host: h, ProposalID: pid}
	}
	return schema.ProposalRef{Host: HostName, ProposalID: id}
}

// Wait blocks until cond holds for the proposal's outcomes and returns the
// last one; the test fails after WaitTimeout. id is as for Ref.
func (r *Recorder) Wait(t testing.TB, id string, cond Cond) schema.Outcome {
	t.Helper()
	outs := r.WaitAll(t, id, cond)
	return outs[len(outs)-1]
}

// WaitAll is Wait returning every outcome of the proposal so far.
func (r *Recorder) WaitAll(t testing.TB, id string, cond Cond) []schema.Outcome {
	t.Helper()
	return r.WaitAllWithin(t, id, cond, WaitTimeout)
}

// WaitAllWithin is WaitAll with its own timeout (a crash test waits for a
// redelivery after the consumer's ack wait).
func (r *Recorder) WaitAllWithin(t testing.TB, id string, cond Cond, timeout time.Duration) []schema.Outcome {
	t.Helper()
	ref := Ref(id)
	var outs []schema.Outcome
	r.waitLocked(t, timeout, func() bool {
		outs = r.outcomes[ref]
		return len(outs) > 0 && cond(outs)
	}, func() string {
		return fmt.Sprintf("proposal %s: condition not met within %s; outcomes so far: %+v", ref, timeout, outs)
	})
	return append([]schema.Outcome(nil), outs...)
}

// waitLocked blocks until met (called with r.mu held) holds, and fails
// the test with failure() (also called with r.mu held) after timeout.
func (r *Recorder) waitLocked(t testing.TB, timeout time.Duration, met func() bool, failure func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() {
		r.mu.Lock()
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	defer timer.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for !met() {
		if time.Now().After(deadline) {
			t.Fatal(failure())
		}
		r.cond.Wait()
	}
}

// Outcomes returns the proposal's outcomes so far (id as for Ref).
func (r *Recorder) Outcomes(id string) []schema.Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]schema.Outcome(nil), r.outcomes[Ref(id)]...)
}

// Count returns how many outcomes arrived for any proposal.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, outs := range r.outcomes {
		n += len(outs)
	}
	return n
}

// Events returns every incident event so far.
func (r *Recorder) Events() []schema.IncidentEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]schema.IncidentEvent(nil), r.events...)
}

// WaitEvent blocks until an incident event with that phase and code arrived.
func (r *Recorder) WaitEvent(t testing.TB, phase schema.Phase, code schema.Code) schema.IncidentEvent {
	t.Helper()
	return r.WaitEvents(t, phase, code, 1)[0]
}

// WaitEvents blocks until at least n incident events with that phase and
// code arrived, and returns them.
func (r *Recorder) WaitEvents(t testing.TB, phase schema.Phase, code schema.Code, n int) []schema.IncidentEvent {
	t.Helper()
	var got []schema.IncidentEvent
	r.waitLocked(t, WaitTimeout, func() bool {
		got = got[:0]
		for _, e := range r.events {
			if e.Phase == phase && e.Code == code {
				got = append(got, e)
			}
		}
		return len(got) >= n
	}, func() string {
		return fmt.Sprintf("%d incident events %s/%s within %s, want %d; events: %+v", len(got), phase, code, WaitTimeout, n, r.events)
	})
	return got
}

// CountEvents returns how many incident events with that phase and code
// arrived so far.
func (r *Recorder) CountEvents(phase schema.Phase, code schema.Code) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Phase == phase && e.Code == code {
			n++
		}
	}
	return n
}

// Raw returns the bytes of every outcome and event received, for privacy
// checks.
func (r *Recorder) Raw() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.raw...)
}

// IDs names proposals as Ref reads them: a bare id for HostName's, else
// "<h>/<proposal_id>".
func IDs(refs []schema.ProposalRef) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.ProposalID
		if r.Host != HostName {
			out[i] = r.String()
		}
	}
	return out
}
