package pebble

import (
	"errors"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/portcullis/portcullis/kv/dirlock"
)

// lockFile is the file Pebble locks in its directory while a store is open.
const lockFile = dirlock.Name

// lockedBy reports whether err, from opening the store in dir, says that
// another store holds dir's lock, and who: "another processor (pid N)"
// when the system names the lock's owner, "another processor" when not,
// "another store of this process" when the holder is ourselves (two
// stores on one dir). Only the real file system is asked; an in-memory
// one is never shared between processes.
func lockedBy(fs vfs.FS, dir string, err error) (holder string, locked bool) {
	switch {
	case strings.Contains(err.Error(), "lock held by current process"):
		return "another store of this process", true
	case !dirlock.Busy(err):
		return "", false
	}
	var he *dirlock.HeldError
	if (fs == nil || fs == vfs.Default) && errors.As(dirlock.Check(filepath.Join(dir, lockFile)), &he) {
		return he.Holder(), true
	}
	return "another processor", true
}

// markLocked records Pebble's lock of dir in this process's table of held
// directories (dirlock.Mark), so that a configuration check in this
// process (processor validate) sees it without touching the lock file.
func markLocked(fs vfs.FS, dir string) (unmark func()) {
	if fs != nil && fs != vfs.Default {
		return func() {}
	}
	return dirlock.Mark(filepath.Join(dir, lockFile))
}
