package retention_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/portcullis/portcullis/internal/bench"
	"github.com/portcullis/portcullis/internal/retention"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/intent"
	"github.com/portcullis/portcullis/schema"
)

// fresh numbers new proposals, above every filled one.
var fresh atomic.Int64

func init() { fresh.Store(1 << 40) }

// Pre-filled stores, one per size, shared by the benchmark's runs and
// removed when the tests end.
var (
	fillDir  string
	fillMu   sync.Mutex
	filled   = map[int]*pebble.Store{}
	fillTime = map[int]time.Duration{}
)

func cleanupFilled() {
	fillMu.Lock()
	defer fillMu.Unlock()
	for _, s := range filled {
		s.Close()
	}
	if fillDir != "" {
		os.RemoveAll(fillDir)
	}
}

// filledStore is a store holding n finished intents, each with the records
// of the proposal that made it (admission, delivery, approval decision,
// journal record, receipt, last outcome, and their expiry index entries),
// written through the same kv methods the stages use, in NoSync batches of
// 1000 intents with one Flush at the end, then compacted down (as Pebble
// would settle by itself) so that no compaction of the fill runs during
// the measurement.
func filledStore(b *testing.B, n int) *pebble.Store {
	fillMu.Lock()
	defer fillMu.Unlock()
	if s, ok := filled[n]; ok {
		return s
	}
	if fillDir == "" {
		d, err := os.MkdirTemp("", "portcullis-retention-bench-")
		if err != nil {
			b.Fatal(err)
		}
		fillDir = d
	}
	c := newClock(t0)
	s, err := pebble.Open(filepath.Join(fillDir, fmt.Sprint(n)), pebble.Options{Now: c.Now})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for base := 0; base < n; base += 1000 {
		batch := s.NewBatch()
		for i := base; i < min(base+1000, n); i++ {
			fill(batch, i, c.Now())
		}
		if err := batch.Commit(pebble.NoSync); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := s.Compact(b.Context()); err != nil {
		b.Fatal(err)
	}
	filled[n], fillTime[n] = s, time.Since(start)
	return s
}

// fill adds proposal n's records, as they stand once it is confirmed.
func fill(b *pebble.Batch, n int, now int64) {
	ref, fp := refOf(n), fingerprintOf(n)
	b.PutAdmitted(ref, kv.Admitted{Digest: fp[7:], Seq: uint64(n), Forwarded: true, AtMs: now})
	b.PutDelivery(ref.Host, "delivery:"+ref.ProposalID, kv.Delivery{ProposalID: ref.ProposalID, Seq: uint64(n), AtMs: now})
	b.PutApproval(ref, &kv.Approval{Host: ref.Host, ProposalID: ref.ProposalID, Fingerprint: fp, Referent: "sku-1001", Seq: uint64(n),
		State: kv.StatePermitted, ArrivedAtMs: now, DecidedBy: fmt.Sprintf("ACTIONS_AUTHORIZATION/%d", n), DecidedAtMs: now,
		Evaluations: []schema.PolicyEvaluation{{Layer: "grant", Outcome: "pass"}}}, false, 0)
	rec := stockIntent(fp, now)
	rec.AddProposal(ref)
	rec.DispatchAttempts, rec.InFlightAtMs = 1, now
	rc := intent.Settle(&rec, kv.Verdict{Status: schema.StatusConfirmed, NextAction: schema.NextNone, Attempted: true,
		ProviderActionID: "inv:" + fp[7:23]}, "dispatch", nil, nil, now)
	b.AppendReceipt(rec.ReceiptSeq, rc)
	b.PutIntent(fp, &rec)
	b.PutOutcome(intent.Outcome(rec, ref, now))
}

// hotPath is one new proposal's store traffic, as the stages make it:
// admission reads its delivery and admission records (absent) and writes
// them synced; authorization loads its approval record (absent) and
// commits the decision (compare-and-set: loads again, writes synced);
// dispatch reads the proposal's end and the fingerprint's journal (absent),
// writes the in-flight record synced, then the receipt synced; the runner
// records the outcome (NoSync) and flushes before the ack.
func hotPath(s *pebble.Store, ap *pebble.Approvals, n int, now int64) error {
	ref, fp := refOf(n), fingerprintOf(n)
	if _, _, err := s.Delivery(ref.Host, "delivery:"+ref.ProposalID); err != nil {
		return err
	}
	if _, _, err := s.Admitted(ref); err != nil {
		return err
	}
	b := s.NewBatch()
	b.PutAdmitted(ref, kv.Admitted{Digest: fp[7:], Seq: uint64(n), AtMs: now})
	b.PutDelivery(ref.Host, "delivery:"+ref.ProposalID, kv.Delivery{ProposalID: ref.ProposalID, Seq: uint64(n), AtMs: now})
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	if _, _, err := ap.Load(ref); err != nil {
		return err
	}
	rec := kv.Approval{Host: ref.Host, ProposalID: ref.ProposalID, Fingerprint: fp, Referent: "sku-1001", Seq: uint64(n),
		State: kv.StatePermitted, ArrivedAtMs: now, DecidedBy: fmt.Sprintf("ACTIONS_AUTHORIZATION/%d", n), DecidedAtMs: now,
		Evaluations: []schema.PolicyEvaluation{{Layer: "grant", Outcome: "pass"}}}
	if err := ap.Commit(ref, kv.ApprovalWrites{From: kv.StateNone, Record: &rec}); err != nil {
		return err
	}
	jr := pebble.NewJournal(s)
	unlock := jr.Lock(fp)
	defer unlock()
	if _, _, err := jr.Ended(ref); err != nil {
		return err
	}
	j, found, err := jr.Load(fp)
	if err != nil || found {
		return fmt.Errorf("journal of a new intent: found %v, %v", found, err)
	}
	j = stockIntent(fp, now)
	j.AddProposal(ref)
	j.State, j.DispatchAttempts, j.InFlightAtMs = kv.StateInFlight, 1, now
	if err := jr.Commit(fp, kv.IntentWrites{Record: &j}); err != nil {
		return err
	}
	rc := intent.Settle(&j, kv.Verdict{Status: schema.StatusConfirmed, NextAction: schema.NextNone, Attempted: true,
		ProviderActionID: "inv:" + fp[7:23]}, "dispatch", nil, nil, now)
	if err := jr.Commit(fp, kv.IntentWrites{Record: &j, Receipt: &rc}); err != nil {
		return err
	}
	if err := s.RecordOutcomes([]schema.Outcome{intent.Outcome(j, ref, now)}); err != nil {
		return err
	}
	return s.Flush()
}

// BenchmarkHotPathStored is one new proposal's store traffic (hotPath)
// against a store already holding 10,000 to 1,000,000 intents, from 16
// goroutines at once as the stages run (their synced commits share
// fsyncs). The cost per proposal should not grow with what is stored:
// lookups of keys that do not exist yet are answered by bloom filters.
// Besides wall time (ns/op, fsync-bound and so disturbed by whatever
// else uses the disk) it reports the process's CPU time per proposal
// (cpu-ns/op), which waiting on fsyncs does not count.
func BenchmarkHotPathStored(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("intents=%d", n), func(b *testing.B) {
			s := filledStore(b, n)
			ap, err := pebble.NewApprovals(s)
			if err != nil {
				b.Fatal(err)
			}
			b.SetParallelism(8) // 16 goroutines on 2 cores
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := bench.CPUTime()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := hotPath(s, ap, int(fresh.Add(1)), t0+hour); err != nil {
						b.Error(err)
						return
					}
				}
			})
			if cpu := bench.CPUTime() - cpu0; cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
			// After the run: ResetTimer drops metrics reported before it.
			disk, _ := s.DiskUsage()
			b.ReportMetric(float64(disk)/(1<<20), "store-MiB")
		})
	}
}

// BenchmarkSteadyStream writes proposals (each the full set of records,
// Sync where the stages sync) at a simulated 1,000 an hour with horizons of
// 6 and 12 hours, sweeping every simulated minute; run it with
// -benchtime=12000x, 24000x, 48000x (12, 24, 48 simulated hours): the
// records and bytes kept at the end level off at about a horizon's worth
// however much was written.
func BenchmarkSteadyStream(b *testing.B) {
	c := newClock(t0)
	s, err := pebble.Open(b.TempDir(), pebble.Options{Now: c.Now})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	sw := &retention.Sweeper{Store: s, Horizons: retention.Horizons{Proposals: 6 * time.Hour, Receipts: 12 * time.Hour}, Now: c.Now}
	const perHour = 1000
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if err := proposal(s, n, c.Now(), true); err != nil {
			b.Fatal(err)
		}
		n++
		c.Advance(hour / perHour)
		if n%(perHour/60) == 0 {
			if _, err := sw.Sweep(b.Context()); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	counts, err := s.Count()
	if err != nil {
		b.Fatal(err)
	}
	total := 0
	for _, v := range counts {
		total += v
	}
	disk, _ := s.DiskUsage()
	b.ReportMetric(float64(n), "written")
	b.ReportMetric(float64(total), "records-kept")
	b.ReportMetric(float64(counts['f']), "intents-kept")
	b.ReportMetric(float64(disk)/(1<<20), "store-MiB")
}
