package testenv

import (
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// StageEnvelopes waits until at least want hand-offs were published to a
// stage (envelopes on its proposal subjects; timers are skipped), then
// returns every one, oldest first, each once however often it was
// published (by its Nats-Msg-Id). Each must decode strictly and sit on its
// own proposal's subject. Stage streams hold work, not history — a
// hand-off goes once its stage acked it — so the Env records hand-offs as
// they are published, from its start: this tells what reached a stage,
// ever.
func (e *Env) StageEnvelopes(t testing.TB, stage string, want int) []schema.Envelope {
	t.Helper()
	WaitFor(t, fmt.Sprintf("%d hand-offs published to %s", want, stage), func() bool { return len(e.handOffs.of(stage)) >= want })
	msgs := e.handOffs.of(stage)
	out := make([]schema.Envelope, 0, len(msgs))
	for _, m := range msgs {
		var env schema.Envelope
		if err := schema.DecodeEnvelope(m.Data, &env); err != nil {
			t.Fatalf("%s hand-off does not decode strictly: %v", stage, err)
		}
		if want := e.Subjects.Stage(stage, subjects.KindProposal, subjects.ProposalToken(env.Host, env.Proposal.ProposalID)); m.Subject != want {
			t.Errorf("hand-off for %s on %s", env.Proposal.ProposalID, m.Subject)
		}
		out = append(out, env)
	}
	return out
}

// handOffLog records every hand-off published to a stage, once per
// Nats-Msg-Id.
type handOffLog struct {
	mu   sync.Mutex
	seen map[string]bool
	by   map[string][]*nats.Msg
}

// recordHandOffs subscribes nc (an identity that may read internal
// subjects) to every stage's hand-offs until the test ends.
func recordHandOffs(t testing.TB, nc *nats.Conn, s subjects.Subjects) *handOffLog {
	t.Helper()
	l := &handOffLog{seen: map[string]bool{}, by: map[string][]*nats.Msg{}}
	sub, err := nc.Subscribe(s.Prefix()+".stage.*."+subjects.KindProposal+".>", func(m *nats.Msg) {
		stage, _, _, ok := s.ParseStage(m.Subject)
		if !ok {
			return
		}
		id := m.Header.Get(jetstream.MsgIDHeader)
		l.mu.Lock()
		defer l.mu.Unlock()
		if id != "" && l.seen[id] {
			return
		}
		l.seen[id] = true
		l.by[stage] = append(l.by[stage], m)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return l
}

func (l *handOffLog) of(stage string) []*nats.Msg {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*nats.Msg(nil), l.by[stage]...)
}

// ProposalIDs lists the proposal ids of envelopes, in order.
func ProposalIDs(envs []schema.Envelope) []string {
	ids := make([]string, len(envs))
	for i, e := range envs {
		ids[i] = e.Proposal.ProposalID
	}
	return ids
}
