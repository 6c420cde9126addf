package sim

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// sharedJournal is the simulated shared journal: what a JetStream KV
// bucket holds for the processors of a cluster. Each processor reaches it
// through its own handle (journalHandle), as each reaches the bucket
// through its own kvjs.Journal.
//
// What it models, faithfully to kv.Journal's contract (and checked by
// the kvtest journal conformance suite, TestJournalConformance): a record per
// fingerprint with a revision; Commit is a compare-and-set against the
// revision the first Load under Lock returned (none: expects no record),
// and a commit that loses changes nothing but what is harmless on its own
// — like kvjs.Journal, it arms its timer before the compare-and-set
// (keyed as jetstream.Schedules keys it, never cancelled), so a poll can fire
// for a commit that never happened; the rest lands only with the record. What it does not
// model: the replicated journal's After writes (receipt, attempt, index)
// being repaired by the next commit when they fail — here they land with
// the record, as in the Pebble batch — and storage errors or
// ErrUncertain (every write answers).
//
// It is safe for concurrent use only so that the conformance suite can
// race handles; the simulation itself is single-threaded.
type sharedJournal struct {
	mu       sync.Mutex
	records  map[string]storedRecord
	receipts map[string][]schema.Receipt
	attempts map[string]kv.Attempt // fingerprint + "\x00" + attempt id
	ended    map[schema.ProposalRef]kv.Ended
	indet    map[string]int64
	// timers are the armed timers by ID and MsgID, as jetstream.Schedules
	// keeps them for the replicated journal: arming the same poll again
	// replaces it, another poll of the fingerprint is another timer, and
	// nothing cancels one (a stale poll is ignored by the stage).
	timers map[string]kv.Timer
	// noCAS plants a bug: Commit writes whatever was loaded last, without
	// comparing (read-then-write instead of compare-and-set).
	noCAS bool
	// commits counts successful record writes (trace and stats).
	commits int
}

type storedRecord struct {
	rev  uint64
	data []byte // the record as JSON: a reader never shares memory with a writer
}

func newSharedJournal() *sharedJournal {
	return &sharedJournal{
		records:  map[string]storedRecord{},
		receipts: map[string][]schema.Receipt{},
		attempts: map[string]kv.Attempt{},
		ended:    map[schema.ProposalRef]kv.Ended{},
		indet:    map[string]int64{},
		timers:   map[string]kv.Timer{},
	}
}

// handle is a new processor's view of the journal (its own lock table and
// sessions).
func (j *sharedJournal) handle() *journalHandle {
	return &journalHandle{j: j, locks: map[string]*sync.Mutex{}, sessions: map[string]*session{}}
}

// record reads a fingerprint's record (for the checks).
func (j *sharedJournal) record(fp string) (kv.Intent, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	s, ok := j.records[fp]
	if !ok {
		return kv.Intent{}, false
	}
	var r kv.Intent
	mustUnmarshal(s.data, &r)
	return r, true
}

// journalHandle is one processor's kv.Journal over the shared journal.
type journalHandle struct {
	j        *sharedJournal
	mu       sync.Mutex
	locks    map[string]*sync.Mutex
	sessions map[string]*session
}

// session is what Commit compares against: the revision of the first Load
// under Lock (0: no record), as kvjs.Journal's session.
type session struct {
	loaded bool
	rev    uint64
}

var _ kv.Journal = (*journalHandle)(nil)

func (h *journalHandle) Lock(fp string) func() {
	l := h.mutex(fp)
	l.Lock()
	return h.locked(fp, l)
}

// TryLock is Lock when fp's lock is free (ok), and nothing otherwise:
// the single-threaded simulation cannot block, so a second holder on one
// processor (its operator command beside its stage's task) waits by
// trying again later.
func (h *journalHandle) TryLock(fp string) (unlock func(), ok bool) {
	l := h.mutex(fp)
	if !l.TryLock() {
		return nil, false
	}
	return h.locked(fp, l), true
}

// mutex is fp's lock in this handle's table.
func (h *journalHandle) mutex(fp string) *sync.Mutex {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.locks[fp]
	if l == nil {
		l = &sync.Mutex{}
		h.locks[fp] = l
	}
	return l
}

// locked opens the session of fp's lock l, just taken, and returns its
// unlock.
func (h *journalHandle) locked(fp string, l *sync.Mutex) func() {
	h.mu.Lock()
	h.sessions[fp] = &session{}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.sessions, fp)
		h.mu.Unlock()
		l.Unlock()
	}
}

func (h *journalHandle) Load(fp string) (kv.Intent, bool, error) {
	if !schema.ValidFingerprint(fp) {
		return kv.Intent{}, false, fmt.Errorf("sim journal: load: not a fingerprint")
	}
	h.j.mu.Lock()
	s, found := h.j.records[fp]
	h.j.mu.Unlock()
	h.mu.Lock()
	if sess := h.sessions[fp]; sess != nil && (!sess.loaded || h.j.noCAS) {
		sess.loaded, sess.rev = true, s.rev
	}
	h.mu.Unlock()
	if !found {
		return kv.Intent{}, false, nil
	}
	var r kv.Intent
	mustUnmarshal(s.data, &r)
	return r, true, nil
}

func (h *journalHandle) Commit(fp string, w kv.IntentWrites) error {
	if err := checkWrites(w); err != nil {
		return err
	}
	if w.Empty() {
		return nil
	}
	j := h.j
	h.mu.Lock()
	sess := h.sessions[fp]
	if sess == nil {
		sess = &session{} // not under Lock: expects no record
	}
	h.mu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	// Harmless if the commit never happens, and written before it (as
	// kvjs.Journal arms its timer before the compare-and-set).
	if w.Timer != nil {
		j.timers[w.Timer.ID+"\x00"+w.Timer.MsgID] = *w.Timer
	}
	if w.Record != nil {
		cur := j.records[fp]
		if cur.rev != sess.rev && !j.noCAS {
			h.mu.Lock()
			sess.loaded, sess.rev = false, 0
			h.mu.Unlock()
			return kv.ErrConflict
		}
		data, err := json.Marshal(w.Record)
		if err != nil {
			return fmt.Errorf("sim journal: %w", err)
		}
		next := cur.rev + 1
		j.records[fp] = storedRecord{rev: next, data: data}
		j.commits++
		h.mu.Lock()
		sess.loaded, sess.rev = true, next
		h.mu.Unlock()
	}
	if w.Receipt != nil {
		rs := j.receipts[fp]
		// Numbered by the record: a replayed receipt replaces its number.
		n := int(w.Record.ReceiptSeq)
		for len(rs) < n {
			rs = append(rs, schema.Receipt{})
		}
		rs[n-1] = cloneReceipt(*w.Receipt)
		j.receipts[fp] = rs
	}
	if w.Attempt != nil {
		j.attempts[fp+"\x00"+w.Attempt.AttemptID] = *w.Attempt
	}
	// w.CancelTimer: jetstream.Schedules has no cancel (see kv/jetstream/schedules.go).
	switch {
	case w.Indeterminate > 0:
		j.indet[fp] = w.SinceMs
	case w.Indeterminate < 0:
		delete(j.indet, fp)
	}
	if w.Ended != nil {
		j.ended[w.Ended.Ref] = w.Ended.Ended
	}
	return nil
}

// checkWrites refuses what kv.IntentWrites.check refuses (unexported there).
func checkWrites(w kv.IntentWrites) error {
	switch {
	case w.Receipt != nil && w.Record == nil:
		return fmt.Errorf("%w: a receipt without its record", kv.ErrBadWrites)
	case w.Receipt != nil && w.Record.ReceiptSeq == 0:
		return fmt.Errorf("%w: a receipt numbered 0", kv.ErrBadWrites)
	case w.Timer != nil && w.CancelTimer:
		return fmt.Errorf("%w: a timer both added and cancelled", kv.ErrBadWrites)
	}
	return nil
}

func (h *journalHandle) Receipts(fp string) ([]schema.Receipt, error) {
	h.j.mu.Lock()
	defer h.j.mu.Unlock()
	out := make([]schema.Receipt, 0, len(h.j.receipts[fp]))
	for _, r := range h.j.receipts[fp] {
		out = append(out, cloneReceipt(r))
	}
	return out, nil
}

func (h *journalHandle) Attempt(fp, attemptID string) (kv.Attempt, bool, error) {
	h.j.mu.Lock()
	defer h.j.mu.Unlock()
	a, ok := h.j.attempts[fp+"\x00"+attemptID]
	return a, ok, nil
}

func (h *journalHandle) Ended(ref schema.ProposalRef) (kv.Ended, bool, error) {
	h.j.mu.Lock()
	defer h.j.mu.Unlock()
	e, ok := h.j.ended[ref]
	return e, ok, nil
}

func (h *journalHandle) Indeterminates() ([]kv.Indeterminate, error) {
	h.j.mu.Lock()
	defer h.j.mu.Unlock()
	out := make([]kv.Indeterminate, 0, len(h.j.indet))
	for fp, since := range h.j.indet {
		out = append(out, kv.Indeterminate{Fingerprint: fp, SinceMs: since})
	}
	slices.SortFunc(out, func(a, b kv.Indeterminate) int {
		if a.Fingerprint < b.Fingerprint {
			return -1
		}
		return 1
	})
	return out, nil
}

func (h *journalHandle) CountIndeterminate() (int, error) {
	h.j.mu.Lock()
	defer h.j.mu.Unlock()
	return len(h.j.indet), nil
}

func cloneReceipt(r schema.Receipt) schema.Receipt {
	var out schema.Receipt
	mustUnmarshal(mustMarshal(r), &out)
	return out
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func mustUnmarshal(b []byte, v any) {
	if err := json.Unmarshal(b, v); err != nil {
		panic(err)
	}
}

// armed lists the armed timers, in due order (deterministic).
func (j *sharedJournal) armed() []kv.Timer {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]kv.Timer, 0, len(j.timers))
	for _, t := range j.timers {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b kv.Timer) int {
		if a.DueMs != b.DueMs {
			return int(a.DueMs - b.DueMs)
		}
		return strings.Compare(a.MsgID, b.MsgID)
	})
	return out
}

// due removes and returns the timers due at nowMs, in due order.
func (j *sharedJournal) due(nowMs int64) []kv.Timer {
	var out []kv.Timer
	for _, t := range j.armed() {
		if t.DueMs <= nowMs {
			out = append(out, t)
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, t := range out {
		delete(j.timers, t.ID+"\x00"+t.MsgID)
	}
	return out
}
