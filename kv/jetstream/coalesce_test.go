package jetstream_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/testenv"
	kvjs "github.com/portcullis/portcullis/kv/jetstream"
	"github.com/portcullis/portcullis/schema"
)

// revision is the bucket's count of writes of fp's snapshot (its
// revision: one per write, whoever wrote).
func revision(t *testing.T, kv jetstream.KeyValue) uint64 {
	t.Helper()
	e, err := kv.Get(context.Background(), kvjs.ActivityKey(fp))
	if err != nil {
		t.Fatal(err)
	}
	return e.Revision()
}

// Authorization's edit, which dispatch's is expected to follow
// (UpdateFollowed), and dispatch's a few milliseconds later are written
// once: one write per proposal where there were two. The second ends the
// wait at once (the linger here is far longer than the test takes), and
// each call returns once the snapshot holding its edit is stored.
func TestFollowedUpdateWrittenWithTheNext(t *testing.T) {
	kv := activityBucket(t)
	ctx := context.Background()
	s := &kvjs.Activity{KV: kv, Linger: time.Minute}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); errs[0] = s.UpdateFollowed(ctx, fp, addProposal("authorized")) }()
	time.Sleep(20 * time.Millisecond)
	go func() { defer wg.Done(); errs[1] = s.Update(ctx, fp, addProposal("dispatched")) }()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %s: the second edit did not end the wait", d)
	}
	got, err := s.Get(ctx, fp)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Proposals) != 2 || got.Proposals[0].ProposalID != "authorized" || got.Proposals[1].ProposalID != "dispatched" {
		t.Fatalf("proposals %v, want both edits in order", got.Proposals)
	}
	if n := revision(t, kv); n != 1 {
		t.Errorf("%d writes for two edits, want 1", n)
	}
	if n := s.Writes(); n != 1 {
		t.Errorf("Writes() = %d, want 1", n)
	}

	// One that nothing follows returns at once and is written alone once
	// the linger passes.
	s.Linger = 100 * time.Millisecond
	if err := s.UpdateFollowed(ctx, fp, addProposal("alone")); err != nil {
		t.Fatal(err)
	}
	if n := revision(t, kv); n != 1 {
		t.Errorf("revision %d right after UpdateFollowed: written before the linger", n)
	}
	testenv.WaitFor(t, "the lone edit written", func() bool { return revision(t, kv) == 2 })
	if err := s.Update(ctx, fp, addProposal("plain")); err != nil {
		t.Fatal(err)
	}
	if n := revision(t, kv); n != 3 {
		t.Errorf("revision %d, want 3", n)
	}
}

// Close writes the edits still waiting, at once.
func TestCloseWritesWaitingEdits(t *testing.T) {
	kv := activityBucket(t)
	s := &kvjs.Activity{KV: kv, Linger: time.Hour}
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if err := s.UpdateFollowed(ctx, fp, addProposal(id)); err != nil {
			t.Fatal(err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := s.Close(cctx); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, fp)
	if err != nil || len(got.Proposals) != 2 {
		t.Fatalf("after Close: %+v, %v", got, err)
	}
	if n := revision(t, kv); n != 1 {
		t.Errorf("%d writes, want 1", n)
	}
	// After Close an edit is written before the call returns.
	if err := s.UpdateFollowed(ctx, fp, addProposal("c")); err != nil {
		t.Fatal(err)
	}
	if n := revision(t, kv); n != 2 {
		t.Errorf("revision %d after a late edit, want 2", n)
	}
}

// Without a linger, edits made while a write of the intent is under way
// share the next write: many at once are written in far fewer writes than
// edits, none lost, and the last write holds every edit.
func TestConcurrentUpdatesCoalesced(t *testing.T) {
	kv := activityBucket(t)
	ctx := context.Background()
	s := &kvjs.Activity{KV: kv}
	const n = 32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Update(ctx, fp, addProposal(fmt.Sprintf("p%02d", i)))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Get(ctx, fp)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Proposals) != n {
		t.Fatalf("%d proposals, want %d: an edit was lost", len(got.Proposals), n)
	}
	if w := revision(t, kv); w >= n {
		t.Errorf("%d writes for %d concurrent edits: none coalesced", w, n)
	} else {
		t.Logf("%d writes for %d concurrent edits", w, n)
	}
}

// An edit that changes nothing (a redelivered input's, applied again) is
// not written: a write per real change of state.
func TestUnchangedSnapshotNotWritten(t *testing.T) {
	kv := activityBucket(t)
	ctx := context.Background()
	now := int64(1000)
	s := &kvjs.Activity{KV: kv, Now: func() int64 { now++; return now }}
	status := func(st string) func(a *schema.Activity) { return func(a *schema.Activity) { a.Status = st } }
	for _, edit := range []func(a *schema.Activity){addProposal("p1"), addProposal("p1"), status("AUTHORIZED"), status("AUTHORIZED"), addProposal("p1")} {
		if err := s.Update(ctx, fp, edit); err != nil {
			t.Fatal(err)
		}
	}
	if n := revision(t, kv); n != 2 {
		t.Errorf("%d writes for 2 changes of state (5 edits), want 2", n)
	}
	// Another store, which did not write it, reads nothing first: it
	// writes (its create is refused, it reads, edits and compares to what
	// it read) only a change.
	other := &kvjs.Activity{KV: kv, Now: s.Now}
	if err := other.Update(ctx, fp, status("AUTHORIZED")); err != nil {
		t.Fatal(err)
	}
	if n := revision(t, kv); n != 2 {
		t.Errorf("another store rewrote an unchanged snapshot: revision %d", n)
	}
	got, err := s.Get(ctx, fp)
	if err != nil || got.Status != "AUTHORIZED" || len(got.Proposals) != 1 || got.UpdatedAtMs == 0 {
		t.Fatalf("snapshot %+v, %v", got, err)
	}
}

// A batch's write that fails fails every edit made to wait on it (each
// caller retries, as the runner does a completion), and an edit that
// waited (UpdateFollowed, whose caller has gone on) is retried until
// written: here the bucket is gone for a while.
func TestFailedWriteRetried(t *testing.T) {
	js, err := jetstream.New(testenv.Connect(t, testenv.StartServer(t, "")))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "activity"})
	if err != nil {
		t.Fatal(err)
	}
	s := &kvjs.Activity{KV: kv, Linger: time.Millisecond}
	cfg := jetstream.KeyValueConfig{Bucket: kv.Bucket()}
	if err := js.DeleteKeyValue(ctx, kv.Bucket()); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateFollowed(ctx, fp, addProposal("waited")); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.Update(short, fp, addProposal("waiting")); err == nil {
		t.Fatal("an edit reported written into a bucket that is gone")
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := js.CreateKeyValue(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the waiting edit written once the bucket is back", func() bool {
		got, err := s.Get(ctx, fp)
		return err == nil && len(got.Proposals) >= 1 && got.Proposals[0].ProposalID == "waited"
	})
}
