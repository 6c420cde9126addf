package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv"

	kvjs "github.com/portcullis/portcullis/kv/jetstream"

	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/subjects"
)

// store.journal decides the streams: a replicated journal adds its bucket
// and the approvals' (reads from the leader only) and gives the
// reconciliation and authorization timers streams their schedules; going
// back to a local journal keeps the schedules, which the server cannot
// turn off, and the same processor starts. The stages' hand-off streams
// never take schedules: they refuse when full, never drop a hand-off. The
// approvals follow the journal.
func TestJournalStreams(t *testing.T) {
	srv := testenv.StartServer(t, "")
	cfg := config.Defaults()
	cfg.NATS = config.NATS{URL: srv.ClientURL(), Replicas: 1}
	cfg.Store.Dir = t.TempDir()
	cfg.Metrics.Listen = ""
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	subj := subjects.Default()
	stream := func(name string) jetstream.StreamConfig {
		st, err := js.Stream(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config
	}
	for _, step := range []struct {
		journal   string
		schedules bool
	}{{config.JournalLocal, false}, {config.JournalReplicated, true}, {config.JournalLocal, true}, {config.JournalAuto, true}} {
		cfg.Store.Journal = step.journal
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		p, err := engine.Start(ctx, engine.Options{Config: cfg})
		cancel()
		if err != nil {
			t.Fatalf("journal %s: %v", step.journal, err)
		}
		if _, replicated := p.Journal().(*kvjs.Journal); replicated != cfg.ReplicatedJournal() {
			t.Errorf("journal %s: a %T", step.journal, p.Journal())
		}
		if _, replicated := p.Approvals().(*kvjs.Approvals); replicated != cfg.ReplicatedJournal() {
			t.Errorf("journal %s: approvals %T", step.journal, p.Approvals())
		}
		for _, name := range []string{subjects.StageReconciliation, subjects.StageAuthorization} {
			if c := stream(subj.TimersStream(name)); c.AllowMsgSchedules != step.schedules || (c.Discard == jetstream.DiscardOld) != step.schedules ||
				len(c.Subjects) != map[bool]int{false: 1, true: 2}[step.schedules] {
				t.Errorf("journal %s: %s timers stream %+v", step.journal, name, c)
			}
			if name == subjects.StageReconciliation {
				continue // only timers reach it: no stream of hand-offs
			}
			if c := stream(subj.StageStream(name)); c.AllowMsgSchedules || c.Discard != jetstream.DiscardNew || c.Retention != jetstream.WorkQueuePolicy ||
				len(c.Subjects) != 1 || c.Subjects[0] != subj.StageKind(name, subjects.KindProposal) {
				t.Errorf("journal %s: %s stream %+v", step.journal, name, c)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := js.Stream(context.Background(), "KV_"+subj.JournalBucket())
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.AllowDirect || c.Replicas != 1 {
		t.Errorf("journal bucket %+v", c)
	}
	st, err = js.Stream(context.Background(), "KV_"+subj.ApprovalsBucket())
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.AllowDirect || c.Replicas != 1 || c.MaxAge != engine.ApprovalsHorizon(cfg) || c.MaxAge < cfg.Streams.MaxAge {
		t.Errorf("approvals bucket %+v", c)
	}
}

// A store that holds a local journal never starts on a replicated one,
// which would not know the intents it dispatched.
func TestLocalJournalIsNotLeftBehind(t *testing.T) {
	cfg, st := externalWithStore(t)
	b := st.NewBatch()
	b.PutIntent("sha256:"+strings.Repeat("ab", 32), map[string]string{"state": "done"})
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	st.Close()
	for _, j := range []string{config.JournalAuto, config.JournalReplicated} {
		cfg.Store.Journal = j
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		p, err := engine.Start(ctx, engine.Options{Config: cfg})
		cancel()
		if err == nil {
			p.Close()
			t.Fatalf("journal %s: started on a store with a local journal", j)
		}
		if !strings.Contains(err.Error(), "local dispatch journal") {
			t.Errorf("journal %s: %v", j, err)
		}
	}
	cfg.Store.Journal = config.JournalLocal
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := engine.Start(ctx, engine.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// A store with proposals parked in it never starts on replicated approvals,
// which would not know them (their timers and grants would find nothing).
func TestLocalApprovalsAreNotLeftBehind(t *testing.T) {
	cfg, st := externalWithStore(t)
	ap, err := pebble.NewApprovals(st)
	if err != nil {
		t.Fatal(err)
	}
	ref := testenv.Ref("parked")
	r := kv.Approval{Host: ref.Host, ProposalID: ref.ProposalID, Fingerprint: "sha256:" + strings.Repeat("ab", 32), State: kv.StateParked, ExpiresAtMs: 1}
	if err := ap.Commit(ref, kv.ApprovalWrites{Record: &r}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	cfg.Store.Journal = config.JournalReplicated
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := engine.Start(ctx, engine.Options{Config: cfg})
	if err == nil {
		p.Close()
		t.Fatal("started replicated approvals on a store with parked ones")
	}
	if !strings.Contains(err.Error(), "parked for approval") {
		t.Errorf("start: %v", err)
	}
}

// externalWithStore is a configuration on a server of the test's own (no
// embedded one) and its store, open for the test to fill before a
// processor starts on it.
func externalWithStore(t *testing.T) (*config.Config, *pebble.Store) {
	t.Helper()
	cfg := config.Defaults()
	cfg.NATS = config.NATS{URL: testenv.StartServer(t, "").ClientURL(), Replicas: 1}
	cfg.Store.Dir = t.TempDir()
	cfg.Metrics.Listen = ""
	st, err := pebble.Open(cfg.Store.Dir, pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, st
}

// A Scheduled stage's stream that an earlier version gave message
// schedules (the server never turns them off) keeps taking the stage's
// timers while it holds schedules that have not fired: the processor starts
// on it as it is, makes no timers stream for that stage, and consumes its
// timers from it. Once none is pending, a start replaces it.
func TestLegacyScheduledStream(t *testing.T) {
	srv := testenv.StartServer(t, "")
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	subj := subjects.Default()
	ctx := context.Background()
	legacy := jetstream.StreamConfig{Name: subj.StageStream(subjects.StageReconciliation),
		Subjects:  []string{subj.StageAll(subjects.StageReconciliation), subj.Schedules(subjects.StageReconciliation)},
		Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, Discard: jetstream.DiscardOld, AllowMsgSchedules: true, AllowRollup: true}
	if _, err := js.CreateStream(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	// A poll an hour away, armed by the earlier version.
	due := nats.NewMsg(subj.Schedule(subjects.StageReconciliation, "poll-1"))
	due.Header.Set("Nats-Schedule", "@at "+time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano))
	due.Header.Set("Nats-Schedule-Target", subj.Stage(subjects.StageReconciliation, subjects.KindTimer, strings.Repeat("ab", 32)))
	if _, err := js.PublishMsg(ctx, due); err != nil {
		t.Fatal(err)
	}
	cfg := config.Defaults()
	cfg.NATS = config.NATS{URL: srv.ClientURL(), Replicas: 1}
	cfg.Store.Dir, cfg.Metrics.Listen, cfg.Store.Journal = t.TempDir(), "", config.JournalReplicated
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	p, err := engine.Start(sctx, engine.Options{Config: cfg})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	st, err := js.Stream(ctx, subj.StageStream(subjects.StageReconciliation))
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; !c.AllowMsgSchedules || len(c.Subjects) != 2 || c.Subjects[0] != subj.StageAll(subjects.StageReconciliation) {
		t.Errorf("legacy stream changed: %+v", c)
	}
	if _, err := js.Stream(ctx, subj.TimersStream(subjects.StageReconciliation)); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("a timers stream beside the legacy one: %v", err)
	}
	if _, err := js.Stream(ctx, subj.TimersStream(subjects.StageAuthorization)); err != nil {
		t.Errorf("the other stage's timers stream: %v", err)
	}
	// Its one consumer reads the timers from it.
	if _, err := js.Consumer(ctx, subj.StageStream(subjects.StageReconciliation), subjects.StageReconciliation); err != nil {
		t.Errorf("the stage's consumer: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	// The schedule gone (fired, say): the next start replaces the stream
	// with the timers stream.
	st, _ = js.Stream(ctx, subj.StageStream(subjects.StageReconciliation))
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(subj.Schedules(subjects.StageReconciliation))); err != nil {
		t.Fatal(err)
	}
	sctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	p, err = engine.Start(sctx, engine.Options{Config: cfg})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, subj.StageStream(subjects.StageReconciliation)); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("the legacy stream stayed: %v", err)
	}
	if _, err := js.Stream(ctx, subj.TimersStream(subjects.StageReconciliation)); err != nil {
		t.Errorf("no timers stream: %v", err)
	}
}
