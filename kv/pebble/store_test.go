package pebble

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/portcullis/portcullis/kv"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/schema"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t testing.TB) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStringKeysRoundTripAndOrder(t *testing.T) {
	in := []string{"", "a", "a\x00", "a\x00b", "a\x01", "ab", "b", "\x00", "\x00\x00", "\xff", "a\xff"}
	var keys [][]byte
	for _, s := range in {
		k := appendString([]byte{'x'}, s)
		got, rest, err := readString(k[1:])
		if err != nil || got != s || len(rest) != 0 {
			t.Fatalf("round trip %q: %q %q %v", s, got, rest, err)
		}
		keys = append(keys, k)
	}
	sorted := slices.Clone(in)
	slices.Sort(sorted)
	slices.SortFunc(keys, bytes.Compare)
	for i, k := range keys {
		got, _, _ := readString(k[1:])
		if got != sorted[i] {
			t.Fatalf("order: key %d is %q, want %q", i, got, sorted[i])
		}
	}
}

func FuzzStringKeys(f *testing.F) {
	f.Add("a", "b")
	f.Add("a\x00", "a")
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := appendString(nil, a), appendString(nil, b)
		if got, rest, err := readString(ka); err != nil || got != a || len(rest) != 0 {
			t.Fatalf("round trip %q", a)
		}
		if c := bytes.Compare(ka, kb); c != strings.Compare(a, b) {
			t.Fatalf("order of %q, %q: keys %d, strings %d", a, b, c, strings.Compare(a, b))
		}
		// A component is never a prefix of another one's encoding: prefix
		// scans on a component cannot match a longer one.
		if a != b && bytes.HasPrefix(kb, ka) {
			t.Fatalf("%q's key is a prefix of %q's", a, b)
		}
	})
}

func TestDeliveryAdmittedOutcomeEnded(t *testing.T) {
	s := open(t)
	a1 := schema.ProposalRef{Host: "a", ProposalID: "p1"}
	b1 := schema.ProposalRef{Host: "b", ProposalID: "p1"}
	if _, found, err := s.Delivery("a", "d1"); found || err != nil {
		t.Fatal(found, err)
	}
	b := s.NewBatch()
	b.PutDelivery("a", "d1", kv.Delivery{ProposalID: "p1", Seq: 7})
	b.PutAdmitted(a1, kv.Admitted{Digest: "ab", Seq: 7})
	b.PutOutcome(schema.NewOutcome(a1, schema.KindDenied, 5))
	b.PutEnded(a1, kv.Ended{Phase: schema.PhaseAuthorization, Code: schema.CodeGrantExpired, AtMs: 5})
	if err := b.Commit(Sync); err != nil {
		t.Fatal(err)
	}
	d, found, err := s.Delivery("a", "d1")
	if err != nil || !found || d.ProposalID != "p1" || d.Seq != 7 {
		t.Fatal(d, found, err)
	}
	o, found, err := s.LastOutcome(a1)
	if err != nil || !found || o.Kind != schema.KindDenied || o.To() != a1 {
		t.Fatal(o, found, err)
	}
	if ad, found, _ := s.Admitted(a1); !found || ad.Digest != "ab" {
		t.Errorf("admitted = %+v %v", ad, found)
	}
	if e, found, _ := s.Ended(a1); !found || e.Code != schema.CodeGrantExpired {
		t.Errorf("ended = %+v %v", e, found)
	}
	// Every record is per host: host b's proposal "p1" and delivery "d1"
	// are others.
	if _, found, _ := s.Delivery("b", "d1"); found {
		t.Error("delivery ids are per host")
	}
	if _, found, _ := s.LastOutcome(b1); found {
		t.Error("outcomes are per host")
	}
	if _, found, _ := s.Admitted(b1); found {
		t.Error("proposal ids are per host")
	}
	if _, found, _ := s.Ended(b1); found {
		t.Error("ends are per host")
	}
	// Escaping keeps ("a.b", "c") and ("a", "b.c")-like splits apart.
	x := schema.ProposalRef{Host: "a\x00", ProposalID: "p1"}
	if _, found, _ := s.Admitted(x); found {
		t.Error("host/id split is ambiguous")
	}
}

func TestTimers(t *testing.T) {
	s := open(t)
	b := s.NewBatch()
	b.AddTimer(kv.Timer{ID: "b", DueMs: 200, Subject: "x.b"})
	b.AddTimer(kv.Timer{ID: "a", DueMs: 100, Subject: "x.a"})
	b.AddTimer(kv.Timer{ID: "c", DueMs: 300, Subject: "x.c"})
	if err := b.Commit(Sync); err != nil {
		t.Fatal(err)
	}
	b = s.NewBatch()
	b.AddTimer(kv.Timer{ID: "c", DueMs: 50, Subject: "x.c2"}) // replaces c
	if err := b.Commit(Sync); err != nil {
		t.Fatal(err)
	}
	if due, ok, err := s.NextTimerDue(); err != nil || !ok || due != 50 {
		t.Fatal(due, ok, err)
	}
	due, err := s.DueTimers(200, 10)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tm := range due {
		ids = append(ids, tm.ID)
	}
	if !slices.Equal(ids, []string{"c", "a", "b"}) || due[0].Subject != "x.c2" {
		t.Fatalf("due = %+v", due)
	}
	b = s.NewBatch()
	b.DeleteFired(due[0])
	b.CancelTimer("a")
	if err := b.Commit(Sync); err != nil {
		t.Fatal(err)
	}
	due, _ = s.DueTimers(1000, 10)
	if len(due) != 1 || due[0].ID != "b" {
		t.Fatalf("after delete: %+v", due)
	}
	if _, found, _ := s.Timer("c"); found {
		t.Error("fired timer still indexed")
	}
}

func TestClosedStoreRefuses(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal("second close:", err)
	}
	if _, _, err := s.Delivery("h", "d"); !errors.Is(err, ErrClosed) {
		t.Errorf("get after close: %v", err)
	}
	b := s.NewBatch()
	b.PutOutcome(schema.NewOutcome(schema.ProposalRef{Host: "h", ProposalID: "p"}, schema.KindDenied, 1))
	if err := b.Commit(Sync); !errors.Is(err, ErrClosed) {
		t.Errorf("commit after close: %v", err)
	}
}

func TestConcurrentCloseIsSafe(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				b := s.NewBatch()
				b.PutOutcome(schema.NewOutcome(schema.ProposalRef{Host: "h", ProposalID: "p"}, schema.KindDenied, int64(i*100+j)))
				if err := b.Commit(Sync); err != nil && !errors.Is(err, ErrClosed) {
					t.Error(err)
				}
			}
		})
	}
	s.Close()
	wg.Wait()
}

// failingWAL opens a store in memory whose WAL writes fail with err while
// armed; it is closed when the test ends.
func failingWAL(t *testing.T, armed *atomic.Bool, err error) *Store {
	t.Helper()
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if armed.Load() && strings.HasSuffix(op.Path, ".log") && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return err
		}
		return nil
	})
	s, oerr := Open("db", Options{FS: errorfs.Wrap(vfs.NewMem(), inj)})
	if oerr != nil {
		t.Fatal(oerr)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A failing WAL write must surface as an error from Commit (Pebble reports
// it through Logger.Fatalf and would otherwise return nil), and the store
// must refuse writes from then on.
func TestFailedWALWriteIsAnError(t *testing.T) {
	var armed atomic.Bool
	s := failingWAL(t, &armed, errorfs.ErrInjected)
	armed.Store(true)
	b := s.NewBatch()
	b.PutOutcome(schema.NewOutcome(schema.ProposalRef{Host: "h", ProposalID: "p"}, schema.KindDenied, 1))
	if err := b.Commit(Sync); !errors.Is(err, ErrFailed) {
		t.Fatalf("commit with failing WAL: %v", err)
	}
	armed.Store(false)
	b = s.NewBatch()
	b.PutOutcome(schema.NewOutcome(schema.ProposalRef{Host: "h", ProposalID: "q"}, schema.KindDenied, 1))
	if err := b.Commit(Sync); !errors.Is(err, ErrFailed) {
		t.Fatalf("commit after failure: %v", err)
	}
}

// A WAL write refused for lack of space fails the store with an error
// that says so (errors.Is ENOSPC): readiness names a full disk.
func TestFailedWALWriteKeepsItsCause(t *testing.T) {
	var armed atomic.Bool
	s := failingWAL(t, &armed, &os.PathError{Op: "write", Path: "000002.log", Err: syscall.ENOSPC})
	armed.Store(true)
	b := s.NewBatch()
	b.PutOutcome(schema.NewOutcome(schema.ProposalRef{Host: "h", ProposalID: "p"}, schema.KindDenied, 1))
	err := b.Commit(Sync)
	if !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("commit on a full disk: %v", err)
	}
	if f := s.Failed(); !errors.Is(f, ErrFailed) || !errors.Is(f, syscall.ENOSPC) {
		t.Fatalf("Failed() = %v", f)
	}
}

// The instance id is created once and survives a reopen; another store
// directory has another one.
func TestInstanceID(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.InstanceID()
	if err != nil || len(id) != 18 {
		t.Fatalf("InstanceID = %q, %v", id, err)
	}
	if again, _ := s.InstanceID(); again != id {
		t.Errorf("second call %q, first %q", again, id)
	}
	s.Close()
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if again, _ := s.InstanceID(); again != id {
		t.Errorf("after reopening %q, before %q", again, id)
	}
	other, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if o, _ := other.InstanceID(); o == id {
		t.Error("two stores share an instance id")
	}
}

func TestHasIntents(t *testing.T) {
	s := open(t)
	if has, err := s.HasIntents(); has || err != nil {
		t.Fatalf("empty store: %v %v", has, err)
	}
	b := s.NewBatch()
	b.PutIntent("sha256:"+strings.Repeat("ab", 32), map[string]string{"state": "done"})
	if err := b.Commit(Sync); err != nil {
		t.Fatal(err)
	}
	if has, err := s.HasIntents(); !has || err != nil {
		t.Fatalf("after a record: %v %v", has, err)
	}
}
