//go:build crashtest && unix

package fault

import (
	"os"
	"syscall"
)

// crash kills the process on the spot, as a power cut or the OOM killer
// would; pause stops it, as a stalled VM would, until SIGCONT.
func init() {
	crash = func() {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not delivered synchronously; never return
	}
	pause = func(name string) {
		_, _ = os.Stderr.WriteString(PauseLog + name + "\n")
		stopSelf()
	}
}
