package kv

import (
	"slices"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/schema"
)

func TestApprovals(t *testing.T) {
	s := open(t)
	if _, found, err := s.Approval(schema.ProposalRef{Host: "h", ProposalID: "p1"}); found || err != nil {
		t.Fatal(found, err)
	}
	evals := []schema.PolicyEvaluation{{Layer: "managed_policy:org", Outcome: schema.EvalPass}}
	park := func(id string, seq uint64) Approval {
		return Approval{Host: "h", ProposalID: id, Fingerprint: "sha256:ab", Referent: "sku-1", Seq: seq, State: ApprovalParked,
			ArrivedAtMs: 10, ExpiresAtMs: 610, Evaluations: evals}
	}
	b := s.NewBatch()
	b.PutApproval(park("p1", 3))
	b.PutApproval(park("p2", 4))
	b.PutApproval(park("p1\x00x", 5)) // escaping keeps ids apart
	if err := b.Commit(Sync); err != nil {
		t.Fatal(err)
	}
	if n, err := s.CountParked(); n != 3 || err != nil {
		t.Fatalf("parked = %d, %v", n, err)
	}
	a, found, err := s.Approval(schema.ProposalRef{Host: "h", ProposalID: "p1"})
	if err != nil || !found || a.Seq != 3 || a.State != ApprovalParked || !slices.Equal(a.Evaluations, evals) {
		t.Fatalf("p1 = %+v %v %v", a, found, err)
	}

	a.State, a.DecidedBy, a.DecidedAtMs, a.Code = ApprovalDenied, "GRANTS/9", 20, schema.CodeGrantExpired
	b = s.NewBatch()
	b.PutApproval(a)
	if err := b.Commit(Sync); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.CountParked(); n != 2 {
		t.Fatalf("parked after a decision = %d", n)
	}
	got, found, _ := s.Approval(schema.ProposalRef{Host: "h", ProposalID: "p1"})
	if !found || got.State != ApprovalDenied || got.DecidedBy != "GRANTS/9" || got.Code != schema.CodeGrantExpired {
		t.Fatalf("decided p1 = %+v", got)
	}
}

func TestParkedApprovals(t *testing.T) {
	s := open(t)
	if got, total, err := s.ParkedApprovals(0); len(got) != 0 || total != 0 || err != nil {
		t.Fatalf("empty store: %v %d %v", got, total, err)
	}
	park := func(host, id string, expires int64) Approval {
		return Approval{Host: host, ProposalID: id, Fingerprint: "sha256:" + id, Referent: "sku-" + id, Seq: 1, State: ApprovalParked,
			ArrivedAtMs: 10, ExpiresAtMs: expires}
	}
	b := s.NewBatch()
	b.PutApproval(park("h", "late", 900))
	b.PutApproval(park("h", "soon", 300))
	b.PutApproval(park("g", "tie", 500))
	b.PutApproval(park("h", "tie", 500))
	b.PutApproval(park("h\x00x", "odd\x00id", 700)) // escaped key components decode back
	decided := park("h", "decided", 100)
	decided.State, decided.Code = ApprovalDenied, schema.CodeApprovalTimedOut
	b.PutApproval(decided)
	// An index entry without its record (cannot happen through PutApproval)
	// is left out of the list but counted.
	b.set(proposalKey(prefixPending, schema.ProposalRef{Host: "h", ProposalID: "orphan"}), int64(200))
	if err := b.Commit(Sync); err != nil {
		t.Fatal(err)
	}
	ids := func(as []Approval) []string {
		var out []string
		for _, a := range as {
			out = append(out, a.Host+"/"+a.ProposalID)
		}
		return out
	}
	got, total, err := s.ParkedApprovals(0)
	if err != nil || total != 6 {
		t.Fatalf("total %d, %v", total, err)
	}
	if want := []string{"h/soon", "g/tie", "h/tie", "h\x00x/odd\x00id", "h/late"}; !slices.Equal(ids(got), want) {
		t.Errorf("order %q, want %q", ids(got), want)
	}
	if got[0].Referent != "sku-soon" || got[0].ExpiresAtMs != 300 || got[0].Fingerprint != "sha256:soon" {
		t.Errorf("first = %+v", got[0])
	}
	got, total, err = s.ParkedApprovals(3)
	if err != nil || total != 6 || !slices.Equal(ids(got), []string{"h/soon", "g/tie", "h/tie"}) {
		t.Errorf("limit 3: %q total %d %v", ids(got), total, err)
	}
	// A decision takes the proposal off the list.
	a := park("h", "soon", 300)
	a.State = ApprovalPermitted
	b = s.NewBatch()
	b.PutApproval(a)
	if err := b.Commit(Sync); err != nil {
		t.Fatal(err)
	}
	if got, total, _ := s.ParkedApprovals(1); total != 5 || len(got) != 1 || got[0].ProposalID != "tie" {
		t.Errorf("after a decision: %q total %d", ids(got), total)
	}
}

func TestProposalFingerprint(t *testing.T) {
	s := open(t)
	fp := func(c string) string { return "sha256:" + strings.Repeat(c, 64) }
	ref := func(id string) schema.ProposalRef { return schema.ProposalRef{Host: "h", ProposalID: id} }
	str := func(v string) *string { return &v }
	b := s.NewBatch()
	b.PutApproval(Approval{Host: "h", ProposalID: "authorized", Fingerprint: fp("a"), State: ApprovalPermitted})
	b.PutOutcome(schema.Outcome{Host: "h", ProposalID: "authorized", Kind: schema.KindConfirmed, Fingerprint: str(fp("b"))})
	b.PutOutcome(schema.Outcome{Host: "h", ProposalID: "outcome", Kind: schema.KindDenied, Fingerprint: str(fp("c"))})
	b.PutOutcome(schema.Outcome{Host: "h", ProposalID: "approval", Kind: schema.KindNeedsApproval, Approval: &schema.Approval{Fingerprint: fp("d")}})
	b.PutOutcome(schema.Outcome{Host: "h", ProposalID: "receipt", Kind: schema.KindConfirmed, Receipt: &schema.Receipt{Fingerprint: fp("e")}})
	b.PutOutcome(schema.Outcome{Host: "h", ProposalID: "clarify", Kind: schema.KindNeedsClarification})
	if err := b.Commit(Sync); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"authorized": fp("a"), "outcome": fp("c"), "approval": fp("d"), "receipt": fp("e"), "clarify": "", "unknown": ""} {
		got, found, err := s.ProposalFingerprint(ref(id))
		if err != nil || got != want || found != (want != "") {
			t.Errorf("%s: %q %v %v, want %q", id, got, found, err, want)
		}
	}
	if _, found, _ := s.ProposalFingerprint(schema.ProposalRef{Host: "other", ProposalID: "authorized"}); found {
		t.Error("another host's proposal id matched")
	}
}
