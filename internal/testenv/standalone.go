package testenv

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// Standalone returns a testing.TB for code that runs testenv outside a
// test function — a runnable Example has no *testing.T. A failure (Fatal,
// Errorf, ...) panics with its message, which fails the Example; TempDir
// makes a directory that stop removes; stop runs every Cleanup, last
// first. Call stop when done, typically deferred.
func Standalone() (tb testing.TB, stop func()) {
	s := &standalone{}
	return s, s.stop
}

// standalone implements the testing.TB methods testenv and its callers
// use; the embedded interface (nil) only supplies the unexported method.
type standalone struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
}

func (s *standalone) Name() string                      { return "standalone" }
func (s *standalone) Helper()                           {}
func (s *standalone) Failed() bool                      { return false }
func (s *standalone) Log(args ...any)                   {}
func (s *standalone) Logf(format string, args ...any)   {}
func (s *standalone) Error(args ...any)                 { panic(fmt.Sprint(args...)) }
func (s *standalone) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (s *standalone) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (s *standalone) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (s *standalone) FailNow()                          { panic("testenv: FailNow") }
func (s *standalone) Fail()                             { panic("testenv: Fail") }

func (s *standalone) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}

func (s *standalone) TempDir() string {
	dir, err := os.MkdirTemp("", "testenv-")
	if err != nil {
		panic(err)
	}
	s.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func (s *standalone) stop() {
	for {
		s.mu.Lock()
		n := len(s.cleanups)
		if n == 0 {
			s.mu.Unlock()
			return
		}
		f := s.cleanups[n-1]
		s.cleanups = s.cleanups[:n-1]
		s.mu.Unlock()
		f()
	}
}
