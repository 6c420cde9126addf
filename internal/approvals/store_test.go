package approvals_test

import (
	"testing"

	"github.com/portcullis/portcullis/kv/pebble"

	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/approvals"
	"github.com/portcullis/portcullis/internal/approvals/approvalstest"
	"github.com/portcullis/portcullis/schema"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openKV(t *testing.T, dir string) *pebble.Store {
	t.Helper()
	s, err := pebble.Open(dir, pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPebble(t *testing.T) {
	approvalstest.Run(t, func(t *testing.T) approvals.Store {
		s := openKV(t, t.TempDir())
		t.Cleanup(func() { s.Close() })
		p, err := approvals.NewPebble(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
}

// The count of parked proposals survives a restart, and the expiry timer
// lives in kv's timer table, where the scheduler finds it.
func TestPebbleCountAndTimers(t *testing.T) {
	dir := t.TempDir()
	s := openKV(t, dir)
	p, err := approvals.NewPebble(s)
	if err != nil {
		t.Fatal(err)
	}
	refs := []schema.ProposalRef{{Host: "h", ProposalID: "a"}, {Host: "h", ProposalID: "b"}, {Host: "g", ProposalID: "a"}}
	for _, ref := range refs {
		r := approvals.Record{Host: ref.Host, ProposalID: ref.ProposalID, Fingerprint: "sha256:x", State: approvals.StateParked, ExpiresAtMs: 600}
		tm := approvals.ExpiryTimer("subj", ref, 600, approvals.TimerID(ref))
		if err := p.Commit(ref, approvals.Writes{Record: &r, Timer: &tm}); err != nil {
			t.Fatal(err)
		}
	}
	if tm, found, err := s.Timer("approval/h.a"); err != nil || !found || tm.DueMs != 600 || string(tm.Data) != "h.a" || tm.Subject != "subj" || tm.MsgID != "approval/h.a" {
		t.Fatalf("timer = %+v %v %v", tm, found, err)
	}
	// Re-armed: replaced, not added.
	re := approvals.ExpiryTimer("subj", refs[0], 700, "approval/h.a/rearmed/AUTH/9")
	if err := p.Commit(refs[0], approvals.Writes{From: approvals.StateParked, Timer: &re}); err != nil {
		t.Fatal(err)
	}
	if due, _ := s.DueTimers(650, 10); len(due) != 2 {
		t.Errorf("due at 650: %+v", due)
	}
	// Decided: the timer goes with the decision.
	r, _, _ := p.Load(refs[0])
	r.State, r.DecidedBy = approvals.StatePermitted, "GRANTS/1"
	if err := p.Commit(refs[0], approvals.Writes{From: approvals.StateParked, Record: &r, CancelTimer: true}); err != nil {
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
	p, err = approvals.NewPebble(s)
	if err != nil {
		t.Fatal(err)
	}
	if p.Count() != 2 {
		t.Errorf("Count after reopening = %d", p.Count())
	}
}
