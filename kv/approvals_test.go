package kv

import (
	"slices"
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
