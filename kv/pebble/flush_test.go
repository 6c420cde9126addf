package pebble

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/portcullis/portcullis/kv"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/portcullis/portcullis/schema"
)

// Flush makes NoSync writes durable: after a crash that keeps only what
// was synced, every outcome recorded before a Flush returned is there,
// whichever goroutine flushed; one recorded after it may be lost.
func TestFlushMakesNoSyncWritesDurable(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s, err := Open("db", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	ref := func(i int) schema.ProposalRef {
		return schema.ProposalRef{Host: "h", ProposalID: fmt.Sprintf("p-%03d", i)}
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g * 50; i < g*50+50; i++ {
				o := schema.NewOutcome(ref(i), schema.KindConfirmed, int64(i))
				if err := s.RecordOutcomes([]schema.Outcome{o}); err != nil {
					t.Error(err)
					return
				}
				if i%7 == 0 {
					if err := s.Flush(); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil { // nothing new: returns at once
		t.Fatal(err)
	}
	r := crash(t, fs, s)
	for i := range 400 {
		if _, found, err := r.LastOutcome(ref(i)); err != nil || !found {
			t.Fatalf("outcome %d lost after a flush: %v %v", i, found, err)
		}
	}
}

// Without a Flush, a NoSync write may be lost in a crash (which is why the
// runner flushes before acking).
func TestNoSyncWithoutFlushMayBeLost(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s, err := Open("db", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	ref := schema.ProposalRef{Host: "h", ProposalID: "p"}
	if err := s.RecordOutcomes([]schema.Outcome{schema.NewOutcome(ref, schema.KindConfirmed, 1)}); err != nil {
		t.Fatal(err)
	}
	r := crash(t, fs, s)
	if _, found, _ := r.LastOutcome(ref); found {
		t.Skip("the write reached the disk anyway (Pebble synced for its own reasons)")
	}
}

// Compact leaves every record readable, and a closed store refuses it.
func TestCompact(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ref := schema.ProposalRef{Host: "h", ProposalID: "p-1"}
	b := s.NewBatch()
	b.PutAdmitted(ref, kv.Admitted{Digest: "d", Seq: 1})
	if err := b.Commit(Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(t.Context()); err != nil {
		t.Fatal(err)
	}
	if a, found, err := s.Admitted(ref); err != nil || !found || a.Digest != "d" {
		t.Errorf("after Compact: %+v %v %v", a, found, err)
	}
	s.Close()
	if err := s.Compact(t.Context()); !errors.Is(err, ErrClosed) {
		t.Errorf("Compact of a closed store: %v", err)
	}
}

// crash is s's store as a crash would leave it: what was synced and
// nothing else, reopened (closed when the test ends). s is closed.
func crash(t *testing.T, fs *vfs.MemFS, s *Store) *Store {
	t.Helper()
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	s.Close()
	r, err := Open("db", Options{FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// RecordOutcomes keeps a proposal's latest outcome: a stale one recorded
// late (its decision made on a record that moved on) does not replace a
// newer one, so that a repeat never replays an older truth.
func TestRecordOutcomesKeepsTheLatest(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ref := schema.ProposalRef{Host: "h", ProposalID: "p-1"}
	receipt := func(kind schema.Kind, id string, at int64) schema.Outcome {
		o := schema.NewOutcome(ref, kind, at)
		o.Receipt = &schema.Receipt{ReceiptID: id, RecordedAtMs: at}
		return o
	}
	for _, o := range []schema.Outcome{
		schema.NewOutcome(ref, schema.KindNeedsApproval, 1),
		receipt(schema.KindReconciliationRequired, "r1", 10),
		receipt(schema.KindConfirmed, "r2", 20),
		receipt(schema.KindReconciliationRequired, "r1", 30), // stale: r1 again, published late
		schema.NewOutcome(ref, schema.KindNeedsApproval, 1),
	} {
		if err := s.RecordOutcomes([]schema.Outcome{o}); err != nil {
			t.Fatal(err)
		}
	}
	if o, found, err := s.LastOutcome(ref); err != nil || !found || o.Kind != schema.KindConfirmed || o.Receipt.ReceiptID != "r2" {
		t.Errorf("recorded: %+v %v %v, want CONFIRMED r2", o, found, err)
	}
}
