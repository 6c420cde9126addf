package retention_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv/pebble"

	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/retention"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/intent"
	"github.com/portcullis/portcullis/schema"
)

func TestMain(m *testing.M) {
	code := m.Run()
	cleanupFilled()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const (
	day  = 24 * time.Hour
	t0   = int64(1_800_000_000_000)
	hour = int64(time.Hour / time.Millisecond)
)

func open(t testing.TB, c *clock) *pebble.Store {
	t.Helper()
	s, err := pebble.Open(t.TempDir(), pebble.Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func sweeper(s *pebble.Store, c *clock, h retention.Horizons) *retention.Sweeper {
	return &retention.Sweeper{Store: s, Horizons: h, Now: c.Now, Batch: 7}
}

func sweep(t *testing.T, sw *retention.Sweeper) retention.Stats {
	t.Helper()
	st, err := sw.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Every record class goes once its horizon after its last change has
// passed, and nothing goes earlier; what is pending stays whatever its age.
func TestSweepHorizons(t *testing.T) {
	c := newClock(t0)
	s := open(t, c)
	h := retention.Horizons{Proposals: 8 * day, Receipts: 30 * day}
	for n := range 20 {
		if err := proposal(s, n, c.Now(), false); err != nil {
			t.Fatal(err)
		}
	}
	// A grounding checkpoint.
	b := s.NewBatch()
	b.PutGrounding(kv.GroundingKey("ACTIONS_GROUNDING", 1, []byte("x")), kv.Grounding{Referent: "sku-1001", AtMs: c.Now()})
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	// Intent 0 stays unfinished: acknowledged, verification pending.
	pending := fingerprintOf(0)
	rec, _, _ := pebble.NewJournal(s).Load(pending)
	intent.Settle(&rec, kv.Verdict{Status: schema.StatusAcknowledged, NextAction: schema.NextVerify, Attempted: true}, "dispatch-ack", nil, nil, c.Now())
	if err := pebble.NewJournal(s).Commit(pending, kv.IntentWrites{Record: &rec}); err != nil {
		t.Fatal(err)
	}
	// Proposal 1 is parked (a decision never came).
	parked := refOf(1)
	b = s.NewBatch()
	b.PutApproval(parked, &kv.Approval{Host: parked.Host, ProposalID: parked.ProposalID, State: kv.StateParked,
		ArrivedAtMs: c.Now(), ExpiresAtMs: c.Now() + 600_000}, true, c.Now()+600_000)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	sw := sweeper(s, c, h)

	// Before any horizon: nothing goes.
	c.Advance(7 * 24 * hour)
	if st := sweep(t, sw); st.Proposals+st.Deliveries+st.Intents+st.Groundings != 0 {
		t.Fatalf("a week on: %+v", st)
	}
	// Proposal 2 hears of its intent again (an outcome recorded now);
	// intent 3 answers a new proposal from its receipt (dispatch step 1:
	// the record is written, its own times unchanged).
	o, _, _ := s.LastOutcome(refOf(2))
	o.AtMs = c.Now()
	b = s.NewBatch()
	b.PutOutcome(o)
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	rec3, _, _ := pebble.NewJournal(s).Load(fingerprintOf(3))
	rec3.AddProposal(schema.ProposalRef{Host: "frontdesk", ProposalID: "late-repeat"})
	if err := pebble.NewJournal(s).Commit(fingerprintOf(3), kv.IntentWrites{Record: &rec3}); err != nil {
		t.Fatal(err)
	}

	// Past the proposals horizon: every proposal's records but the parked
	// one's and proposal 2's; deliveries and the checkpoint.
	c.Advance(2 * 24 * hour)
	st := sweep(t, sw)
	if st.Proposals != 18 || st.Deliveries != 20 || st.Groundings != 1 || st.Intents != 0 {
		t.Fatalf("ten days on: %+v", st)
	}
	if _, found, _ := s.Admitted(refOf(5)); found {
		t.Error("proposal 5's admission record survived")
	}
	if _, found, _ := s.LastOutcome(refOf(2)); !found {
		t.Error("proposal 2's outcome went, though recorded three days ago")
	}
	if _, found, _ := s.Admitted(refOf(2)); !found {
		t.Error("proposal 2's admission went before its last change's horizon")
	}
	var ap kv.Approval
	if found, _ := s.Approval(parked, &ap); !found || !ap.Parked() {
		t.Error("the parked proposal's record went")
	}
	if _, found, _ := s.Delivery("frontdesk", "delivery:"+refOf(5).ProposalID); found {
		t.Error("a delivery record survived")
	}
	if n := receipts(t, s, fingerprintOf(5)); n != 1 {
		t.Errorf("intent 5 has %d receipts before its horizon", n)
	}

	// Past the receipts horizon: every finished intent but intent 3
	// (written a week later); the pending one stays. Proposal 2's records
	// go too (their horizon from their last change has passed).
	c.Advance(22 * 24 * hour)
	st = sweep(t, sw)
	if st.Intents != 18 || st.Proposals != 1 {
		t.Fatalf("a month on: %+v", st)
	}
	if _, found, _ := pebble.NewJournal(s).Load(pending); !found {
		t.Error("the unfinished intent went")
	}
	if _, found, _ := pebble.NewJournal(s).Load(fingerprintOf(3)); !found {
		t.Error("intent 3 went, though written a week after the others")
	}
	if n := receipts(t, s, fingerprintOf(5)); n != 0 {
		t.Errorf("intent 5 kept %d receipts", n)
	}
	c.Advance(7 * 24 * hour)
	if st := sweep(t, sw); st.Intents != 1 || st.Proposals != 0 {
		t.Errorf("another week on: %+v (intent 3 goes)", st)
	}
	// What remains: the pending intent and the parked proposal (its three
	// records and index entry), and
	// nothing else but the index entries that keep them in view.
	counts, err := s.Count()
	if err != nil {
		t.Fatal(err)
	}
	for prefix, want := range map[byte]int{'d': 0, 'm': 1, 'o': 1, 'g': 0, 'n': 0, 'N': 0, 'f': 1, 'r': 1, 'a': 1, 'p': 1} {
		if counts[prefix] != want {
			t.Errorf("%d records under %q, want %d (all: %v)", counts[prefix], prefix, want, counts)
		}
	}
}

func receipts(t *testing.T, s *pebble.Store, fp string) int {
	t.Helper()
	rs, err := s.Receipts(fp)
	if err != nil {
		t.Fatal(err)
	}
	return len(rs)
}

// A store written before the expiry index existed is filed on the first
// sweep of Run, and swept like any other.
func TestFileUnfiled(t *testing.T) {
	c := newClock(t0)
	s := open(t, c)
	for n := range 5 {
		if err := proposal(s, n, c.Now(), false); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.FileUnfiled()
	if err != nil || n != 5*3+5+5 { // admitted, outcome, approval; delivery; intent: for each of 5
		t.Fatalf("filed %d, %v", n, err)
	}
	if n, err := s.FileUnfiled(); err != nil || n != 0 {
		t.Fatalf("filed again: %d, %v", n, err)
	}
	c.Advance(40 * 24 * hour)
	st := sweep(t, sweeper(s, c, retention.Horizons{Proposals: 8 * day, Receipts: 30 * day}))
	if st.Proposals != 5 || st.Intents != 5 || st.Deliveries != 5 {
		t.Errorf("swept %+v", st)
	}
}

// Under a steady stream of proposals, the store holds a bounded number of
// records: each sweep removes what the horizon let go, so the count levels
// off at about a horizon's worth of proposals (checked at every simulated
// hour for two horizons after the first).
func TestSteadyStreamStaysBounded(t *testing.T) {
	c := newClock(t0)
	s := open(t, c)
	const perHour = 60
	horizon := retention.Horizons{Proposals: 6 * time.Hour, Receipts: 12 * time.Hour}
	sw := sweeper(s, c, horizon)
	sw.Batch = 256
	n := 0
	var plateau int
	for h := range 36 {
		for range perHour {
			if err := proposal(s, n, c.Now(), false); err != nil {
				t.Fatal(err)
			}
			n++
			c.Advance(hour / perHour)
		}
		sweep(t, sw)
		counts, err := s.Count()
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, v := range counts {
			total += v
		}
		switch {
		case h == 13:
			plateau = total
		case h > 13 && (total > plateau*11/10 || total < plateau*9/10):
			t.Fatalf("hour %d: %d records, %d at hour 13: not level (%v)", h, total, plateau, counts)
		}
		if h > 13 && counts['f'] > (12+1)*perHour || counts['m'] > (6+1)*perHour {
			t.Fatalf("hour %d: %d intents, %d admissions kept: more than a horizon's worth", h, counts['f'], counts['m'])
		}
	}
	t.Logf("%d proposals written, %d records kept", n, plateau)
}
