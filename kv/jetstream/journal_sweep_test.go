package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv/kvtest"

	kvjs "github.com/portcullis/portcullis/kv/jetstream"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/kv"
	kvintent "github.com/portcullis/portcullis/kv/intent"
	"github.com/portcullis/portcullis/schema"
)

// sweepJournals opens n processors' replicated journals on one fresh
// bucket on url, and a handle on the bucket.
func sweepJournals(t testing.TB, url string, replicas, n int) ([]*kvjs.Journal, jetstream.KeyValue) {
	t.Helper()
	bucket := fmt.Sprintf("journal_%d", buckets.Add(1))
	var out []*kvjs.Journal
	var kv jetstream.KeyValue
	for i := range n {
		js, h := kvtest.OpenBucket(t, url, kvjs.JournalBucket(bucket, replicas))
		kv = h
		out = append(out, kvjs.NewJournal(kvjs.JournalOptions{KV: h, JS: js, Writer: fmt.Sprintf("p_%016d", i+1)}))
	}
	return out, kv
}

func fingerprint(n int) string { return fmt.Sprintf("sha256:%064x", n) }

// intent writes fingerprint n's record through the journal the way the
// stages do, settled by the verdicts given (none: in flight), with a
// finished reconciliation attempt per verdict after the first. Every write
// is stamped at ms.
func intent(t testing.TB, j kv.Journal, n int, ms int64, verdicts ...kv.Verdict) {
	t.Helper()
	fp := fingerprint(n)
	unlock := j.Lock(fp)
	defer unlock()
	rec, _, err := j.Load(fp)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Fingerprint == "" {
		rec = kv.NewIntent(kv.Identity{Fingerprint: fp, IdempotencyKey: kv.Hex(fp), Target: schema.Target{Provider: "demo", Referent: "r"}}, "fake", ms)
	}
	rec.AddProposal(schema.ProposalRef{Host: "h", ProposalID: fmt.Sprint("p", n)})
	rec.State, rec.DispatchAttempts, rec.InFlightAtMs, rec.UpdatedAtMs = kv.StateInFlight, 1, ms, ms
	if err := j.Commit(fp, kv.IntentWrites{Record: &rec}); err != nil {
		t.Fatal(err)
	}
	for i, v := range verdicts {
		w := kv.IntentWrites{Record: &rec}
		step := "dispatch"
		if i > 0 {
			rec.ReconcileAttempt = i
			cp := kv.Attempt{AttemptID: kv.AttemptID(fp, i), Number: i, StartedAtMs: ms, Status: "confirmed", FinishedAtMs: ms}
			w.Attempt, step = &cp, "reconcile/"+cp.AttemptID
		}
		rc := kvintent.Settle(&rec, v, step, nil, nil, ms)
		w.Receipt = &rc
		if kv.IndeterminateReceipt(&rc) {
			w.Indeterminate, w.SinceMs = 1, ms
		} else {
			w.Indeterminate = -1
		}
		if err := j.Commit(fp, w); err != nil {
			t.Fatal(err)
		}
	}
}

var (
	confirmed = kv.Verdict{Status: schema.StatusConfirmed, NextAction: schema.NextNone, Attempted: true, Settled: true}
	required  = kv.Verdict{Status: schema.StatusReconciliationRequired, NextAction: schema.NextReconcile, Attempted: true}
	exhausted = kv.Verdict{Status: schema.StatusReconciliationRequired, NextAction: schema.NextNone, Attempted: true, Exhausted: true}
	acked     = kv.Verdict{Status: schema.StatusAcknowledged, NextAction: schema.NextVerify, Attempted: true}
)

// keysOf lists the bucket's keys that belong to fingerprint n.
func keysOf(t *testing.T, b jetstream.KeyValue, n int) []string {
	t.Helper()
	l, err := b.ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for k := range l.Keys() {
		if strings.Contains(k, kv.Hex(fingerprint(n))) {
			out = append(out, k)
		}
	}
	return out
}

// The sweep of a replicated journal removes finished records past the
// horizon with everything they own, keeps every record that is not
// finished however old, and is safe with several processors sweeping at
// once; a kept record is not read again by the next sweep.
func testSweep(t *testing.T, url string, replicas int) {
	js, bucket := sweepJournals(t, url, replicas, 3)
	const horizon = 30 * 24 * time.Hour
	old := time.Now().Add(-2 * horizon).UnixMilli() // the processors' clock when they were written
	// Past the horizon:
	intent(t, js[0], 1, old, required, confirmed)           // finished: goes, with 2 receipts and an attempt
	intent(t, js[1], 2, old, required, required, exhausted) // waits for an operator: kept
	intent(t, js[2], 3, old)                                // in flight: kept
	intent(t, js[0], 4, old, acked)                         // being verified: kept
	intent(t, js[1], 5, old, required)                      // being reconciled: kept
	ended := schema.ProposalRef{Host: "h", ProposalID: "ended-old"}
	if err := js[0].Commit(fingerprint(7), kv.IntentWrites{Ended: &kv.EndedProposal{Ref: ended, Ended: kv.Ended{Phase: schema.PhaseAuthorization, Code: schema.CodeGrantExpired, AtMs: old}}}); err != nil {
		t.Fatal(err)
	}
	// Nothing sent, only a proposal ended at dispatch's re-check: goes.
	endsOnly := kv.NewIntent(kv.Identity{Fingerprint: fingerprint(10), IdempotencyKey: kv.Hex(fingerprint(10)), Target: schema.Target{Provider: "demo", Referent: "r"}}, "fake", old)
	endsOnly.End(kv.EndedProposal{Ref: schema.ProposalRef{Host: "h", ProposalID: "p10"}, Ended: kv.Ended{Phase: schema.PhaseAuthorization, Code: schema.CodeGrantExpired, AtMs: old}})
	if err := js[2].Commit(fingerprint(10), kv.IntentWrites{Record: &endsOnly}); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	// Within the horizon: a finished one, and an end.
	intent(t, js[1], 8, old, confirmed)
	recent := schema.ProposalRef{Host: "h", ProposalID: "ended-recent"}
	if err := js[0].Commit(fingerprint(9), kv.IntentWrites{Ended: &kv.EndedProposal{Ref: recent, Ended: kv.Ended{AtMs: old}}}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var total kvjs.SweepStats
	var wg sync.WaitGroup
	for _, j := range js {
		wg.Go(func() {
			st, err := j.Sweep(context.Background(), horizon, horizon, cut.Add(horizon))
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total.Intents, total.Ended, total.Kept = total.Intents+st.Intents, total.Ended+st.Ended, total.Kept+st.Kept
			mu.Unlock()
		})
	}
	wg.Wait()
	if total.Intents != 2 || total.Ended != 1 || total.Kept != 3*4 {
		t.Errorf("sweeps: %+v, want 2 intents and 1 end removed once, 4 kept by each", total)
	}
	for _, n := range []int{1, 10} {
		if keys := keysOf(t, bucket, n); len(keys) != 0 {
			t.Errorf("finished intent %d left %v", n, keys)
		}
	}
	for _, j := range js {
		if _, found, err := j.Load(fingerprint(1)); err != nil || found {
			t.Errorf("finished intent: %v %v", found, err)
		}
		if rs, err := j.Receipts(fingerprint(1)); err != nil || len(rs) != 0 {
			t.Errorf("finished intent's receipts: %v %v", rs, err)
		}
		if _, found, err := j.Ended(ended); err != nil || found {
			t.Errorf("old end: %v %v", found, err)
		}
		if _, found, err := j.Ended(recent); err != nil || !found {
			t.Errorf("recent end: %v %v", found, err)
		}
	}
	for n, receipts := range map[int]int{2: 3, 3: 0, 4: 1, 5: 1, 8: 1} {
		rec, found, err := js[2].Load(fingerprint(n))
		if err != nil || !found {
			t.Fatalf("intent %d: %v %v", n, found, err)
		}
		if rs, err := js[2].Receipts(fingerprint(n)); err != nil || len(rs) != receipts || int(rec.ReceiptSeq) != receipts {
			t.Errorf("intent %d: receipts %d (%v), want %d", n, len(rs), err, receipts)
		}
	}
	// The operator's queue still holds the one waiting for them.
	if ind, err := js[0].Indeterminates(); err != nil || len(ind) != 2 {
		t.Errorf("indeterminates after the sweep: %+v %v (want intents 2 and 5)", ind, err)
	}

	// The next sweeps read nothing again that they kept.
	for _, j := range js {
		if st, err := j.Sweep(context.Background(), horizon, horizon, cut.Add(horizon)); err != nil || st != (kvjs.SweepStats{}) {
			t.Errorf("second sweep: %+v %v", st, err)
		}
	}
	// A kept record that is settled later goes once it is old.
	intent(t, js[0], 2, old, confirmed)
	later := time.Now().Add(horizon)
	if st, err := js[1].Sweep(context.Background(), horizon, horizon, later); err != nil || st.Intents != 2 || st.Kept != 0 {
		t.Errorf("sweep after intent 2 was settled: %+v %v (want it and intent 8)", st, err)
	}
	if keys := keysOf(t, bucket, 2); len(keys) != 0 {
		t.Errorf("the settled intent left %v", keys)
	}
	// A new life of a swept fingerprint starts clean.
	intent(t, js[2], 1, time.Now().UnixMilli(), confirmed)
	if rs, err := js[0].Receipts(fingerprint(1)); err != nil || len(rs) != 1 {
		t.Errorf("new life's receipts: %+v %v", rs, err)
	}
}

func TestSweepR1(t *testing.T) { testSweep(t, servers(t, 1), 1) }
func TestSweepR3(t *testing.T) { testSweep(t, servers(t, 3), 3) }

// BenchmarkSweep measures a sweep of a replicated journal (R1) holding
// n finished intents, each with two receipts and an attempt: "idle", none
// past the horizon (what most sweeps find); "removing", all of them
// (ns/op per intent removed: reported as ns/intent).
func BenchmarkSweep(b *testing.B) {
	const n = 500
	url := testenv.StartServer(b, "").ClientURL()
	b.Run("idle", func(b *testing.B) {
		js, _ := sweepBench(b, url, n)
		b.ResetTimer()
		for range b.N {
			if st, err := js.Sweep(context.Background(), time.Hour, time.Hour, time.Now()); err != nil || st.Intents != 0 {
				b.Fatal(st, err)
			}
		}
	})
	b.Run("removing", func(b *testing.B) {
		var total time.Duration
		for range b.N {
			js, _ := sweepBench(b, url, n)
			start := time.Now()
			if st, err := js.Sweep(context.Background(), time.Hour, time.Hour, time.Now().Add(2*time.Hour)); err != nil || st.Intents != n {
				b.Fatal(st, err)
			}
			total += time.Since(start)
		}
		b.ReportMetric(float64(total.Nanoseconds())/float64(b.N*n), "ns/intent")
	})
}

func sweepBench(b *testing.B, url string, n int) (*kvjs.Journal, jetstream.KeyValue) {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	js, kv := sweepJournals(b, url, 1, 1)
	for i := range n {
		intent(b, js[0], i+1, 1, required, confirmed)
	}
	return js[0], kv
}
