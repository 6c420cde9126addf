package pebble

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// lockFile is the file Pebble locks in its directory while a store is open.
const lockFile = "LOCK"

// lockedBy reports whether err, from opening the store in dir, says that
// another store holds dir's lock, and who: "another processor (pid N)"
// when the system names the lock's owner, "another processor" when not,
// "this process" when the holder is ourselves (two stores on one dir).
// Only the real file system is asked; an in-memory one is never shared
// between processes.
func lockedBy(fs vfs.FS, dir string, err error) (holder string, locked bool) {
	switch {
	case strings.Contains(err.Error(), "lock held by current process"):
		return "another store of this process", true
	case !lockBusy(err):
		return "", false
	}
	if fs != nil && fs != vfs.Default {
		return "another processor", true
	}
	if pid := lockOwner(filepath.Join(dir, lockFile)); pid > 0 {
		return fmt.Sprintf("another processor (pid %d)", pid), true
	}
	return "another processor", true
}
