package pebble_test

import (
	"testing"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/kvtest"

	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/portcullis/portcullis/schema"
)

func openKV(t *testing.T, dir string) *pebble.Store {
	t.Helper()
	s, err := pebble.Open(dir, pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestApprovals(t *testing.T) {
	kvtest.RunApprovals(t, func(t *testing.T) kv.Approvals {
		s := openKV(t, t.TempDir())
		t.Cleanup(func() { s.Close() })
		p, err := pebble.NewApprovals(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
}

// The count of parked proposals survives a restart, and the expiry timer
// lives in kv's timer table, where the scheduler finds it.
func TestApprovalsCountAndTimers(t *testing.T) {
	dir := t.TempDir()
	s := openKV(t, dir)
	p, err := pebble.NewApprovals(s)
	if err != nil {
		t.Fatal(err)
	}
	refs := []schema.ProposalRef{{Host: "h", ProposalID: "a"}, {Host: "h", ProposalID: "b"}, {Host: "g", ProposalID: "a"}}
	for _, ref := range refs {
		r := kv.Approval{Host: ref.Host, ProposalID: ref.ProposalID, Fingerprint: "sha256:x", State: kv.StateParked, ExpiresAtMs: 600}
		tm := kv.ExpiryTimer("subj", ref, 600, kv.ApprovalTimerID(ref))
		if err := p.Commit(ref, kv.ApprovalWrites{Record: &r, Timer: &tm}); err != nil {
			t.Fatal(err)
		}
	}
	if tm, found, err := s.Timer("approval/h.a"); err != nil || !found || tm.DueMs != 600 || string(tm.Data) != "h.a" || tm.Subject != "subj" || tm.MsgID != "approval/h.a" {
		t.Fatalf("timer = %+v %v %v", tm, found, err)
	}
	// Re-armed: replaced, not added.
	re := kv.ExpiryTimer("subj", refs[0], 700, "approval/h.a/rearmed/AUTH/9")
	if err := p.Commit(refs[0], kv.ApprovalWrites{From: kv.StateParked, Timer: &re}); err != nil {
		t.Fatal(err)
	}
	if due, _ := s.DueTimers(650, 10); len(due) != 2 {
		t.Errorf("due at 650: %+v", due)
	}
	// Decided: the timer goes with the decision.
	r, _, _ := p.Load(refs[0])
	r.State, r.DecidedBy = kv.StatePermitted, "GRANTS/1"
	if err := p.Commit(refs[0], kv.ApprovalWrites{From: kv.StateParked, Record: &r, CancelTimer: true}); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := s.Timer("approval/h.a"); found {
		t.Error("the timer outlived the decision")
	}
	if p.Count() != 2 {
		t.Fatalf("Count = %d", p.Count())
	}
	s.Close()

	s = openKV(t, dir)
	defer s.Close()
	p, err = pebble.NewApprovals(s)
	if err != nil {
		t.Fatal(err)
	}
	if p.Count() != 2 {
		t.Errorf("Count after reopening = %d", p.Count())
	}
}
