// Package dirlock says whether a data directory is held by a running
// processor, and by whom, and holds one: the lock file a processor keeps
// locked while it uses the directory (Pebble's LOCK in store.dir, the
// processor's own LOCK in an embedded server's nats.store_dir, which
// nats-server does not lock itself).
//
// The locks are POSIX record locks (fcntl), as Pebble's are: the system
// releases them when the process ends however it ends, and names the
// holder's pid to another process that asks (F_GETLK). A process's own
// record locks are invisible to it, and closing any descriptor of a
// locked file releases them, so this process's locks are kept in a table
// (Mark) and Holder answers from it without opening their files.
//
// Where the system has no record locks (Windows) a lock is only this
// process's table: another processor on the same directory is not seen.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Name is the lock file's name inside a directory (Pebble's too).
const Name = "LOCK"

// ErrHeld is wrapped by Lock's error when another holds the lock.
var ErrHeld = errors.New("held")

// HeldError says that a lock file is held, and by whom.
type HeldError struct {
	Path string
	// Pid is the holder's process id: 0 when the system does not say.
	Pid int
	// Self: the holder is this process.
	Self bool
}

func (e *HeldError) Error() string { return e.Path + " is held by " + e.Holder() }

// Holder names the holder for people: "another processor (pid N)",
// "another processor", or "this process".
func (e *HeldError) Holder() string {
	switch {
	case e.Self:
		return fmt.Sprintf("this process (pid %d)", os.Getpid())
	case e.Pid > 0:
		return fmt.Sprintf("another processor (pid %d)", e.Pid)
	}
	return "another processor"
}

func (e *HeldError) Unwrap() error { return ErrHeld }

// InUse is what a processor refused a directory is told, for the
// directory dir configured as attr (store.dir, nats.store_dir) held by
// holder (HeldError.Holder): kv, the engine and the configuration check
// all word it so.
func InUse(dir, holder, attr string) string {
	return dir + " is held by " + holder + ": stop it, or give this processor a " + attr + " of its own"
}

// held is this process's table of locked files, by absolute path.
var held = struct {
	sync.Mutex
	paths map[string]int
}{paths: map[string]int{}}

func key(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return filepath.Clean(abs)
	}
	return filepath.Clean(path)
}

// Mark records that this process holds the lock file path by other means
// (Pebble's lock of store.dir), until the returned function is called.
func Mark(path string) (unmark func()) {
	k := key(path)
	held.Lock()
	held.paths[k]++
	held.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			held.Lock()
			defer held.Unlock()
			if held.paths[k]--; held.paths[k] <= 0 {
				delete(held.paths, k)
			}
		})
	}
}

func markedHere(path string) bool {
	held.Lock()
	defer held.Unlock()
	return held.paths[key(path)] > 0
}

// Check returns a *HeldError when the lock file path is held by this
// process or another, nil when it is free or does not exist. It never
// takes the lock.
func Check(path string) error {
	if markedHere(path) {
		return &HeldError{Path: path, Self: true}
	}
	if pid, ok := owner(path); ok {
		return &HeldError{Path: path, Pid: pid}
	}
	return nil
}

// Busy reports whether err, from taking a record lock, says another
// process holds it (Pebble's lock of store.dir included).
func Busy(err error) bool { return busy(err) }

// Lock is a held lock file.
type Lock struct {
	path   string
	f      *os.File
	unmark func()
}

// Acquire creates the lock file path if need be and locks it, or returns
// a *HeldError naming its holder. The lock lasts until Release or the
// process's end.
func Acquire(path string) (*Lock, error) {
	if markedHere(path) {
		return nil, &HeldError{Path: path, Self: true}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := lock(f); err != nil {
		_ = f.Close()
		if busy(err) {
			pid, _ := owner(path)
			return nil, &HeldError{Path: path, Pid: pid}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return &Lock{path: path, f: f, unmark: Mark(path)}, nil
}

// Release unlocks and closes the lock file (it stays on disk). Release is
// idempotent.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	l.unmark()
	err := l.f.Close() // closing releases the record lock
	l.f = nil
	return err
}
