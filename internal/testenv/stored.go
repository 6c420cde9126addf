package testenv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/schema"
)

// What a test reads here comes from the streams, not from the Recorder: the
// Recorder's subscription misses what is published while its server is
// down, and a cluster test stops servers.

// PublishDurably publishes a proposal (or, with grant, a standalone grant)
// signed by kp, as PublishSigned and PublishGrant do, with msgID as its
// Nats-Msg-Id, retrying while a server is down or a leader moves: a retry
// of a publish that was stored is dropped by the stream's duplicate window.
func (e *Env) PublishDurably(t testing.TB, v any, kp nkeys.KeyPair, grant bool, msgID string) {
	t.Helper()
	js, m := e.durable(t, v, kp, grant, msgID)
	Retry(t, func(ctx context.Context) error {
		_, err := js.PublishMsg(ctx, m)
		return err
	})
}

// TryPublishDurably is one try of PublishDurably, waiting at most
// timeout for the PubAck: an error leaves the publish unknown (stored or
// not), for PublishDurably to send again under the same msgID.
func (e *Env) TryPublishDurably(t testing.TB, v any, kp nkeys.KeyPair, grant bool, msgID string, timeout time.Duration) error {
	t.Helper()
	js, m := e.durable(t, v, kp, grant, msgID)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := js.PublishMsg(ctx, m)
	return err
}

// durable is PublishDurably's message and the JetStream it goes through.
func (e *Env) durable(t testing.TB, v any, kp nkeys.KeyPair, grant bool, msgID string) (jetstream.JetStream, *nats.Msg) {
	t.Helper()
	body := Body(t, v)
	host := e.HostOf(t, kp)
	subject := e.Subjects.Proposal(host)
	if grant {
		subject = e.Subjects.Grant(host)
	}
	m := nats.NewMsg(subject)
	m.Data = body
	for k, v := range Sign(t, kp, body) {
		m.Header[k] = v
	}
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	js := e.JS
	if e.Auth {
		js = e.jsAs(t, kp)
	}
	return js, m
}

// StoredOutcome returns the last outcome the outcomes stream holds for a
// proposal (id as for Ref); found is false when there is none yet or the
// stream could not be read within APITimeout.
func (e *Env) StoredOutcome(t testing.TB, id string) (o schema.Outcome, found bool) {
	t.Helper()
	ref := Ref(id)
	ctx, cancel := context.WithTimeout(context.Background(), APITimeout)
	defer cancel()
	st, err := e.JS.Stream(ctx, e.Subjects.OutcomesStream())
	var m *jetstream.RawStreamMsg
	if err == nil {
		m, err = st.GetLastMsgForSubject(ctx, e.Subjects.Outcome(ref.Host, ref.ProposalID))
	}
	if err != nil {
		if !errors.Is(err, jetstream.ErrMsgNotFound) && !errors.Is(err, context.DeadlineExceeded) {
			t.Logf("testenv: reading the outcome of %s: %v", id, err)
		}
		return o, false
	}
	if err := schema.Decode(m.Data, &o); err != nil {
		t.Fatalf("testenv: stored outcome of %s: %v", id, err)
	}
	return o, true
}

// WaitStored waits until the last stored outcome of a proposal meets ok and
// returns it; the test fails after timeout.
func (e *Env) WaitStored(t testing.TB, id string, ok func(schema.Outcome) bool, timeout time.Duration) schema.Outcome {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		o, found := e.StoredOutcome(t, id)
		if found && ok(o) {
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: %s: no stored outcome as wanted within %s (last: %s)", id, timeout, describe(o, found))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// IsTerminal is met by a terminal outcome (for WaitStored).
func IsTerminal(o schema.Outcome) bool { return o.Terminal }

// IsKind is met by an outcome of kind (for WaitStored).
func IsKind(kind schema.Kind) func(schema.Outcome) bool {
	return func(o schema.Outcome) bool { return o.Kind == kind }
}

func describe(o schema.Outcome, found bool) string {
	if !found {
		return "none"
	}
	codes := make([]string, len(o.Incidents))
	for i, in := range o.Incidents {
		codes[i] = string(in.Phase) + "/" + string(in.Code)
	}
	return fmt.Sprintf("%s %v", o.Kind, codes)
}

// StoredHistory returns every outcome the outcomes stream holds, by
// proposal (id as for Ref: "<proposal_id>" for the default host, else
// "<h>/<proposal_id>"), each proposal's in the order they were stored.
// It reads the whole stream with an ordered consumer, retrying while a
// server is down or a leader moves.
func (e *Env) StoredHistory(t testing.TB) map[string][]schema.Outcome {
	t.Helper()
	var out map[string][]schema.Outcome
	Retry(t, func(ctx context.Context) error {
		out = map[string][]schema.Outcome{}
		c, err := e.JS.OrderedConsumer(ctx, e.Subjects.OutcomesStream(), jetstream.OrderedConsumerConfig{})
		if err != nil {
			return err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		for left := info.NumPending; left > 0; {
			batch, err := c.Fetch(int(min(left, 1000)), jetstream.FetchMaxWait(APITimeout))
			if err != nil {
				return err
			}
			n := 0
			for m := range batch.Messages() {
				n++
				var o schema.Outcome
				if err := schema.Decode(m.Data(), &o); err != nil {
					return fmt.Errorf("stored outcome on %s: %w", m.Subject(), err)
				}
				h, _, _ := e.Subjects.ParseOutcome(m.Subject())
				id := o.ProposalID
				if h != HostName {
					id = h + "/" + id
				}
				out[id] = append(out[id], o)
			}
			if err := batch.Error(); err != nil {
				return err
			}
			if n == 0 {
				return errors.New("the outcomes stream stopped delivering")
			}
			left -= uint64(n)
		}
		return nil
	})
	return out
}
