// Package migrate moves a single node's local state into the buckets a
// cluster shares (`processor migrate`, SPEC §6), so that its store.dir can
// then run with store.journal = "replicated":
//
//   - the local dispatch journal: every intent's record, receipt history,
//     reconciliation attempts, indeterminate index entry and pending poll
//     (armed as a message schedule), and the proposals ended at dispatch's
//     re-check;
//   - the local approvals: every proposal's parking or decision, a parked
//     one's expiry timer armed as a schedule — provided the cluster's
//     authorization stream holds its envelope, which a grant re-reads (the
//     same NATS the node used); one whose envelope is elsewhere is not
//     moved: decide it first on the node;
//   - the admission records: the proposal ids and delivery ids taken, so
//     that a reused id or a repeated delivery is caught by any processor.
//
// Every record is written by a compare-and-set create: one already in the
// bucket is counted present when it is this record or a later version of
// it (an earlier run's, moved on by the cluster since), and reported as a
// conflict otherwise — never overwritten. So a run that stopped anywhere
// is finished by running it again. Once every record is in, the local
// timers of what moved are removed (the cluster's schedules fire them now)
// and the store is marked migrated (pebble.Migrated), which the engine
// requires before it starts a store that holds local state on replicated
// buckets, and which keeps it from starting on its local journal again.
//
// A stream sequence in an admission record names a message of the
// proposals stream the node used; it is kept only when the cluster's
// proposals stream holds that very message (the same NATS), otherwise
// cleared, so that another message that happens to have that sequence in
// the cluster's stream is never taken for it.
//
// It owns the move and its checks; it reads and writes state through the
// stores' backends.
package migrate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	kvjs "github.com/portcullis/portcullis/kv/jetstream"

	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/go-json-experiment/json"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/seal"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/keyfile"
	"github.com/portcullis/portcullis/subjects"
)

// Errors of Run.
var (
	// ErrNotReplicated: the configuration does not run a replicated
	// journal, so there is no cluster to move into.
	ErrNotReplicated = errors.New("migrate: the configuration does not use the replicated journal (store.journal = \"replicated\", or \"auto\" with nats.url)")
	// ErrStoreInUse: another process (the processor that owns store.dir)
	// holds the store.
	ErrStoreInUse = errors.New("migrate: store.dir is in use: stop the processor that owns it first")
	// ErrIncomplete: some records could not move (conflicts, unless
	// accepted; parked approvals whose envelopes are not in the cluster's
	// stream): the store is not marked migrated.
	ErrIncomplete = errors.New("migrate: not everything moved; the store is not marked migrated")
)

// Options configure Run.
type Options struct {
	// Config is the configuration the processor will run with on the
	// cluster: its store.dir is the store to move, its NATS the cluster.
	Config *config.Config
	// Log receives value-free notes: each conflict's fingerprint or
	// proposal (never a value). nil: nothing.
	Log *slog.Logger
	// Now is the clock of the migration mark. nil: time.Now.
	Now func() time.Time
	// Page bounds the records read from the store at once. Default 256.
	Page int
	// AcceptConflicts marks the store migrated even though some of its
	// records conflict with the cluster's, which stay as they are (after
	// an operator looked at both). Parked approvals that could not move
	// still keep it from being marked: they would never be decided.
	AcceptConflicts bool
}

// Counts is what happened to the records of one kind.
type Counts struct {
	// Created: written now. Present: already in the bucket (an earlier
	// run's, perhaps moved on by the cluster since). Conflict: another
	// record under the same key, left as it is. NotMoved: left behind
	// (a parked approval whose envelope the cluster's stream lacks).
	Created, Present, Conflict, NotMoved int
}

func (c *Counts) add(r kvjs.Import) {
	switch r {
	case kvjs.Created:
		c.Created++
	case kvjs.Present:
		c.Present++
	default:
		c.Conflict++
	}
}

// Summary is what a run did, value-free: counts only.
type Summary struct {
	Intents, Ended, Approvals, Admissions, Deliveries Counts
	// Timers: local timers whose records moved, now the cluster's
	// schedules (removed from the store).
	Timers int
	// Marked: the store is marked migrated (now, or by an earlier run).
	Marked bool
}

// Conflicts counts the records of every kind that conflict.
func (s *Summary) Conflicts() int {
	n := 0
	for _, c := range []Counts{s.Intents, s.Ended, s.Approvals, s.Admissions, s.Deliveries} {
		n += c.Conflict
	}
	return n
}

func (s *Summary) complete(acceptConflicts bool) bool {
	return s.Approvals.NotMoved == 0 && (acceptConflicts || s.Conflicts() == 0)
}

// afterStep, when set, is called after each kind of record moved (tests
// stop a run there, as a crash would).
var afterStep func(step int)

// run is one migration's state.
type run struct {
	o        Options
	log      *slog.Logger
	store    *pebble.Store
	js       jetstream.JetStream
	subj     subjects.Subjects
	journal  *kvjs.Journal
	approval *kvjs.Approvals
	admitted *kvjs.Admissions
	sum      Summary
	// timers are the local timers of what moved, removed at the end.
	timers []string
}

// Run moves the state of o.Config's store.dir into the cluster's buckets,
// as the package comment describes. It returns ErrIncomplete (with the
// summary) when something could not move.
func Run(ctx context.Context, o Options) (Summary, error) {
	cfg := o.Config
	if err := cfg.Validate(); err != nil {
		return Summary{}, err
	}
	if !cfg.ReplicatedJournal() || cfg.NATS.Embedded {
		return Summary{}, ErrNotReplicated
	}
	if o.Page <= 0 {
		o.Page = 256
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	r := &run{o: o, log: o.Log}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if r.subj, err = subjects.New(cfg.Prefix); err != nil {
		return Summary{}, err
	}
	// The store first: it is locked while its processor runs.
	if r.store, err = pebble.Open(cfg.Store.Dir, pebble.Options{Logger: r.log}); errors.Is(err, pebble.ErrLocked) {
		return Summary{}, fmt.Errorf("%w (%s): %w", ErrStoreInUse, cfg.Store.Dir, err)
	} else if err != nil {
		return Summary{}, fmt.Errorf("migrate: %w", err)
	}
	defer r.store.Close()
	key, err := keyfile.LoadInternal(cfg.InternalKeyFile())
	if err != nil {
		return Summary{}, fmt.Errorf("migrate: internal.key_file (the key the cluster's processors share): %w", err)
	}
	sealer, err := seal.New(key)
	if err != nil {
		return Summary{}, fmt.Errorf("migrate: internal key: %w", err)
	}
	nc, js, err := engine.Connect(cfg)
	if err != nil {
		return Summary{}, err
	}
	defer nc.Close()
	r.js = js
	if err := r.open(ctx, sealer); err != nil {
		return Summary{}, err
	}
	defer r.approval.Close()
	for i, step := range []func() error{r.intents, r.ends, r.approvals, r.admissions, r.deliveries} {
		if err := step(); err != nil {
			return r.sum, err
		}
		if afterStep != nil {
			afterStep(i)
		}
		if err := ctx.Err(); err != nil {
			return r.sum, err
		}
	}
	return r.sum, r.finish()
}

// open makes the cluster's streams and buckets (as a processor's start
// does) and opens the shared stores on them as this store's processor.
func (r *run) open(ctx context.Context, sealer *seal.Sealer) error {
	sched, err := engine.ClusterTimers(ctx, r.js, r.subj, r.o.Config, sealer)
	if err != nil {
		return err
	}
	self, err := r.store.InstanceID()
	if err != nil {
		return err
	}
	bind := func(name string) (jetstream.KeyValue, error) {
		kv, err := kvjs.Bind(ctx, r.js, name)
		if err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		return kv, nil
	}
	jb, err := bind(r.subj.JournalBucket())
	if err != nil {
		return err
	}
	r.journal = kvjs.NewJournal(kvjs.JournalOptions{KV: jb, JS: r.js, Timers: sched, Writer: self, Log: r.log})
	ab, err := bind(r.subj.ApprovalsBucket())
	if err != nil {
		return err
	}
	if r.approval, err = kvjs.NewApprovals(ctx, kvjs.ApprovalsOptions{KV: ab, Timers: sched, Writer: self, Log: r.log}); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	mb, err := bind(r.subj.AdmissionBucket())
	if err != nil {
		r.approval.Close()
		return err
	}
	r.admitted = kvjs.NewAdmissions(kvjs.AdmissionsOptions{KV: mb, JS: r.js, Local: r.store, Subjects: r.subj})
	return nil
}

// pending returns the local timer with this id, if one is pending.
func (r *run) pending(id string) (*kv.Timer, error) {
	t, found, err := r.store.Timer(id)
	if err != nil || !found {
		return nil, err
	}
	return &t, nil
}

// note counts an import's result in c and logs a conflict, value-free:
// attrs name the record (a fingerprint, a host and proposal id).
func (r *run) note(c *Counts, what string, res kvjs.Import, err error, attrs ...any) error {
	if err != nil {
		return fmt.Errorf("migrate: %s %v: %w", what, attrs, err)
	}
	c.add(res)
	if res == kvjs.Conflict {
		r.log.Warn("migrate: the bucket holds another "+what+" under this key; left as it is", attrs...)
	}
	return nil
}

// moved notes that a record moved (created or present): its local timer,
// if any, is removed at the end.
func (r *run) moved(res kvjs.Import, timer *kv.Timer) {
	if res != kvjs.Conflict && timer != nil {
		r.timers = append(r.timers, timer.ID)
	}
}

func (r *run) intents() error {
	ind, err := r.store.Indeterminates()
	if err != nil {
		return err
	}
	since := map[string]int64{}
	for _, i := range ind {
		since[i.Fingerprint] = i.SinceMs
	}
	var c pebble.Cursor
	for {
		fps, next, err := r.store.IntentsAfter(c, r.o.Page)
		if err != nil {
			return err
		}
		for _, fp := range fps {
			var rec kv.Intent
			if _, err := r.store.Intent(fp, &rec); err != nil {
				return err
			}
			receipts, err := r.store.Receipts(fp)
			if err != nil {
				return err
			}
			var attempts []kv.Attempt
			ids := []string{kv.OperatorAttemptID(fp)}
			for n := 1; n <= rec.ReconcileAttempt; n++ {
				ids = append(ids, kv.AttemptID(fp, n))
			}
			for _, id := range ids {
				var a kv.Attempt
				if found, err := r.store.Attempt(fp, id, &a); err != nil {
					return err
				} else if found {
					attempts = append(attempts, a)
				}
			}
			timer, err := r.pending(kv.IntentTimerID(fp))
			if err != nil {
				return err
			}
			res, err := r.journal.Import(rec, receipts, attempts, since[fp], timer)
			if err := r.note(&r.sum.Intents, "intent record", res, err, "fingerprint", fp); err != nil {
				return err
			}
			r.moved(res, timer)
		}
		if next == nil {
			return nil
		}
		c = next
	}
}

// eachProposal calls f with every proposal holding a record of kind.
func (r *run) eachProposal(kind pebble.ProposalRecords, f func(ref schema.ProposalRef) error) error {
	var c pebble.Cursor
	for {
		refs, next, err := r.store.ProposalsAfter(kind, c, r.o.Page)
		if err != nil {
			return err
		}
		for _, ref := range refs {
			if err := f(ref); err != nil {
				return err
			}
		}
		if next == nil {
			return nil
		}
		c = next
	}
}

func (r *run) ends() error {
	return r.eachProposal(pebble.Ends, func(ref schema.ProposalRef) error {
		e, found, err := r.store.Ended(ref)
		if err != nil || !found {
			return err
		}
		res, err := r.journal.ImportEnded(ref, e)
		return r.note(&r.sum.Ended, "dispatch-time end", res, err, "host", ref.Host, "proposal_id", ref.ProposalID)
	})
}

func (r *run) approvals() error {
	return r.eachProposal(pebble.ApprovalRecords, func(ref schema.ProposalRef) error {
		var rec kv.Approval
		if found, err := r.store.Approval(ref, &rec); err != nil || !found {
			return err
		}
		if rec.Parked() {
			here, err := r.envelopeHere(rec)
			if err != nil {
				return err
			}
			if !here {
				r.sum.Approvals.NotMoved++
				r.log.Warn("migrate: a parked proposal's envelope is not in the cluster's authorization stream (another NATS): decide it on the single node first", "host", ref.Host, "proposal_id", ref.ProposalID)
				return nil
			}
		}
		timer, err := r.pending(kv.ApprovalTimerID(ref))
		if err != nil {
			return err
		}
		res, err := r.approval.Import(rec, timer)
		if err := r.note(&r.sum.Approvals, "approval record", res, err, "host", ref.Host, "proposal_id", ref.ProposalID); err != nil {
			return err
		}
		r.moved(res, timer)
		return nil
	})
}

// envelopeHere reports whether the cluster holds a parked proposal's
// envelope: in its host's parked stream (or the one the hosts share with
// unsigned input allowed), under the proposal's subject, or — parked by an
// earlier version — in the parked stream every host shared, or in the
// authorization stream at the sequence its record names.
func (r *run) envelopeHere(rec kv.Approval) (bool, error) {
	parked := r.subj.HostParkedStream(rec.Host)
	if r.o.Config.Admission.AllowUnsigned {
		parked = r.subj.KeptParkedStream()
	}
	m, err := r.lastMsg(parked, r.subj.Parked(rec.Host, rec.ProposalID))
	if err == nil && m == nil {
		m, err = r.lastMsg(r.subj.LegacyParkedStream(), r.subj.LegacyParked(subjects.ProposalToken(rec.Host, rec.ProposalID)))
	}
	if err == nil && m == nil {
		m, err = r.msg(r.subj.StageStream(subjects.StageAuthorization), rec.Seq)
	}
	if err != nil || m == nil {
		return false, err
	}
	var env schema.Envelope
	if schema.DecodeEnvelope(m.Data, &env) != nil || env.Grounded == nil {
		return false, nil
	}
	return env.Host == rec.Host && env.Proposal.ProposalID == rec.ProposalID && env.Grounded.Fingerprint == rec.Fingerprint, nil
}

func (r *run) admissions() error {
	return r.eachProposal(pebble.Admissions, func(ref schema.ProposalRef) error {
		a, found, err := r.store.Admitted(ref)
		if err != nil || !found {
			return err
		}
		if a.Seq, err = r.proposalSeq(a.Seq, func(host string, body []byte) bool {
			id, ok := schema.PeekProposalID(body)
			return ok && host == ref.Host && id == ref.ProposalID
		}); err != nil {
			return err
		}
		res, err := r.admitted.ImportAdmitted(ref, a)
		return r.note(&r.sum.Admissions, "proposal id record", res, err, "host", ref.Host, "proposal_id", ref.ProposalID)
	})
}

func (r *run) deliveries() error {
	var c pebble.Cursor
	for {
		ds, next, err := r.store.DeliveriesAfter(c, r.o.Page)
		if err != nil {
			return err
		}
		for _, d := range ds {
			if d.Seq, err = r.proposalSeq(d.Seq, func(host string, body []byte) bool {
				var p struct {
					Context struct {
						Delivery struct {
							DeliveryID string `json:"delivery_id"`
						} `json:"delivery"`
					} `json:"context"`
				}
				return json.Unmarshal(body, &p) == nil &&
					bytes.Equal(pebble.DeliveryHash(host, p.Context.Delivery.DeliveryID), d.Hash)
			}); err != nil {
				return err
			}
			res, err := r.admitted.ImportDelivery(d.Hash, d.Delivery)
			if err := r.note(&r.sum.Deliveries, "delivery id record", res, err, "proposal_id", d.ProposalID); err != nil {
				return err
			}
		}
		if next == nil {
			return nil
		}
		c = next
	}
}

// proposalSeq is seq when the cluster's proposals stream holds, at seq,
// the message a record names (same reports whether the message on host's
// subject with this body is it); otherwise 0, which names no message.
func (r *run) proposalSeq(seq uint64, same func(host string, body []byte) bool) (uint64, error) {
	if seq == 0 {
		return 0, nil
	}
	// The hosts' shared ingress stream (unsigned input allowed), or a
	// host's own: whichever holds this very message still (not yet
	// admitted: a stream of work drops what admission took).
	streams := []string{r.subj.ProposalsStream()}
	for _, h := range r.o.Config.Hosts {
		streams = append(streams, r.subj.HostProposalsStream(h.Name))
	}
	for _, st := range streams {
		m, err := r.msg(st, seq)
		if err != nil {
			return 0, err
		}
		if m == nil {
			continue
		}
		if host, ok := r.subj.IngressHost(m.Subject); ok && same(host, m.Data) {
			return seq, nil
		}
	}
	return 0, nil
}

// lastMsg reads the last message on subject in stream; nil if none (or no
// such stream).
func (r *run) lastMsg(stream, subject string) (*jetstream.RawStreamMsg, error) {
	return r.read(stream, func(ctx context.Context, st jetstream.Stream) (*jetstream.RawStreamMsg, error) {
		return st.GetLastMsgForSubject(ctx, subject)
	})
}

// msg reads message seq of a stream; nil when there is none.
func (r *run) msg(stream string, seq uint64) (*jetstream.RawStreamMsg, error) {
	if seq == 0 {
		return nil, nil
	}
	return r.read(stream, func(ctx context.Context, st jetstream.Stream) (*jetstream.RawStreamMsg, error) {
		return st.GetMsg(ctx, seq)
	})
}

// read gets one message of stream, within kv/jetstream's retry budget; nil if
// there is no such message or stream.
func (r *run) read(stream string, get func(context.Context, jetstream.Stream) (*jetstream.RawStreamMsg, error)) (*jetstream.RawStreamMsg, error) {
	var m *jetstream.RawStreamMsg
	err := kvjs.Budget{}.Do(func(ctx context.Context) error {
		st, err := r.js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		m, err = get(ctx, st)
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("migrate: read %s: %w", stream, err)
	}
	return m, nil
}

// finish removes the local timers of what moved and, when everything did,
// marks the store migrated; both synced.
func (r *run) finish() error {
	b := r.store.NewBatch()
	for _, id := range r.timers {
		b.CancelTimer(id)
	}
	r.sum.Timers = len(r.timers)
	done := r.sum.complete(r.o.AcceptConflicts)
	if done {
		if _, marked, err := r.store.Migrated(); err != nil {
			return err
		} else if !marked {
			b.MarkMigrated(pebble.Migrated{AtMs: r.o.Now().UnixMilli(), Prefix: r.subj.Prefix()})
		}
	}
	if !b.Empty() {
		if err := b.Commit(pebble.Sync); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	if !done {
		return ErrIncomplete
	}
	r.sum.Marked = true
	return nil
}
