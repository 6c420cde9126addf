package grounding_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/grounding"
	"github.com/portcullis/portcullis/subjects"
)

// TestSourceDecisionIsCheckpointed drives the handler directly (real
// server, real Pebble): a source that answers differently on every request
// is asked once per input, and a redelivery repeats the first decision.
func TestSourceDecisionIsCheckpointed(t *testing.T) {
	srv := testenv.StartServer(t, "")
	nc := testenv.Connect(t, srv)
	store, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	subj := subjects.Default()
	var asked atomic.Int32
	replies := []string{
		`{"candidates":[{"referent":"svc:payments-prod","source":"s","attributes":{"resource":"payments-api (production)"},"evidence_refs":[]}],"observation_ref":"catalog:1"}`,
		`{"candidates":[],"observation_ref":"catalog:2"}`,
	}
	sub, err := nc.Subscribe(subj.Candidates("flaky"), func(m *nats.Msg) {
		n := asked.Add(1)
		_ = m.Respond([]byte(replies[(n-1)%2]))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()

	st := &grounding.Stage{
		Route: stages.Route{Subjects: subj, Self: subjects.StageGrounding, Next: subjects.StageAuthorization}, Clock: stages.SystemClock{}, Checkpoints: store, MaxCandidates: 32,
		Source: &grounding.Source{Conn: nc, Subjects: subj, Timeout: 5 * time.Second},
	}
	p := sourced("prop-flaky", "flaky", "payments-api (production)")
	var prop schema.Proposal
	if err := schema.Decode(testenv.Body(t, p), &prop); err != nil {
		t.Fatal(err)
	}
	data := schema.MustMarshal(schema.Envelope{Schema: schema.SchemaEnvelope, Proposal: prop, Host: "h"})
	in := &stages.Input{
		Subject: subj.Stage(subjects.StageGrounding, subjects.KindProposal, "h.prop-flaky"),
		Data:    data, Stream: subj.StageStream(subjects.StageGrounding), StreamSeq: 7, Delivered: 1,
	}
	ctx := context.Background()
	first, err := st.Handle(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	in.Delivered = 2
	again, err := st.Handle(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if asked.Load() != 1 {
		t.Fatalf("source asked %d times for one input", asked.Load())
	}
	if len(first.Next) != 1 || len(again.Next) != 1 || string(first.Next[0].Data) != string(again.Next[0].Data) || len(again.Outcomes) != 0 {
		t.Fatalf("redelivery decided differently: %+v vs %+v", first, again)
	}
	// Another input (another sequence) is another decision: the source's
	// second answer, no candidates.
	in.StreamSeq = 8
	other, err := st.Handle(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if asked.Load() != 2 || len(other.Outcomes) != 1 || other.Outcomes[0].Incidents[0].Code != schema.CodeDiscriminatorMismatch {
		t.Fatalf("second input: asked %d, result %+v", asked.Load(), other)
	}
	// A failure is checkpointed too.
	again, err = st.Handle(ctx, in)
	if err != nil || asked.Load() != 2 || len(again.Outcomes) != 1 || again.Outcomes[0].Incidents[0].Code != schema.CodeDiscriminatorMismatch {
		t.Fatalf("redelivered failure: asked %d, %+v, %v", asked.Load(), again, err)
	}

	// Our own trouble (the connection closing) is retried, not blamed on
	// the source, and nothing is checkpointed.
	nc2 := testenv.Connect(t, srv)
	nc2.Close()
	st.Source.Conn = nc2
	in.StreamSeq = 9
	if _, err := st.Handle(ctx, in); err == nil || errors.Is(err, stages.ErrPermanent) || grounding.SourceFault(err) {
		t.Fatalf("closed connection: err = %v", err)
	}
	st.Source.Conn = nc
	res, err := st.Handle(ctx, in)
	if err != nil || asked.Load() != 3 || len(res.Next) != 1 {
		t.Fatalf("after reconnecting: asked %d, %+v, %v", asked.Load(), res, err)
	}
}

// FuzzHandle feeds arbitrary bytes to the handler as a grounding input:
// it never panics, and it ends in a hand-off, one grounding outcome, or a
// permanent error (which the runner turns into PROCESSING_FAILED).
func FuzzHandle(f *testing.F) {
	subj := subjects.Default()
	var prop schema.Proposal
	if err := schema.Decode(testenv.Body(f, testenv.Lumber("prop-fuzz")), &prop); err != nil {
		f.Fatal(err)
	}
	inline := schema.Envelope{Schema: schema.SchemaEnvelope, Proposal: prop, Host: "h"}
	prop.Grounding.Candidates = nil
	prop.Grounding.CandidateSource = "catalog"
	viaSource := schema.Envelope{Schema: schema.SchemaEnvelope, Proposal: prop, Host: "h"}
	// Both forms: the binary one stages write, the JSON of earlier versions.
	for _, s := range [][]byte{schema.EncodeEnvelope(&inline), schema.EncodeEnvelope(&viaSource),
		schema.MustMarshal(inline), schema.MustMarshal(viaSource), []byte(`{}`)} {
		f.Add(s)
		f.Add(s[:len(s)/2])
		f.Add(s[len(s)/2:])
	}
	store, err := pebble.Open(f.TempDir(), pebble.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { store.Close() })
	// A nil connection refuses every request: the source is unavailable.
	st := &grounding.Stage{
		Route: stages.Route{Subjects: subj, Self: subjects.StageGrounding, Next: subjects.StageAuthorization}, Clock: stages.SystemClock{}, Checkpoints: store, MaxCandidates: 4,
		Source: &grounding.Source{Subjects: subj, Timeout: time.Second},
	}
	seq := uint64(0)
	f.Fuzz(func(t *testing.T, data []byte) {
		seq++
		in := &stages.Input{Subject: subj.Stage(subjects.StageGrounding, subjects.KindProposal, "h.prop-fuzz"), Data: data, Stream: "S", StreamSeq: seq, Delivered: 1}
		res, err := st.Handle(context.Background(), in)
		if err != nil {
			if !errors.Is(err, stages.ErrPermanent) {
				t.Fatalf("transient error on bad input: %v", err)
			}
			return
		}
		switch {
		case len(res.Next) == 1 && len(res.Outcomes) == 0:
			var e schema.Envelope
			// The hand-off is in the binary form (the test pinned JSON before).
			if err := schema.DecodeEnvelope(res.Next[0].Data, &e); err != nil || !schema.IsBinaryEnvelope(res.Next[0].Data) ||
				e.Grounded == nil || e.Proposal.Grounding.Candidates != nil {
				t.Fatalf("bad hand-off: %v", err)
			}
		case len(res.Next) == 0 && len(res.Outcomes) == 1:
			inc := res.Outcomes[0].Incidents[0]
			if _, ok := schema.LookupCode(schema.PhaseGrounding, inc.Code); !ok || res.Outcomes[0].ProposalID != "prop-fuzz" {
				t.Fatalf("bad outcome %+v", res.Outcomes[0])
			}
		default:
			t.Fatalf("result %+v", res)
		}
	})
}
