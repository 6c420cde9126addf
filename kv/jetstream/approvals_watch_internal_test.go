package jetstream

import (
	"testing"

	"github.com/portcullis/portcullis/kv"

	"github.com/portcullis/portcullis/schema"
)

// The parked set takes each key's newest version, whether this processor's
// commit or the watcher delivers it first; a version the watcher delivers
// late never undoes a newer one, and a fresh read of the bucket keeps the
// commits it did not include.
func TestParkedSetOrdering(t *testing.T) {
	r := &Approvals{parked: map[string]parkedEntry{}, local: map[string]localEntry{}}
	ref := schema.ProposalRef{Host: "h", ProposalID: "p"}
	key := approvalKey(ref)
	park := &kv.Approval{Host: "h", ProposalID: "p", State: kv.StateParked, ExpiresAtMs: 9}
	decided := &kv.Approval{Host: "h", ProposalID: "p", State: kv.StateDenied, DecidedBy: "T/1"}

	// Parked by another processor (rev 5), decided here (rev 7) before the
	// watcher delivered rev 5: rev 5 arrives late and changes nothing.
	r.applyLocal(key, 7, decided)
	r.applyWatched(key, 5, park)
	if len(r.parked) != 0 {
		t.Fatalf("a late version undid a newer commit: %+v", r.parked)
	}
	r.applyWatched(key, 7, decided)
	if len(r.local) != 0 || len(r.parked) != 0 {
		t.Fatalf("after the watcher caught up: local %+v parked %+v", r.local, r.parked)
	}
	// A commit the watcher delivered already is not applied again.
	other := schema.ProposalRef{Host: "h", ProposalID: "q"}
	okey := approvalKey(other)
	r.applyWatched(okey, 8, &kv.Approval{Host: "h", ProposalID: "q", State: kv.StatePermitted, DecidedBy: "G/1"})
	r.applyLocal(okey, 6, &kv.Approval{Host: "h", ProposalID: "q", State: kv.StateParked, ExpiresAtMs: 1})
	if len(r.parked) != 0 || len(r.local) != 0 {
		t.Fatalf("an old local commit applied over what the watcher saw: %+v %+v", r.parked, r.local)
	}
	// Parked here at rev 10, not yet watched; a fresh read of the bucket
	// from before it keeps it; one that includes it drops the local entry.
	r.applyLocal(key, 10, park)
	r.swapIn(map[string]parkedEntry{}, map[string]uint64{key: 7})
	if _, ok := r.parked[key]; !ok || len(r.local) != 1 {
		t.Fatalf("a fresh read lost a local commit: %+v %+v", r.parked, r.local)
	}
	r.swapIn(map[string]parkedEntry{key: {rev: 10, ref: ref, expiresAtMs: 9}}, map[string]uint64{key: 10})
	if _, ok := r.parked[key]; !ok || len(r.local) != 0 {
		t.Fatalf("fresh read including the commit: %+v %+v", r.parked, r.local)
	}
}
