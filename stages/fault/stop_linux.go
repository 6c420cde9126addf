//go:build crashtest && linux

package fault

import (
	"runtime"
	"syscall"
)

// stopSelf stops the whole process with a SIGSTOP aimed at the calling
// thread: the kernel stops it before the kill returns to user space, so
// the goroutine at the fault point does not run on while the other
// threads are being stopped.
func stopSelf() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = syscall.Tgkill(syscall.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}
