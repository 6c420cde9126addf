//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd || solaris

package dirlock

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// lock takes a write record lock on all of f, without waiting.
func lock(f *os.File) error {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	return unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
}

// busy reports whether lock's error says another process holds the lock:
// EAGAIN, or EACCES on some systems.
func busy(err error) bool { return errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) }

// owner reports whether another process holds a write lock on path, and
// its pid (0 if the system does not say). It must not be called on a file
// this process holds a record lock on: closing the descriptor it opens
// would release that lock (Check asks the table first).
func owner(path string) (pid int, held bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil || lk.Type == unix.F_UNLCK {
		return 0, false
	}
	return max(int(lk.Pid), 0), true
}
