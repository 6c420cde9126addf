package pebble

import (
	"slices"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/schema"
)

// rec stands in for kv.Approval: kv stores it as it is.
type rec struct {
	Fingerprint string `json:"fingerprint"`
	State       string `json:"state"`
}

func TestApprovals(t *testing.T) {
	s := open(t)
	ref := func(host, id string) schema.ProposalRef { return schema.ProposalRef{Host: host, ProposalID: id} }
	var got rec
	if found, err := s.Approval(ref("h", "p1"), &got); found || err != nil {
		t.Fatal(found, err)
	}
	b := s.NewBatch()
	b.PutApproval(ref("h", "p1"), rec{"sha256:ab", "parked"}, true, 610)
	b.PutApproval(ref("h", "p2"), rec{"sha256:cd", "parked"}, true, 300)
	b.PutApproval(ref("h", "p1\x00x"), rec{"sha256:ef", "parked"}, true, 500) // escaping keeps ids apart
	b.PutApproval(ref("h\x00x", "odd\x00id"), rec{"sha256:ef", "parked"}, true, 700)
	b.PutApproval(ref("g", "p1"), rec{"sha256:01", "denied"}, false, 0)
	if err := b.Commit(Sync); err != nil {
		t.Fatal(err)
	}
	if n, err := s.CountParked(); n != 4 || err != nil {
		t.Fatalf("parked = %d, %v", n, err)
	}
	if found, err := s.Approval(ref("h", "p1"), &got); err != nil || !found || got != (rec{"sha256:ab", "parked"}) {
		t.Fatalf("p1 = %+v %v %v", got, found, err)
	}
	idx, err := s.ParkedIndex()
	if err != nil {
		t.Fatal(err)
	}
	want := []Parked{{ref("h", "p1"), 610}, {ref("h", "p1\x00x"), 500}, {ref("h", "p2"), 300}, {ref("h\x00x", "odd\x00id"), 700}}
	if !slices.Equal(idx, want) {
		t.Errorf("index %+v, want %+v (key order; escaped components decode back)", idx, want)
	}

	b = s.NewBatch()
	b.PutApproval(ref("h", "p1"), rec{"sha256:ab", "denied"}, false, 0)
	if err := b.Commit(Sync); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.CountParked(); n != 3 {
		t.Fatalf("parked after a decision = %d", n)
	}
	if found, _ := s.Approval(ref("h", "p1"), &got); !found || got.State != "denied" {
		t.Fatalf("decided p1 = %+v", got)
	}
}

func TestProposalFingerprint(t *testing.T) {
	s := open(t)
	fp := func(c string) string { return "sha256:" + strings.Repeat(c, 64) }
	ref := func(id string) schema.ProposalRef { return schema.ProposalRef{Host: "h", ProposalID: id} }
	str := func(v string) *string { return &v }
	b := s.NewBatch()
	b.PutApproval(ref("authorized"), rec{fp("a"), "permitted"}, false, 0)
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
