package authorization

import (
	"testing"

	"github.com/portcullis/portcullis/schema"
)

// HandedOffActivity, made from the hand-off alone, records what
// authorization's own edit of that permit records — from nothing (its
// write lost with its process) and over the parked snapshot of a proposal
// a grant resumed — and applied again changes nothing.
func TestHandedOffActivity(t *testing.T) {
	if HandedOffActivity(flight()) != nil {
		t.Error("an edit from an envelope without an authorization record")
	}
	for _, parked := range []bool{false, true} {
		env := withGrant(grant())
		v := DecideProposal(Policy{}, env, now+5)
		if v.Decision != Permit {
			t.Fatalf("ruling %+v", v)
		}
		var own, rebuilt schema.Activity
		if parked {
			for _, a := range []*schema.Activity{&own, &rebuilt} {
				ActivityEdit(ref("prop-1"), flight(), DecideProposal(Policy{}, flight(), now), now, now+600_000).Apply(a)
			}
		}
		ActivityEdit(ref("prop-1"), env, v, now+5, 0).Apply(&own)
		h := HandOff(env, v, now+5)
		edit := HandedOffActivity(&h)
		edit(&rebuilt)
		if got, want := string(schema.MustMarshal(rebuilt)), string(schema.MustMarshal(own)); got != want {
			t.Errorf("parked %v: rebuilt %s\nwant %s", parked, got, want)
		}
		edit(&rebuilt)
		if got, want := string(schema.MustMarshal(rebuilt)), string(schema.MustMarshal(own)); got != want {
			t.Errorf("parked %v: applied twice %s", parked, got)
		}
	}
}
