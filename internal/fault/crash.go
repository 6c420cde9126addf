//go:build crashtest && unix

package fault

import (
	"os"
	"syscall"
)

// crash kills the process on the spot, as a power cut or the OOM killer would.
func init() {
	crash = func() {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not delivered synchronously; never return
	}
}
