package pebble

import (
	"strings"
	"testing"

	"github.com/portcullis/portcullis/schema"
)

// record stands in for kv.Intent: kv stores whatever its
// caller encodes.
type record struct {
	State     string               `json:"state"`
	Proposals []schema.ProposalRef `json:"proposals"`
}

type attempt struct {
	Number int `json:"number"`
}

func TestIntentJournal(t *testing.T) {
	s := open(t)
	fp := "sha256:" + strings.Repeat("ab", 32)
	other := "sha256:" + strings.Repeat("ac", 32)
	if found, err := s.Intent(fp, new(record)); found || err != nil {
		t.Fatal(found, err)
	}
	if _, err := s.Intent("sha256:xyz", new(record)); err == nil {
		t.Error("accepted a malformed fingerprint")
	}
	in := record{State: "in_flight", Proposals: []schema.ProposalRef{{Host: "h", ProposalID: "p1"}, {Host: "h", ProposalID: "p2"}}}
	b := s.NewBatch()
	b.PutIntent(fp, in)
	for i := uint64(1); i <= 3; i++ {
		b.AppendReceipt(i, schema.Receipt{Fingerprint: fp, ReceiptID: "r" + string(rune('0'+i))})
	}
	b.AppendReceipt(1, schema.Receipt{Fingerprint: other, ReceiptID: "x"})
	b.PutAttempt(fp, "a-1", attempt{Number: 1})
	b.SetIndeterminate(fp, 42)
	b.SetIndeterminate(other, 43)
	if err := b.Commit(Sync); err != nil {
		t.Fatal(err)
	}
	var got record
	found, err := s.Intent(fp, &got)
	if err != nil || !found || got.State != "in_flight" || len(got.Proposals) != 2 {
		t.Fatalf("%+v %v %v", got, found, err)
	}
	rs, err := s.Receipts(fp)
	if err != nil || len(rs) != 3 || rs[0].ReceiptID != "r1" || rs[2].ReceiptID != "r3" {
		t.Fatalf("receipts %+v %v", rs, err)
	}
	var a attempt
	if found, _ := s.Attempt(fp, "a-1", &a); !found || a.Number != 1 {
		t.Errorf("attempt %+v", a)
	}
	if found, _ := s.Attempt(other, "a-1", new(attempt)); found {
		t.Error("attempts leak across fingerprints")
	}
	b = s.NewBatch()
	b.SetIndeterminate(other, 0)
	if err := b.Commit(Sync); err != nil {
		t.Fatal(err)
	}
	ind, err := s.Indeterminates()
	if err != nil || len(ind) != 1 || ind[0].Fingerprint != fp || ind[0].SinceMs != 42 {
		t.Fatalf("indeterminates %+v %v", ind, err)
	}
}
