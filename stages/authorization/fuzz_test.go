package authorization

import (
	"fmt"
	"testing"

	"github.com/portcullis/portcullis/kv"

	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/portcullis/portcullis/schema"
)

// FuzzStepSequence drives one proposal through any sequence of inputs —
// its hand-off and redeliveries, second hand-offs, expiries early and late
// and redelivered, grants valid, not yet valid and redelivered, declines,
// give-ups, the clock moving, the parked envelope purged — as the shell
// would, against a real (in-memory) Pebble approvals store. Whatever the
// order: every commit is accepted, the first decision stands and is the
// only one ever published (republished identically), NEEDS_APPROVAL goes
// out only while parked, and the parked count matches the record.
func FuzzStepSequence(f *testing.F) {
	for _, seed := range [][]byte{
		{0, 0, 5},              // park, grant
		{1, 0, 1, 6},           // inline grant, redelivered
		{0, 0, 3, 9, 9, 9, 3},  // park, early expiry, the TTL passes, expiry
		{0, 0, 8, 5, 6, 10, 3}, // not-yet-valid grant, then a valid one, redelivered, given up, late expiry
		{0, 0, 7, 4, 2, 1},     // decline, late timer, second hand-off, redelivery
		{0, 0, 11, 5, 6},       // the envelope purged before the grant
		{0, 0, 10, 5, 3},       // give up on the parked proposal
		{0, 0, 9, 9, 9, 9, 5, 3, 10},
		{0, 0, 5, 11, 6, 10},
		{0, 5, 3, 10, 0, 5}, // a grant and an expiry before the proposal
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) < 1 || len(ops) > 40 {
			return
		}
		inline, ops := ops[0]&1 == 1, ops[1:]
		s, err := pebble.Open("", pebble.Options{FS: vfs.NewMem()})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		store, err := pebble.NewApprovals(s)
		if err != nil {
			t.Fatal(err)
		}
		envelope := func() *schema.Envelope {
			if inline {
				return withGrant(grant())
			}
			return flight()
		}
		clock, purged := arrived, false
		run := func(f Facts) Decision {
			unlock := store.Lock(f.Ref)
			defer unlock()
			rec, found, err := store.Load(f.Ref)
			if err != nil {
				t.Fatal(err)
			}
			f.Record, f.Found, f.Now = rec, found, clock
			for {
				d := Step(f, stepRules)
				if err := store.Commit(f.Ref, d.Writes); err != nil {
					t.Fatalf("commit of %+v: %v", d.Writes, err)
				}
				if !d.ReadEnvelope {
					return d
				}
				f.Read, f.Env = true, nil
				if !purged {
					f.Env = envelope()
				}
			}
		}
		var (
			last, lastTimer, lastGrant Facts
			decided                    *kv.Approval
			answer                     string // the one decision published: a hand-off or a terminal outcome
		)
		for i, op := range ops {
			var in Facts
			switch op % 12 {
			case 0, 1: // the proposal, or its redelivery
				in = proposalIn(envelope())
			case 2: // handed on again as another message
				in = proposalIn(envelope())
				in.ID, in.Seq = fmt.Sprintf("AUTH/%d", 100+i), uint64(100+i)
			case 3:
				in = timerIn()
				in.ID, in.Seq = fmt.Sprintf("AUTH/%d", 200+i), uint64(200+i)
				lastTimer = in
			case 4:
				if lastTimer.Input == 0 {
					continue
				}
				in = lastTimer
			case 5, 7, 8:
				g := signedGrant(func(g *schema.Grant) { g.IssuedAtMs, g.ExpiresAtMs = clock, clock+300_000 })
				switch op % 12 {
				case 7:
					g = decline(fp)
				case 8:
					g.Grant.IssuedAtMs += 60_000
				}
				in = grantIn(g)
				in.ID, in.Seq = fmt.Sprintf("GRANTS/%d", i), uint64(i)
				lastGrant = in
			case 6:
				if lastGrant.Input == 0 {
					continue
				}
				in = lastGrant
			case 9:
				clock += 180_000
				continue
			case 10:
				if last.Input == 0 {
					continue
				}
				in = last
				in.GivingUp = true
			case 11:
				purged = true
				continue
			}
			d := run(in)
			last = in
			rec, found, err := store.Load(prop1)
			if err != nil {
				t.Fatal(err)
			}
			if !found {
				// Only inputs before the proposal: nothing may happen.
				if !d.Writes.Empty() || d.HandOff != nil || d.Outcome != nil || store.Count() != 0 {
					t.Fatalf("op %d: %+v without a record", i, d)
				}
				continue
			}
			if (store.Count() == 1) != rec.Parked() || store.Count() > 1 {
				t.Fatalf("op %d: count %d, record %s", i, store.Count(), rec.State)
			}
			if decided != nil && (rec.State != decided.State || rec.DecidedBy != decided.DecidedBy || rec.Code != decided.Code) {
				t.Fatalf("op %d: decided %+v, then %+v", i, *decided, rec)
			}
			if !rec.Parked() && decided == nil {
				decided = &rec
			}
			var got string
			switch o := d.Outcome; {
			case d.HandOff != nil:
				got = "hand-off " + string(schema.MustMarshal(d.HandOff))
				if rec.State != kv.StatePermitted {
					t.Fatalf("op %d: hand-off while %s", i, rec.State)
				}
			case o != nil && o.Kind == schema.KindNeedsApproval:
				if !rec.Parked() {
					t.Fatalf("op %d: NEEDS_APPROVAL while %s", i, rec.State)
				}
			case o != nil:
				got = fmt.Sprintf("%s %s at %d", o.Kind, o.Incidents[0].Code, o.AtMs)
				if !o.Terminal || rec.State != kv.StateDenied || o.Incidents[0].Code != rec.Code {
					t.Fatalf("op %d: outcome %s %s while %s/%s", i, o.Kind, o.Incidents[0].Code, rec.State, rec.Code)
				}
			}
			if got != "" {
				if answer != "" && got != answer {
					t.Fatalf("op %d: published %s after %s", i, got, answer)
				}
				answer = got
			}
		}
	})
}
