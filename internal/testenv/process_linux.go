package testenv

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel SIGKILL the child when the test process dies.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
