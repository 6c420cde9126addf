//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd || solaris)

package dirlock

import "os"

// Without record locks a lock is only this process's table (Mark).
func lock(*os.File) error { return nil }

func busy(error) bool { return false }

func owner(string) (int, bool) { return 0, false }
