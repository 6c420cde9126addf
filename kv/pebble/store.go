// Package pebble is Portcullis's local Pebble store (the kv records on
// one processor's disk): in-flight records and
// receipts of dispatch, delivery dedupe, last outcomes, parked approvals,
// reconciliation attempts and durable timers.
//
// Everything a provider call or an ack depends on is committed with
// pebble.Sync (Batch.Commit(Sync)); callers act only on writes their own
// commit returned, never on state they merely observed. The store holds no
// payloads, protected values or tenant and actor identifiers: delivery ids
// are hashed with their tenant, and records are value-free by type.
package pebble

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/dirlock"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/go-json-experiment/json"
)

// Sentinel errors.
var (
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("kv: store closed")
	// ErrFailed is kv.ErrFailed, returned after Pebble reported a fatal
	// error (a failed WAL write or sync): the store refuses further writes
	// until reopened.
	ErrFailed = kv.ErrFailed
	// ErrCorrupt is kv.ErrCorrupt: a record that does not decode.
	ErrCorrupt = kv.ErrCorrupt
	// ErrLocked is returned by Open for a directory another store holds:
	// another processor runs with the same store.dir (its error names
	// the process when the system says which).
	ErrLocked = errors.New("kv: store directory in use")
)

// Durability of a commit.
type Durability bool

const (
	// Sync waits for the WAL fsync; concurrent Sync commits share one fsync.
	Sync Durability = true
	// NoSync may be lost on a process crash: only for state that is
	// re-derivable or whose loss is harmless.
	NoSync Durability = false
)

// Options configure Open.
type Options struct {
	// FS replaces the disk, for fault-injection tests (vfs/errorfs). nil: disk.
	FS vfs.FS
	// Logger receives Pebble's messages. nil: slog.Default().
	Logger *slog.Logger
	// Now is the processor's clock in Unix ms: when intent journals were
	// last written, for their retention horizon. nil: the wall clock.
	Now func() int64
}

// Store owns one Pebble database. Its methods are safe for concurrent use;
// after Close they return ErrClosed instead of touching the database.
type Store struct {
	mu      sync.RWMutex // held for reading by every operation, for writing by Close
	db      *pebble.DB
	dirLock *pebble.Lock // the directory's lock, released after db closes
	unmark  func()       // drops dirLock from dirlock's table
	closed  bool
	fmu     sync.Mutex
	failed  error // set once Pebble reports a fatal error; guarded by fmu
	log     *slog.Logger
	now     func() int64
	locks   kv.KeyedMutex
	// timerAdded signals commits that added a timer (TimerAdded).
	timerAdded chan struct{}
	// timers is where the pending timers begin (timers.go).
	timers timerFloor
	// idMu serializes InstanceID's first call.
	idMu sync.Mutex
	// written counts NoSync commits that returned; synced is the count a
	// WAL fsync has covered (Flush). syncing, guarded by syncMu, is closed
	// when Flush's running fsync ends (nil when none runs).
	written atomic.Uint64
	synced  atomic.Uint64
	syncMu  sync.Mutex
	syncing chan struct{}
	// jsonRecords makes the store write every record as JSON, as before
	// the binary form existed, and skip the conversion at Open: only for
	// tests of that conversion (export_test.go).
	jsonRecords bool
}

// failedBy handles what a commit path recovered: nil is nothing; a
// fatalPanic (Pebble's Fatalf) marks the store failed and sets *err to
// ErrFailed; any other panic goes on. It reports whether r was one.
func (s *Store) failedBy(r any, err *error) bool {
	if r == nil {
		return false
	}
	fp, ok := r.(fatalPanic)
	if !ok {
		panic(r)
	}
	*err = s.markFailed(fp)
	return true
}

// fatalPanic carries a Pebble Fatalf out of the commit path: its message,
// and the error it reported (nil if none), which the store's failure
// wraps — errors.Is(err, syscall.ENOSPC) tells a full disk.
type fatalPanic struct {
	msg   string
	cause error
}

func (f fatalPanic) Error() string { return f.msg }
func (f fatalPanic) Unwrap() error { return f.cause }

type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.log.Debug("pebble", "msg", fmt.Sprintf(format, args...))
}
func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error("pebble", "msg", fmt.Sprintf(format, args...))
}

// Fatalf must not return: Pebble continues as if the failed operation had
// succeeded. Panicking lets Commit turn a failed commit into an error (and
// crashes the process for a fatal error in a background goroutine, like
// Pebble's default logger would, but with our log line first).
func (l pebbleLogger) Fatalf(format string, args ...any) {
	fp := fatalPanic{msg: fmt.Sprintf(format, args...)}
	for _, a := range args {
		if err, ok := a.(error); ok {
			fp.cause = err
			break
		}
	}
	l.log.Error("pebble fatal", "msg", fp.msg)
	panic(fp)
}

// WALMinSyncInterval is the least time between two WAL fsyncs.
const WALMinSyncInterval = 500 * time.Microsecond

// CacheSize is the Pebble block cache (uncompressed blocks of the tables).
const CacheSize = 32 << 20

// MemTableSize is the size of each Pebble memtable (Pebble's default is 4
// MiB). Most keys are hashes (fingerprints, delivery ids), so every table
// flushed from a memtable overlaps the whole of the level below, and each
// compaction of level 0 rewrites that level: fewer, larger flushes, and
// compacting level 0 only at 8 tables (L0CompactionThreshold; Pebble's
// default 4), rewrite it less often. Draining 100,000 queued proposals,
// compactions fell from 13 % of all CPU to 3 % (BENCHMARKS.md); reads
// check more level-0 tables, which the bloom filters answer for missing
// keys. Two memtables at most (Pebble's default) cost 32 MiB.
const MemTableSize = 16 << 20

// Open opens or creates the store in dir. A store written before records
// had their binary form has them converted first, once (convert.go).
func Open(dir string, o Options) (*Store, error) {
	s, err := openDB(dir, o)
	if err != nil {
		return nil, err
	}
	if err := s.convertRecords(); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("kv: open %s: %w", dir, err)
	}
	return s, nil
}

func openDB(dir string, o Options) (*Store, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	opts := &pebble.Options{
		FS:                 o.FS,
		Logger:             pebbleLogger{log},
		FormatMajorVersion: pebble.FormatTableFormatV6,
		CacheSize:          CacheSize,
		// Under load, concurrent Sync commits share fsyncs (group commit);
		// waiting at least this long between two fsyncs of the WAL lets
		// more commits join each. An fsync costs CPU, not only time
		// (profiles under `processor bench` showed the WAL's fsync loop
		// at 7% of all CPU without it); an idle store is not delayed.
		WALMinSyncInterval:    func() time.Duration { return WALMinSyncInterval },
		MemTableSize:          MemTableSize,
		L0CompactionThreshold: 8,
		// Writes stall only far beyond the threshold (default 12).
		L0StopWritesThreshold: 32,
	}
	// Most reads on the hot path look up a key that does not exist yet (a
	// new delivery, proposal, fingerprint): bloom filters answer those
	// without reading a table's index and data blocks, so a lookup costs
	// the same with ten thousand intents stored as with a million.
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	// The directory's lock first, before Pebble starts anything (a failed
	// pebble.Open leaves its disk-health goroutine running): a store
	// another processor holds is refused naming it.
	fs := o.FS
	if fs == nil {
		fs = vfs.Default
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kv: open %s: %w", dir, err)
	}
	lock, err := pebble.LockDirectory(dir, fs)
	if err != nil {
		if holder, locked := lockedBy(o.FS, dir, err); locked {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dirlock.InUse(dir, holder, "store.dir"))
		}
		return nil, fmt.Errorf("kv: open %s: %w", dir, err)
	}
	opts.Lock = lock
	db, err := pebble.Open(dir, opts)
	if err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("kv: open %s: %w", dir, err)
	}
	now := o.Now
	if now == nil {
		now = func() int64 { return time.Now().UnixMilli() }
	}
	return &Store{db: db, dirLock: lock, unmark: markLocked(o.FS, dir), log: log, now: now, timerAdded: make(chan struct{}, 1)}, nil
}

// Close closes the database. Operations still running finish first; later
// ones get ErrClosed. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.db.Close()
	s.unmark()
	if lerr := s.dirLock.Close(); err == nil {
		err = lerr
	}
	if s.Failed() != nil {
		return nil // Pebble's state is unreliable after a fatal error; its close error adds nothing
	}
	return err
}

// Lock serializes callers on one key (for example a fingerprint: dispatch
// steps 1–5 and reconciliation never run concurrently for one fingerprint).
func (s *Store) Lock(key string) (unlock func()) { return s.locks.Lock(key) }

func (s *Store) begin() error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (s *Store) end() { s.mu.RUnlock() }

// get decodes the record at key into v; found is false if there is none.
func (s *Store) get(key []byte, v any) (found bool, err error) {
	if err := s.begin(); err != nil {
		return false, err
	}
	defer s.end()
	val, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("kv: get: %w", err)
	}
	defer closer.Close()
	return true, decode(val, v)
}

// decode decodes a record into v: the binary form of codec.go, or JSON
// (every other kind, and records written before the binary form existed
// and not converted yet); the first byte says which.
func decode(val []byte, v any) error {
	if len(val) > 0 && val[0] == recordMark {
		return decodeBinary(val, v)
	}
	return decodeJSON(val, v)
}

func decodeJSON(val []byte, v any) error {
	if err := json.Unmarshal(val, v); err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return nil
}

// scan calls fn for each record whose key starts with prefix, in key order,
// until fn returns false or an error.
func (s *Store) scan(prefix []byte, fn func(key, val []byte) (bool, error)) error {
	return s.scanRange(prefix, prefixEnd(prefix), fn)
}

func (s *Store) scanRange(lower, upper []byte, fn func(key, val []byte) (bool, error)) error {
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("kv: iter: %w", err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		more, err := fn(bytes.Clone(it.Key()), it.Value())
		if err != nil || !more {
			return err
		}
	}
	return it.Error()
}

// count counts the keys under prefix.
func (s *Store) count(prefix []byte) (int, error) {
	n := 0
	err := s.scan(prefix, func(_, _ []byte) (bool, error) {
		n++
		return true, nil
	})
	return n, err
}

// Batch collects writes committed atomically.
type Batch struct {
	s   *Store
	ops []op
	err error
	// addsTimer: committing wakes the scheduler; earliestTimer is the
	// earliest due time (ms, as keyed) among the timers it adds.
	addsTimer     bool
	earliestTimer uint64
}

type op struct {
	key []byte
	val []byte
	del bool
	// end, when set, makes a deletion a range deletion [key, end).
	end []byte
}

// NewBatch starts an atomic group of writes.
func (s *Store) NewBatch() *Batch { return &Batch{s: s} }

// set writes v at key: in the binary form of codec.go for the kinds it
// converts, as JSON otherwise.
func (b *Batch) set(key []byte, v any) {
	if b.err != nil {
		return
	}
	if !b.s.jsonRecords {
		if val, ok := encodeBinary(v); ok {
			b.ops = append(b.ops, op{key: key, val: val})
			return
		}
	}
	val, err := json.Marshal(v, json.Deterministic(true))
	if err != nil {
		b.err = fmt.Errorf("kv: encode: %w", err)
		return
	}
	b.ops = append(b.ops, op{key: key, val: val})
}

func (b *Batch) delete(key []byte) {
	if b.err == nil {
		b.ops = append(b.ops, op{key: key, del: true})
	}
}

// Empty reports whether the batch holds no writes.
func (b *Batch) Empty() bool { return len(b.ops) == 0 && b.err == nil }

// Commit writes the batch atomically. With Sync it returns only after the
// WAL is on disk. A failed commit (including a fatal Pebble error, after
// which the store refuses writes) returns an error and nothing may be
// assumed written.
func (b *Batch) Commit(d Durability) (err error) {
	if b.err != nil {
		return b.err
	}
	if len(b.ops) == 0 {
		return nil
	}
	s := b.s
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	if err := s.Failed(); err != nil {
		return err
	}
	pb := s.db.NewBatch()
	defer func() {
		if !s.failedBy(recover(), &err) {
			pb.Close()
		}
	}()
	for _, o := range b.ops {
		switch {
		case o.del && o.end != nil:
			err = pb.DeleteRange(o.key, o.end, nil)
		case o.del:
			err = pb.Delete(o.key, nil)
		default:
			err = pb.Set(o.key, o.val, nil)
		}
		if err != nil {
			return fmt.Errorf("kv: batch: %w", err)
		}
	}
	opt := pebble.NoSync
	if d == Sync {
		opt = pebble.Sync
	}
	if err := pb.Commit(opt); err != nil {
		return fmt.Errorf("kv: commit: %w", err)
	}
	if d == NoSync {
		s.written.Add(1) // a Sync commit covers itself
	}
	if b.addsTimer {
		// After the commit, before the signal: see timerFloor.
		s.timers.lower(b.earliestTimer)
		select {
		case s.timerAdded <- struct{}{}:
		default: // a signal is pending already
		}
	}
	return nil
}

// Flush makes every commit that returned before it was called durable, as
// if each had been committed with Sync: one WAL fsync covers every earlier
// write, and callers that arrive while one runs wait for it, then share the
// next one (group commit: one caller leads each round, the others sleep
// until the round's channel closes). It returns at once when nothing was
// written since the last fsync. A NoSync write whose only requirement is
// to be durable before an ack (not before a publish or an external call)
// is committed NoSync and flushed by the stage runner before the ack,
// together with every other input's.
func (s *Store) Flush() error {
	target := s.written.Load()
	if s.synced.Load() >= target {
		return nil
	}
	s.syncMu.Lock()
	for s.synced.Load() < target {
		if s.syncing != nil { // a round runs: wait for it, then look again
			done := s.syncing
			s.syncMu.Unlock()
			<-done
			s.syncMu.Lock()
			continue
		}
		done := make(chan struct{})
		s.syncing = done
		s.syncMu.Unlock()
		covered := s.written.Load()
		err := s.logSync()
		s.syncMu.Lock()
		if err == nil {
			s.synced.Store(covered) // rounds never overlap: covered only grows
		}
		s.syncing = nil
		close(done)
		if err != nil {
			s.syncMu.Unlock()
			return err
		}
	}
	s.syncMu.Unlock()
	return nil
}

// logSync writes an empty record to the WAL and fsyncs it, which makes
// every record before it durable.
func (s *Store) logSync() (err error) {
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	if err := s.Failed(); err != nil {
		return err
	}
	defer func() { s.failedBy(recover(), &err) }()
	if err := s.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("kv: flush: %w", err)
	}
	return nil
}

// markFailed records the store's first fatal error and returns the error
// a caller that met fp gets.
func (s *Store) markFailed(fp fatalPanic) error {
	err := fmt.Errorf("%w: %w", ErrFailed, fp)
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if s.failed == nil {
		s.failed = err
	}
	return err
}

// Failed returns the fatal error the store has seen, or nil. A failed store
// should be closed and the process restarted.
func (s *Store) Failed() error {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return s.failed
}

// ForEach calls fn for every record in key order. For tools and tests (the
// privacy tests search every stored byte for planted secrets).
func (s *Store) ForEach(fn func(key, val []byte) error) error {
	return s.scanRange(nil, nil, func(k, v []byte) (bool, error) { return true, fn(k, v) })
}
