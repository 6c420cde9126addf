package testenv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// StageEnvelopes waits until a stage's stream holds at least want hand-offs
// (envelopes on its proposal subjects; timer messages are skipped), then
// returns every one, oldest first. Each must decode strictly and sit on its
// own proposal's subject. Stage streams keep messages after they are
// consumed, so this tells what reached a stage, ever.
func (e *Env) StageEnvelopes(t testing.TB, stage string, want int) []schema.Envelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*WaitTimeout)
	defer cancel()
	stream, err := e.JS.Stream(ctx, e.Subjects.StageStream(stage))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(WaitTimeout)
	for {
		out := e.readEnvelopes(t, ctx, stream, stage)
		if len(out) >= want {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s stream holds %d hand-offs, want %d", stage, len(out), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *Env) readEnvelopes(t testing.TB, ctx context.Context, stream jetstream.Stream, stage string) []schema.Envelope {
	t.Helper()
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []schema.Envelope
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, kind, _, ok := e.Subjects.ParseStage(m.Subject); !ok || kind != subjects.KindProposal {
			continue
		}
		var env schema.Envelope
		if err := schema.DecodeEnvelope(m.Data, &env); err != nil {
			t.Fatalf("%s hand-off %d does not decode strictly: %v", stage, seq, err)
		}
		if want := e.Subjects.Stage(stage, subjects.KindProposal, subjects.ProposalToken(env.Host, env.Proposal.ProposalID)); m.Subject != want {
			t.Errorf("hand-off for %s on %s", env.Proposal.ProposalID, m.Subject)
		}
		out = append(out, env)
	}
	return out
}

// ProposalIDs lists the proposal ids of envelopes, in order.
func ProposalIDs(envs []schema.Envelope) []string {
	ids := make([]string, len(envs))
	for i, e := range envs {
		ids[i] = e.Proposal.ProposalID
	}
	return ids
}
