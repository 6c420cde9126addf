package history

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// ObserveFake records every request the fake provider receives.
func (r *Recorder) ObserveFake(f *adapters.Fake) {
	f.Observe(func(q adapters.FakeRequest) {
		e := Event{Op: OpDispatch, Call: q.At, Key: q.Key, Effect: q.Effect, Late: q.Late}
		if q.Method == adapters.MethodReconcile {
			e = Event{Op: OpReconcile, Call: q.At, Key: q.Key, Attempt: q.AttemptID}
		}
		r.Add(e)
	})
}

// ReadReceipts asks the operator API for key's receipts and records the
// read (a failed one is recorded with Err: its result is unknown).
func (r *Recorder) ReadReceipts(ctx context.Context, c *admin.Client, key string) (*admin.Receipts, error) {
	call := r.now()
	rs, err := c.Receipts(ctx, "sha256:"+key)
	e := Event{Op: OpReadReceipts, Call: call, Return: r.now(), Key: key}
	switch {
	case err != nil:
		e.Err = err.Error()
	default:
		e.Receipts = []string{}
		for _, rc := range rs.Receipts {
			e.Receipts = append(e.Receipts, rc.ReceiptID)
			e.Statuses = append(e.Statuses, rc.Status)
		}
	}
	r.Add(e)
	return rs, err
}

// ReadActivity reads the newest page of the operator's activity list and
// records, for each intent in it, the status its snapshot shows.
func (r *Recorder) ReadActivity(ctx context.Context, c *admin.Client, limit int) (*admin.ActivityList, error) {
	call := r.now()
	l, err := c.Activity(ctx, limit, 0)
	ret := r.now()
	if err != nil {
		return nil, err // a failed list names no intent: nothing to check
	}
	for _, a := range l.Entries {
		r.Add(Event{Op: OpReadActivity, Call: call, Return: ret, Key: strings.TrimPrefix(a.Fingerprint, "sha256:"), Status: a.Status})
	}
	return l, nil
}

// Resolve settles key through the operator API and records the call.
func (r *Recorder) Resolve(ctx context.Context, c *admin.Client, key string, present bool, evidence string) (*admin.Resolved, error) {
	call := r.now()
	res, err := c.Resolve(ctx, "sha256:"+key, present, evidence)
	e := Event{Op: OpResolve, Call: call, Return: r.now(), Key: key, Present: present}
	if err != nil {
		e.Err = err.Error()
	}
	r.Add(e)
	return res, err
}

// ReadOutcomes reads every outcome the outcomes stream holds, each with
// its stored time, retrying until ctx ends while a server is down or a
// leader moves.
func ReadOutcomes(ctx context.Context, js jetstream.JetStream, s subjects.Subjects) ([]Event, error) {
	for {
		events, err := readOutcomes(ctx, js, s)
		if err == nil {
			return events, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("history: reading the outcomes: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func readOutcomes(ctx context.Context, js jetstream.JetStream, s subjects.Subjects) ([]Event, error) {
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := js.OrderedConsumer(actx, s.OutcomesStream(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	info, err := c.Info(actx)
	if err != nil {
		return nil, err
	}
	var out []Event
	for left := info.NumPending; left > 0; {
		batch, err := c.Fetch(int(min(left, 1000)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			var o schema.Outcome
			if err := schema.Decode(m.Data(), &o); err != nil {
				return nil, fmt.Errorf("stored outcome on %s: %w", m.Subject(), err)
			}
			h, _, _ := s.ParseOutcome(m.Subject())
			o.Host = h
			out = append(out, Event{Op: OpOutcome, Call: meta.Timestamp, Return: meta.Timestamp, Proposal: o.To(), Outcome: &o, Seq: meta.Sequence.Stream})
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, errors.New("the outcomes stream stopped delivering")
		}
		left -= uint64(n)
	}
	return out, nil
}
