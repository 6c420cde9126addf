package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/portcullis/portcullis/kv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/schema"
)

// Approvals keeps approvals in a JetStream KV bucket shared by every
// processor of a cluster (SPEC §6: "a parked proposal is resumed or
// declined by a grant whichever processor parked it; an approval times
// out once").
//
// # Keys and reads
//
// One key per proposal, "apr.<sha256(host NUL proposal_id)>" (hex), whose
// value is the Record in an envelope with the writer's instance id and a
// random commit id. The bucket's stream has AllowDirect off (BucketStream),
// so every Get is served by the stream's leader, never a stale follower.
//
// # Commit
//
// Commit is a compare-and-set on the record's revision: the one the first
// Load under Lock remembered (kv Update; Create when nothing was found),
// never a blind read-then-write. Called without Lock (or before a Load),
// it reads the record from the leader and sets against that revision.
// Either way a record that is not in state From by then, or that another
// processor changed since, gives ErrConflict and writes nothing. A write
// that got no answer may have been stored: Commit reads the record back
// and recognizes its own commit id; if it cannot tell within SettleTimeout
// it returns ErrUncertain.
//
// # Timers
//
// A commit's expiry timer is armed with Timers (kvjs.Schedules: a
// nats-server message schedule in the authorization stream) before the
// compare-and-set, so that a crash between the two leaves an extra timer,
// never a missing one. CancelTimer is not acted on: schedules cannot be
// cancelled, and a timer that fires for a decided proposal (or one parked
// again by another step) changes nothing (authorization.Step ignores it).
// The server fires each schedule once, whichever processors are alive;
// the authorization consumer hands it to one of them.
//
// # Count
//
// Count is kept current from a KV watcher over the whole bucket (an
// ordered consumer that nats.go re-creates after a missed heartbeat or a
// gap): an in-memory set of the parked proposals, cluster-wide, updated as
// any processor's commits arrive (typically within milliseconds), and at
// once by this processor's own commits. Count reads the set: it never
// blocks. The set holds only parked proposals (key, revision, deadline),
// so its memory is bounded by what is parked, not by the bucket. Parked
// lists from the set and reads each listed record from the leader.
//
// # Retention
//
// The bucket's stream has a MaxAge (BucketStream): a record goes that long
// after its last change. The engine sets it to the proposals' retention
// horizon (at least streams.max_age and twice approval.ttl), so a decided
// record outlives every redelivery of the inputs that could ask for it, and
// a parked one outlives its expiry — unless no processor at all runs for
// that long. The processor's retention sweep (Pebble) does not touch it.
type Approvals struct {
	// cas is the bucket and the sessions Lock starts, by record key.
	cas    CAS[approvalStored]
	timers kv.Timers
	writer string
	log    *slog.Logger

	// The watcher's state (watch.go's part of Replicated), under cmu.
	cmu sync.Mutex
	// parked: the parked proposals by key.
	parked map[string]parkedEntry
	// local: revisions of this processor's own commits the watcher has not
	// delivered yet, by key: an older version the watcher delivers later
	// must not undo them.
	local map[string]localEntry
	// seen is the highest revision the watcher delivered.
	seen uint64
	// initialized is closed once the watcher delivered the bucket's
	// initial values the first time.
	initialized chan struct{}
	initOnce    sync.Once
	stop        context.CancelFunc
	stopped     chan struct{}
}

var _ kv.Approvals = (*Approvals)(nil)

type parkedEntry struct {
	rev         uint64
	ref         schema.ProposalRef
	expiresAtMs int64
}

// ReplicatedOptions configure NewReplicated.
type ApprovalsOptions struct {
	// KV is the approvals bucket (Bind, EnsureBucket).
	KV jetstream.KeyValue
	// Timers arms the expiry timers commits carry (kvjs.Schedules on a
	// cluster).
	Timers kv.Timers
	// Writer is this processor's instance id, recorded with each commit.
	Writer string
	// Log receives value-free warnings. nil: slog.Default().
	Log *slog.Logger
	// Timeouts bound each KV read or timer arming and how long Commit
	// settles a write that got no answer.
	Timeouts
}

// NewReplicated returns the approvals on o.KV once its watcher has read
// the parked proposals (so that Count is right from the start), or ctx's
// error. Close stops the watcher.
func NewApprovals(ctx context.Context, o ApprovalsOptions) (*Approvals, error) {
	r := &Approvals{timers: o.Timers, writer: o.Writer, log: o.Log,
		cas: CAS[approvalStored]{Handle: Handle{KV: o.KV, Name: "approvals", Timeouts: o.Timeouts},
			ID: (*approvalStored).commit, Conflict: kv.ErrConflict, Uncertain: kv.ErrUncertain},
		parked: map[string]parkedEntry{}, local: map[string]localEntry{}, initialized: make(chan struct{}), stopped: make(chan struct{})}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.timers == nil {
		return nil, errors.New("approvals: a replicated store needs timers")
	}
	wctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	go r.watch(wctx)
	select {
	case <-r.initialized:
		return r, nil
	case <-ctx.Done():
		r.Close()
		return nil, fmt.Errorf("approvals: reading the parked approvals: %w", ctx.Err())
	}
}

// Close stops the watcher. Count keeps its last value.
func (r *Approvals) Close() {
	r.stop()
	<-r.stopped
}

// Bucket is the approvals bucket: one value-free record per proposal,
// kept maxAge after its last change (0: for ever); every read from the
// stream's leader.
func ApprovalsBucket(name string, replicas int, maxAge time.Duration) Bucket {
	return Bucket{Name: name, Replicas: replicas, MaxAge: maxAge, DenyDelete: true,
		Description: "Portcullis approvals: one value-free authorization record per proposal"}
}

// stored is a record's value in the bucket.
type approvalStored struct {
	Record kv.Approval `json:"record"`
	// Writer is the instance id of the processor that committed it, and
	// Commit a random id of the commit (CommitID): a writer whose
	// write timed out recognizes its own.
	Writer string `json:"writer"`
	Commit string `json:"commit"`
}

func (s *approvalStored) commit() string { return s.Commit }

// state is the state of a stored version (StateNone for none).
func (s *approvalStored) state() kv.ApprovalState {
	if s == nil {
		return kv.StateNone
	}
	return s.Record.State
}

// recordKey is the proposal's key: hashed, since hosts and proposal ids
// may hold bytes a key cannot.
func approvalKey(ref schema.ProposalRef) string {
	s := sha256.Sum256([]byte(ref.Host + "\x00" + ref.ProposalID))
	return "apr." + hex.EncodeToString(s[:])
}

// short names a key in errors and logs: a prefix of its hash.
func short(key string) string { return key[:16] + "…" }

func (r *Approvals) do(f func(ctx context.Context) error) error { return r.cas.Do(f) }

// Lock serializes this process's work on the proposal and starts the
// session that remembers what Load read.
func (r *Approvals) Lock(ref schema.ProposalRef) func() { return r.cas.Lock(approvalKey(ref)) }

// get reads a record from the stream's leader: nil, 0 if there is none.
func (r *Approvals) get(key string) (*approvalStored, uint64, error) {
	var s approvalStored
	rev, found, err := r.cas.Get(key, &s)
	if err != nil || !found {
		return nil, 0, err
	}
	return &s, rev, nil
}

// Load reads a proposal's record from the stream's leader; the first Load
// under a Lock is what that session's Commit compares with
// (CAS).
func (r *Approvals) Load(ref schema.ProposalRef) (kv.Approval, bool, error) {
	key := approvalKey(ref)
	s, _, err := r.cas.Load(key, key)
	if err != nil {
		return kv.Approval{}, false, fmt.Errorf("approvals: load: %w", err)
	}
	if s == nil {
		return kv.Approval{}, false, nil
	}
	return s.Record, true, nil
}

// Commit writes w as the Replicated doc comment describes.
func (r *Approvals) Commit(ref schema.ProposalRef, w kv.ApprovalWrites) error {
	if err := w.Check(ref); err != nil {
		return err
	}
	if w.Empty() {
		return nil
	}
	key := approvalKey(ref)
	v, loaded := r.cas.Session(key)
	rev, state := v.Rev, v.Cur.state()
	if !loaded {
		// Not under Lock, or no Load yet: what the leader holds now is
		// what the compare-and-set compares with.
		s, got, err := r.get(key)
		if err != nil {
			return fmt.Errorf("approvals: commit: %w", err)
		}
		rev, state = got, s.state()
	}
	if state != w.From {
		return fmt.Errorf("%w: record %s is %q, the step saw %q", kv.ErrConflict, short(key), state, w.From)
	}
	// Harmless if the commit never happens: an extra timer.
	if w.Timer != nil {
		if err := r.do(func(ctx context.Context) error { return r.timers.Arm(ctx, *w.Timer) }); err != nil {
			return fmt.Errorf("approvals: %w", err)
		}
	}
	if w.Record == nil {
		return nil
	}
	s := &approvalStored{Record: *w.Record, Writer: r.writer, Commit: CommitID()}
	newRev, err := r.cas.Swap(key, short(key), rev, s)
	if err != nil {
		r.cas.Forget(key)
		return err
	}
	r.cas.Remember(key, newRev, s)
	r.applyLocal(key, newRev, w.Record)
	return nil
}

// Parked lists the parked proposals the watcher knows, the soonest to
// expire first, reading each listed record from the leader: one decided
// since is left out of the list, though counted in total (as Pebble's).
func (r *Approvals) Parked(limit int) ([]kv.Approval, int, error) {
	r.cmu.Lock()
	idx := make([]parkedEntry, 0, len(r.parked))
	for _, e := range r.parked {
		idx = append(idx, e)
	}
	r.cmu.Unlock()
	slices.SortFunc(idx, func(a, b parkedEntry) int {
		return kv.CompareParked(a.expiresAtMs, a.ref, b.expiresAtMs, b.ref)
	})
	out := []kv.Approval{}
	for _, e := range idx {
		if limit > 0 && len(out) == limit {
			break
		}
		s, _, err := r.get(approvalKey(e.ref))
		if err != nil {
			return nil, 0, fmt.Errorf("approvals: parked: %w", err)
		}
		if s != nil && s.Record.Parked() {
			out = append(out, s.Record)
		}
	}
	return out, len(idx), nil
}

// Count is the number of parked proposals, cluster-wide, as the watcher
// (and this processor's own commits) last saw them.
func (r *Approvals) Count() int {
	r.cmu.Lock()
	defer r.cmu.Unlock()
	return len(r.parked)
}
