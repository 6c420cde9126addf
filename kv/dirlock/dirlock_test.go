package dirlock_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/kv/dirlock"
)

// holdEnv, set in a child's environment, makes the test binary hold that
// lock file until its stdin closes.
const holdEnv = "PORTCULLIS_DIRLOCK_TEST_HOLD"

func TestMain(m *testing.M) {
	if path := os.Getenv(holdEnv); path != "" {
		l, err := dirlock.Acquire(path)
		if err != nil {
			fmt.Println("acquire:", err)
			os.Exit(1)
		}
		fmt.Println("holding")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		_ = l.Release()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// In one process: a held lock is refused as this process's, Check sees
// it without releasing it, and Release frees it.
func TestThisProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), dirlock.Name)
	if err := dirlock.Check(path); err != nil {
		t.Fatalf("Check of a missing lock file: %v", err)
	}
	l, err := dirlock.Acquire(path)
	if err != nil {
		t.Fatal(err)
	}
	var he *dirlock.HeldError
	for range 2 { // Check must not release it
		if err := dirlock.Check(path); !errors.As(err, &he) || !he.Self {
			t.Fatalf("Check of a lock this process holds: %v", err)
		}
	}
	if _, err := dirlock.Acquire(path); !errors.Is(err, dirlock.ErrHeld) || !strings.Contains(err.Error(), "held by this process (pid") {
		t.Fatalf("second Acquire: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatalf("Release twice: %v", err)
	}
	if err := dirlock.Check(path); err != nil {
		t.Fatalf("Check after Release: %v", err)
	}
	again, err := dirlock.Acquire(path)
	if err != nil {
		t.Fatal(err)
	}
	_ = again.Release()
}

// Another process's lock is refused naming its pid, and is free once that
// process ends.
func TestAnotherProcess(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no record locks: only this process's table")
	}
	path := filepath.Join(t.TempDir(), dirlock.Name)
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), holdEnv+"="+path)
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "holding\n" {
		t.Fatalf("child: %q", line)
	}
	want := fmt.Sprintf("%s is held by another processor (pid %d)", path, child.Process.Pid)
	if err := dirlock.Check(path); err == nil || err.Error() != want {
		t.Errorf("Check: %v, want %q", err, want)
	}
	if _, err := dirlock.Acquire(path); err == nil || err.Error() != want {
		t.Errorf("Acquire: %v, want %q", err, want)
	}
	stdin.Close()
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	l, err := dirlock.Acquire(path)
	if err != nil {
		t.Fatalf("after the holder ended: %v", err)
	}
	_ = l.Release()
}
