package jetstream_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv"
	kvjs "github.com/portcullis/portcullis/kv/jetstream"
	"github.com/portcullis/portcullis/kv/kvtest"
	"github.com/portcullis/portcullis/kv/pebble"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// sharedAdmissions opens admission records on one fresh bucket on url:
// each instance another processor's, on its own connection and Pebble
// store.
func sharedAdmissions(url string, replicas int) kvtest.OpenAdmissions {
	return func(t *testing.T) (kv.Admissions, func() kv.Admissions) {
		bucket := fmt.Sprintf("admission_%d", buckets.Add(1))
		another := func() kv.Admissions {
			js, b := kvtest.OpenBucket(t, url, kvjs.AdmissionBucket(bucket, replicas, time.Hour))
			st, err := pebble.Open(t.TempDir(), pebble.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return kvjs.NewAdmissions(kvjs.AdmissionsOptions{KV: b, JS: js, Local: st, Subjects: subjects.Default()})
		}
		return another(), another
	}
}

func TestAdmissionsR1(t *testing.T) { testAdmissions(t, 1) }
func TestAdmissionsR3(t *testing.T) { testAdmissions(t, 3) }

func testAdmissions(t *testing.T, replicas int) {
	url := servers(t, replicas)
	kvtest.RunAdmissions(t, sharedAdmissions(url, replicas))
	t.Run("claims across processors", func(t *testing.T) { testCrossClaims(t, sharedAdmissions(url, replicas)) })
}

// Two processors each read a proposal id free and claim it (their locks
// are their own): the second finds the first's record. With other content
// (a reuse) its delivery id is withdrawn again; with the same content (a
// repeat under another delivery id) the delivery id stays its own.
func testCrossClaims(t *testing.T, open kvtest.OpenAdmissions) {
	a, another := open(t)
	b := another()
	ref := schema.ProposalRef{Host: "h", ProposalID: "p-cross"}
	first := kv.Admitted{Digest: "dg-1", Seq: 1, AtMs: 10}
	if c, err := a.Admit(ref, first, "d1", kv.Delivery{ProposalID: ref.ProposalID, Seq: 1}); err != nil || c != (kv.AdmissionClaim{}) {
		t.Fatalf("first claim: %+v, %v", c, err)
	}
	c, err := b.Admit(ref, kv.Admitted{Digest: "dg-2", Seq: 2}, "d2", kv.Delivery{ProposalID: ref.ProposalID, Seq: 2})
	if err != nil || c.Admitted == nil || *c.Admitted != first || c.Delivery != nil {
		t.Fatalf("reuse: %+v, %v; want the first record", c, err)
	}
	if _, found, err := a.Delivery(ref.Host, "d2"); found || err != nil {
		t.Fatalf("the reuse's delivery id stays taken: %v %v", found, err)
	}
	c, err = b.Admit(ref, kv.Admitted{Digest: "dg-1", Seq: 3}, "d3", kv.Delivery{ProposalID: ref.ProposalID, Seq: 3})
	if err != nil || c.Admitted == nil || c.Admitted.Seq != 1 {
		t.Fatalf("repeat: %+v, %v", c, err)
	}
	if d, found, err := a.Delivery(ref.Host, "d3"); !found || err != nil || d.Seq != 3 {
		t.Fatalf("the repeat's delivery id: %+v %v %v", d, found, err)
	}
	// A delivery id another message took first: a repeat of it.
	c, err = b.Admit(schema.ProposalRef{Host: "h", ProposalID: "p-other"}, kv.Admitted{Digest: "dg-4", Seq: 4}, "d1", kv.Delivery{ProposalID: "p-other", Seq: 4})
	if err != nil || c.Delivery == nil || c.Delivery.Seq != 1 || c.Admitted != nil {
		t.Fatalf("a taken delivery id: %+v, %v", c, err)
	}
	if _, found, err := a.Admitted(schema.ProposalRef{Host: "h", ProposalID: "p-other"}); found || err != nil {
		t.Fatalf("the proposal id of a repeated delivery was taken: %v %v", found, err)
	}
}
