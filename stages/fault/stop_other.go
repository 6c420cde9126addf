//go:build crashtest && unix && !linux

package fault

import (
	"os"
	"syscall"
)

// stopSelf stops the process (a process-directed SIGSTOP: the calling
// thread may run on for a moment while the stop takes hold).
func stopSelf() { _ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) }
