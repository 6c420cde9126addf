package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/config"
)

// ProcessorBinary builds cmd/processor once per test binary and returns its
// path. Crash tests run it as a child they can SIGKILL. The crashtest tag
// arms fault points from the environment (package fault); production
// builds never have it.
func ProcessorBinary(t testing.TB) string {
	t.Helper()
	return Binary(t, "processor-crashtest", "./cmd/processor", "-tags", "crashtest")
}

var (
	buildMu sync.Mutex
	builds  = map[string]*build{}
)

type build struct {
	once sync.Once
	path string
	err  error
}

// Binary builds the command pkg (a path in this module, or a package of
// a module it requires) with the go build flags given, once per test
// binary, and returns its path. Every test binary of a checkout shares one
// path per name under the temporary directory: each builds to a private
// name and renames it into place (atomic), so packages testing in
// parallel never see half a binary and nothing piles up.
func Binary(t testing.TB, name, pkg string, flags ...string) string {
	t.Helper()
	buildMu.Lock()
	b := builds[name]
	if b == nil {
		b = &build{}
		builds[name] = b
	}
	buildMu.Unlock()
	b.once.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Dir(filepath.Dir(filepath.Dir(file))) // internal/testenv/process.go
		sum := sha256.Sum256([]byte(root))
		dir := filepath.Join(os.TempDir(), "portcullis-test-bin")
		if b.err = os.MkdirAll(dir, 0o755); b.err != nil {
			return
		}
		b.path = filepath.Join(dir, name+"-"+hex.EncodeToString(sum[:6]))
		tmp := fmt.Sprintf("%s.%d", b.path, os.Getpid())
		cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", tmp, pkg)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
			return
		}
		b.err = os.Rename(tmp, b.path)
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Process is a `processor run` child process.
type Process struct {
	cmd  *exec.Cmd
	Logs *LogBuffer
	done chan struct{}
	err  error
}

// WriteConfig writes cfg as HCL into a temporary file and returns its path.
func WriteConfig(t testing.TB, cfg *config.Config) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "processor.hcl")
	if err := os.WriteFile(path, config.Format(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// StartProcess runs `processor run --config` on cfg with extra environment
// variables (fault.Env to arm a crash point). Its output goes to Logs. The
// process is killed when the test ends if still running.
func StartProcess(t testing.TB, cfg *config.Config, env ...string) *Process {
	t.Helper()
	return StartProcessIn(t, nil, cfg, env...)
}

// StartProcessIn is StartProcess with the command run by prefix: `ip
// netns exec NS` runs the processor inside a network namespace (package
// partition). The process is the processor's own once prefix exec'd it,
// so signals reach it.
func StartProcessIn(t testing.TB, prefix []string, cfg *config.Config, env ...string) *Process {
	t.Helper()
	argv := append(append([]string(nil), prefix...), ProcessorBinary(t), "run", "--config", WriteConfig(t, cfg))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	dieWithParent(cmd) // a test binary that panics must not leave processors behind
	logs := &LogBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Process{cmd: cmd, Logs: logs, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		p.Wait(10 * time.Second)
	})
	return p
}

// Kill sends SIGKILL.
func (p *Process) Kill() { _ = p.cmd.Process.Signal(syscall.SIGKILL) }

// Pause sends SIGSTOP: the process freezes where it is (its connections
// stay open, its timers stand still), as a stalled VM or a long pause
// would freeze it, until Resume.
func (p *Process) Pause() { _ = p.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume sends SIGCONT: a paused process carries on where it stopped.
func (p *Process) Resume() { _ = p.cmd.Process.Signal(syscall.SIGCONT) }

// Terminate sends SIGTERM (a graceful drain).
func (p *Process) Terminate() { _ = p.cmd.Process.Signal(syscall.SIGTERM) }

// Wait waits up to d for the process to exit and reports whether it did.
func (p *Process) Wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// Exited returns a channel closed when the process exits.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Killed reports whether the process died of SIGKILL.
func (p *Process) Killed() bool {
	select {
	case <-p.done:
	default:
		return false
	}
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// ExitCode returns the exit code (-1 if killed by a signal or still running).
func (p *Process) ExitCode() int {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// WaitLog waits until the process has logged a line containing s.
func (p *Process) WaitLog(t testing.TB, s string) {
	t.Helper()
	if p.Logs.wait(s, p.done, WaitTimeout) {
		return
	}
	select {
	case <-p.done:
		t.Fatalf("processor exited (%v) before logging %q:\n%s", p.err, s, p.Logs.Bytes())
	default:
		t.Fatalf("processor did not log %q within %s:\n%s", s, WaitTimeout, p.Logs.Bytes())
	}
}
