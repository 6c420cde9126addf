package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// Replicated is the journal on a JetStream KV bucket, shared by every
// processor of a cluster (SPEC §6): what makes dispatch exactly-once
// survives losing a processor with its store directory, or one NATS server
// of three.
//
// # Keys
//
//	rec.<hex>               the record, in an envelope (below): the commit point
//	rcpt.<hex>.<seq>        receipt number seq (10 digits) of the history
//	att.<hex>.<attempt_id>  a reconciliation attempt's checkpoint
//	ind.<hex>               since_ms, while the effect is unknown
//	end.<sha256(host, id)>  a proposal ended at dispatch's re-check
//
// The bucket's stream has AllowDirect off, so that every read is served by
// the stream's leader: a follower's direct get can be stale right after an
// update (ENGINEERING.md measured 6–16 % under load).
//
// # Commit
//
// Commit is a compare-and-set of rec.<hex> against the revision the Load
// under the same Lock returned (kv Update; Create when nothing was found):
// never read-then-write. Another writer first: ErrConflict. The other keys
// cannot join that write, so each is written where a crash before or after
// it leaves a state a later step repairs or ignores:
//
//   - before the compare-and-set, what is harmless if the commit never
//     happens: the step's timer (a timer that finds its journal not as
//     expected is ignored, or retried if the journal is behind it) and a
//     new indeterminate index entry (Indeterminates lists only entries whose
//     record is indeterminate);
//   - the compare-and-set; the envelope also holds the commit's After
//     writes, the writer's instance id and a random commit id;
//   - after it, the After writes: the receipt's history entry (Create),
//     the attempt checkpoint (Create when started, so an attempt id is
//     used once; Put when finished) and the removal of the index entry;
//   - the next Commit of the fingerprint, by any processor, first writes
//     the After of the version it loaded again (all idempotent), so that
//     no version is superseded before its After is stored: a crash right
//     after a compare-and-set loses nothing. Until then, reads fill the
//     gap from the record: Receipts adds the record's latest receipt and
//     Attempt the envelope's checkpoint.
//
// A write that times out may have been stored: Commit reads the record
// back and recognizes its own commit id; if it cannot tell within its
// budget it returns ErrUncertain.
type Journal struct {
	// cas is the bucket and the sessions Lock starts, by fingerprint.
	cas    CAS[stored]
	timers kv.Timers
	writer string
	log    *slog.Logger

	// Sweep's place in the bucket's stream, by key prefix.
	sweepMu              sync.Mutex
	recCursor, endCursor uint64
}

var _ kv.Journal = (*Journal)(nil)

// ReplicatedOptions configure NewReplicated.
type JournalOptions struct {
	// KV is the journal's bucket (Bind, EnsureBucket), and JS the
	// JetStream context it was bound with (for listing keys).
	KV jetstream.KeyValue
	JS jetstream.JetStream
	// Timers arms the timers commits carry (kvjs.Schedules).
	Timers kv.Timers
	// Writer is this processor's instance id, recorded with each commit.
	Writer string
	// Log receives value-free warnings. nil: slog.Default().
	Log *slog.Logger
	// Timeouts bound each KV operation and how long Commit settles a
	// write that got no answer.
	Timeouts
}

// NewReplicated returns the journal on o.KV.
func NewJournal(o JournalOptions) *Journal {
	r := &Journal{timers: o.Timers, writer: o.Writer, log: o.Log,
		cas: CAS[stored]{Handle: Handle{KV: o.KV, JS: o.JS, Name: "journal", Timeouts: o.Timeouts},
			ID: (*stored).commit, Conflict: kv.ErrConflict, Uncertain: kv.ErrUncertain}}
	if r.log == nil {
		r.log = slog.Default()
	}
	return r
}

// Bucket is the journal bucket: one record per intent fingerprint, its
// receipts and reconciliation attempts, never expiring by age (a finished
// record is the fence against a replay: Sweep removes it after its
// horizon, reading it first; a record still waiting for an operator
// never) and refusing writes when full rather than dropping a record;
// every read from the stream's leader. Per-message TTLs are allowed for
// the markers Sweep leaves.
func JournalBucket(name string, replicas int) Bucket {
	return Bucket{Name: name, Replicas: replicas, DenyDelete: true, AllowMsgTTL: true,
		Description: "Portcullis dispatch journal: one record per intent fingerprint, receipts, reconciliation attempts"}
}

// stored is the value of rec.<hex>.
type stored struct {
	Record kv.Intent `json:"record"`
	// Writer is the instance id of the processor that committed it, and
	// Commit a random id of the commit (CommitID): a writer whose
	// write timed out recognizes its own.
	Writer string `json:"writer"`
	Commit string `json:"commit"`
	// After are the writes that follow this version's compare-and-set.
	After *after `json:"after,omitempty"`
	// Swept marks a tombstone: Sweep is removing Record and what it
	// owned. It reads as no record; a Commit on it first removes what
	// Record owned (Sweep).
	Swept bool `json:"swept,omitempty"`
}

func (s *stored) commit() string { return s.Commit }

type after struct {
	// Receipt is the history's entry number Record.ReceiptSeq.
	Receipt *schema.Receipt `json:"receipt,omitempty"`
	Attempt *kv.Attempt     `json:"attempt,omitempty"`
	// Unindex removes the fingerprint from the indeterminate index.
	Unindex bool `json:"unindex,omitempty"`
}

var hexPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

func keyHex(fingerprint string) (string, error) {
	h, ok := strings.CutPrefix(fingerprint, "sha256:")
	if !ok || !hexPattern.MatchString(h) {
		return "", fmt.Errorf("journal: not a fingerprint: %q", fingerprint)
	}
	return h, nil
}

func recordKey(h string) string              { return "rec." + h }
func receiptKey(h string, seq uint64) string { return fmt.Sprintf("rcpt.%s.%010d", h, seq) }
func attemptKey(h, id string) string         { return "att." + h + "." + id }
func indexKey(h string) string               { return "ind." + h }

func endedKey(ref schema.ProposalRef) string {
	s := sha256.Sum256([]byte(ref.Host + "\x00" + ref.ProposalID))
	return "end." + hex.EncodeToString(s[:])
}

func (r *Journal) do(f func(ctx context.Context) error) error { return r.cas.Do(f) }

// Lock serializes this process's work on the fingerprint and starts the
// session that remembers what Load read.
func (r *Journal) Lock(fingerprint string) func() { return r.cas.Lock(fingerprint) }

func (r *Journal) loadStored(fingerprint string) (*stored, uint64, error) {
	h, err := keyHex(fingerprint)
	if err != nil {
		return nil, 0, err
	}
	return r.cas.Load(fingerprint, recordKey(h))
}

// Load reads the fingerprint's record from the stream's leader; the
// first Load under a Lock is what that session's Commit compares with
// (CAS).
func (r *Journal) Load(fingerprint string) (kv.Intent, bool, error) {
	s, _, err := r.loadStored(fingerprint)
	if err != nil {
		return kv.Intent{}, false, fmt.Errorf("journal: load: %w", err)
	}
	if s == nil || s.Swept {
		return kv.Intent{}, false, nil
	}
	return s.Record, true, nil
}

// Commit writes w as the Replicated doc comment describes.
func (r *Journal) Commit(fingerprint string, w kv.IntentWrites) error {
	if err := w.Check(); err != nil {
		return err
	}
	if w.Empty() {
		return nil
	}
	h, err := keyHex(fingerprint)
	if err != nil {
		return err
	}
	// Not under Lock (or no Load yet): expects no record.
	v, _ := r.cas.Session(fingerprint)
	rev, cur, clean := v.Rev, v.Cur, v.Clean

	// The loaded version's After, again: it must be stored before that
	// version is superseded. A tombstone's record owned keys a new life
	// must not find: they go first.
	switch {
	case cur != nil && cur.Swept && w.Record != nil:
		if err := r.clean(h, &cur.Record, rev); err != nil {
			return fmt.Errorf("journal: repair: %w", err)
		}
	case cur != nil && cur.After != nil && !clean:
		if err := r.apply(h, &cur.Record, cur.After); err != nil {
			return fmt.Errorf("journal: repair: %w", err)
		}
	}
	// What is harmless if the commit never happens.
	if w.Timer != nil {
		// Arming twice stores the schedule twice: the second replaces the
		// first.
		if err := r.do(func(ctx context.Context) error { return r.timers.Arm(ctx, *w.Timer) }); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
	}
	if w.Indeterminate > 0 {
		if err := r.cas.Put(indexKey(h), w.SinceMs); err != nil {
			return err
		}
	}
	a := &after{Receipt: w.Receipt, Attempt: w.Attempt, Unindex: w.Indeterminate < 0}
	if a.Receipt == nil && a.Attempt == nil && !a.Unindex {
		a = nil
	}
	if w.Record != nil {
		s := &stored{Record: *w.Record, Writer: r.writer, Commit: CommitID(), After: a}
		newRev, err := r.swap(h, rev, s)
		if err != nil {
			if errors.Is(err, kv.ErrConflict) {
				r.cas.Forget(fingerprint)
			}
			return err
		}
		r.cas.Remember(fingerprint, newRev, s)
		// Committed. The After writes are repaired by the next Commit if
		// they fail now; reads fill the gap meanwhile.
		if a != nil {
			if err := r.apply(h, w.Record, a); err != nil {
				r.log.Warn("journal: writes after the commit failed; the next commit repeats them", "fingerprint", fingerprint, "err", err)
			} else {
				r.cas.MarkClean(fingerprint, s)
			}
		}
	} else if a != nil {
		if err := r.apply(h, nil, a); err != nil {
			return err
		}
	}
	if w.Ended != nil {
		if err := r.cas.Put(endedKey(w.Ended.Ref), w.Ended.Ended); err != nil {
			return err
		}
	}
	return nil
}

// swap is the compare-and-set of the record: Create when nothing was
// loaded, else Update against rev (CAS.Swap).
func (r *Journal) swap(h string, rev uint64, s *stored) (uint64, error) {
	return r.cas.Swap(recordKey(h), h[:12]+"…", rev, s)
}

// readBack reads the record and its revision (nil, 0 when there is none).
func (r *Journal) readBack(h string) (*stored, uint64, error) {
	var s stored
	rev, found, err := r.cas.Get(recordKey(h), &s)
	if err != nil || !found {
		return nil, 0, err
	}
	return &s, rev, nil
}

// apply stores a commit's After writes; each is idempotent.
func (r *Journal) apply(h string, rec *kv.Intent, a *after) error {
	if a.Receipt != nil && rec != nil {
		if err := r.cas.Create(receiptKey(h, rec.ReceiptSeq), a.Receipt); err != nil {
			return err
		}
	}
	if cp := a.Attempt; cp != nil {
		var err error
		if cp.Status == "" {
			// Started: an attempt id is used once.
			err = r.cas.Create(attemptKey(h, cp.AttemptID), cp)
		} else {
			err = r.cas.Put(attemptKey(h, cp.AttemptID), cp)
		}
		if err != nil {
			return err
		}
	}
	if a.Unindex {
		if err := r.do(func(ctx context.Context) error { return r.cas.KV.Purge(ctx, indexKey(h)) }); err != nil {
			return fmt.Errorf("journal: unindex: %w", err)
		}
	}
	return nil
}

// Receipts returns the fingerprint's receipts, oldest first: the history's
// entries, and the record's latest receipt if its entry is not stored yet.
func (r *Journal) Receipts(fingerprint string) ([]schema.Receipt, error) {
	h, err := keyHex(fingerprint)
	if err != nil {
		return nil, err
	}
	s, _, err := r.loadStored(fingerprint)
	if err != nil || (s != nil && s.Swept) {
		return nil, err // a tombstone's history is being removed
	}
	keys, err := r.cas.Keys("rcpt." + h + ".*")
	if err != nil {
		return nil, err
	}
	var out []schema.Receipt
	var last uint64
	for _, k := range keys {
		seq, err := strconv.ParseUint(k[strings.LastIndexByte(k, '.')+1:], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("journal: receipt key %s: %w", k, kv.ErrCorrupt)
		}
		var rc schema.Receipt
		if _, found, err := r.cas.Get(k, &rc); err != nil {
			return nil, err
		} else if found {
			out = append(out, rc)
			last = seq
		}
	}
	if s, _, err = r.loadStored(fingerprint); err != nil {
		return nil, err
	}
	if s != nil && !s.Swept && s.Record.Receipt != nil && s.Record.ReceiptSeq > last {
		out = append(out, *s.Record.Receipt)
	}
	return out, nil
}

// Attempt returns a reconciliation attempt's checkpoint; if the stored one
// is missing or unfinished, the record's pending After may hold a newer one.
func (r *Journal) Attempt(fingerprint, attemptID string) (kv.Attempt, bool, error) {
	h, err := keyHex(fingerprint)
	if err != nil {
		return kv.Attempt{}, false, err
	}
	var a kv.Attempt
	_, found, err := r.cas.Get(attemptKey(h, attemptID), &a)
	if err != nil || (found && a.Status != "") {
		return a, found, err
	}
	s, _, err := r.loadStored(fingerprint)
	if err != nil {
		return kv.Attempt{}, false, err
	}
	if s != nil && s.After != nil && s.After.Attempt != nil && s.After.Attempt.AttemptID == attemptID {
		return *s.After.Attempt, true, nil
	}
	return a, found, nil
}

// Ended returns a proposal's dispatch-time end.
func (r *Journal) Ended(ref schema.ProposalRef) (kv.Ended, bool, error) {
	var e kv.Ended
	_, found, err := r.cas.Get(endedKey(ref), &e)
	return e, found, err
}

// CountIndeterminate counts Indeterminates: the same on every processor
// (actions_indeterminate_actions is cluster-wide), at the cost of a read
// per index entry at each scrape.
func (r *Journal) CountIndeterminate() (int, error) {
	ind, err := r.Indeterminates()
	return len(ind), err
}

// Indeterminates lists every fingerprint whose latest receipt leaves the
// effect unknown, by fingerprint: the index's entries whose record says so
// (an entry written for a commit that lost its compare-and-set, or not yet
// removed, is left out).
func (r *Journal) Indeterminates() ([]kv.Indeterminate, error) {
	keys, err := r.cas.Keys("ind.*")
	if err != nil {
		return nil, err
	}
	var out []kv.Indeterminate
	for _, k := range keys {
		var since int64
		if _, found, err := r.cas.Get(k, &since); err != nil {
			return nil, err
		} else if !found {
			continue
		}
		fp := "sha256:" + strings.TrimPrefix(k, "ind.")
		s, _, err := r.loadStored(fp)
		if err != nil {
			return nil, err
		}
		if s == nil || !kv.IndeterminateReceipt(s.Record.Receipt) {
			continue
		}
		out = append(out, kv.Indeterminate{Fingerprint: fp, SinceMs: since})
	}
	return out, nil
}
