package grounding_test

import (
	"context"
	"testing"

	"github.com/portcullis/portcullis/kv"

	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/grounding"
	"github.com/portcullis/portcullis/subjects"
)

// Grounding's give-up is claimed in the proposal's approval record before
// it is announced (issue 19): if authorization has a record of the
// proposal — another delivery of the hand-off was grounded and handed on —
// the give-up publishes nothing and that decision stands; otherwise the
// give-up's record makes a hand-off that arrives later change nothing.
func TestGiveUpClaimsTheProposalsEnd(t *testing.T) {
	store, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ap, err := pebble.NewApprovals(store)
	if err != nil {
		t.Fatal(err)
	}
	subj := subjects.Default()
	st := &grounding.Stage{Route: stages.Route{Subjects: subj, Self: subjects.StageGrounding, Next: subjects.StageAuthorization},
		Clock: stages.SystemClock{}, Checkpoints: store, MaxCandidates: 32, Approvals: ap}
	in := func(id string, seq uint64) *stages.Input {
		return &stages.Input{Subject: subj.Stage(subjects.StageGrounding, subjects.KindProposal, "h."+id), Data: []byte("{}"),
			Stream: subj.StageStream(subjects.StageGrounding), StreamSeq: seq, Delivered: 9}
	}
	ctx := context.Background()

	// Nothing decided: the give-up is recorded, then announced.
	r, err := st.GiveUp(ctx, in("p-free", 1), stages.ErrRetriesExhausted)
	if err != nil || len(r.Outcomes) != 1 || r.Outcomes[0].Incidents[0].Code != schema.CodeProcessingFailed {
		t.Fatalf("give-up: %+v, %v", r, err)
	}
	ref := schema.ProposalRef{Host: "h", ProposalID: "p-free"}
	if rec, found, err := ap.Load(ref); err != nil || !found || rec.State != kv.StateDenied || rec.Code != schema.CodeProcessingFailed {
		t.Fatalf("record %+v, %v, %v", rec, found, err)
	}
	// Its retry (an answer lost) announces it again; nothing else does.
	if r, err := st.GiveUp(ctx, in("p-free", 1), stages.ErrRetriesExhausted); err != nil || len(r.Outcomes) != 1 {
		t.Errorf("the same give-up again: %+v, %v", r, err)
	}
	if r, err := st.GiveUp(ctx, in("p-free", 2), stages.ErrRetriesExhausted); err != nil || len(r.Outcomes) != 0 {
		t.Errorf("another delivery's give-up: %+v, %v", r, err)
	}

	// Authorization decided (parked) another copy: the give-up is silent.
	parked := schema.ProposalRef{Host: "h", ProposalID: "p-parked"}
	rec := kv.Approval{Host: "h", ProposalID: "p-parked", State: kv.StateParked, Seq: 4, ArrivedAtMs: 1, ExpiresAtMs: 2}
	if err := ap.Commit(parked, kv.ApprovalWrites{From: kv.StateNone, Record: &rec}); err != nil {
		t.Fatal(err)
	}
	if r, err := st.GiveUp(ctx, in("p-parked", 3), stages.ErrRetriesExhausted); err != nil || len(r.Outcomes) != 0 || len(r.Events) != 0 {
		t.Errorf("give-up after authorization parked the proposal: %+v, %v; want nothing", r, err)
	}
}
