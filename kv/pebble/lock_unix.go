//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd || solaris

package pebble

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// lockBusy reports whether err is what Pebble's lock (a POSIX record lock
// on its LOCK file) fails with when another process holds it: EAGAIN, or
// EACCES on some systems.
func lockBusy(err error) bool {
	return errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES)
}

// lockOwner is the pid of the process holding a write lock on path, or 0
// if none does or it cannot be told (F_GETLK names the owner of a POSIX
// record lock, as Pebble's is).
func lockOwner(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil || lk.Type == unix.F_UNLCK {
		return 0
	}
	return int(lk.Pid)
}
