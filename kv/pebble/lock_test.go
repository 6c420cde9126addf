package pebble

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// holdEnv, set in a child's environment, makes the test binary open the
// store in that directory, say so, and hold it until its stdin closes.
const holdEnv = "PORTCULLIS_KV_TEST_HOLD"

func init() {
	dir := os.Getenv(holdEnv)
	if dir == "" {
		return
	}
	s, err := Open(dir, Options{})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	fmt.Println("holding")
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Close()
	os.Exit(0)
}

// A store directory another process holds is refused with ErrLocked,
// naming that process (issue 23: a second processor on one store.dir said
// only "resource temporarily unavailable").
func TestOpenLockedByAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), holdEnv+"="+dir)
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
	defer func() { stdin.Close(); _ = child.Wait() }()
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "holding\n" {
		t.Fatalf("child: %q", line)
	}

	_, err = Open(dir, Options{})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("Open of a held directory: %v, want ErrLocked", err)
	}
	want := fmt.Sprintf("held by another processor (pid %d): stop it", child.Process.Pid)
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q does not say %q and name %s", err, want, dir)
	}

	// Once the holder is gone, the directory opens.
	stdin.Close()
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("after the holder exited: %v", err)
	}
	s.Close()
}

func TestOpenLockedInThisProcess(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "this process") {
		t.Errorf("second Open in one process: %v", err)
	}
}
