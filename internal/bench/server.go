package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/portcullis/portcullis/internal/engine"
)

// ServerOptions are the embedded server's settings as the bench runs them
// (a development configuration: no auth, a random port on 127.0.0.1).
func ServerOptions(storeDir string, syncAlways bool, maxPayload int32) *server.Options {
	return &server.Options{
		ServerName: "portcullis", Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: storeDir, SyncAlways: syncAlways, NoSigs: true, NoLog: true, MaxPayload: maxPayload,
		JetStreamMaxStore: engine.EmbeddedMaxStore,
	}
}

// Serve runs a nats-server with opts, writes its client URL and a newline
// to out, and runs until in ends (its parent closed the pipe or died).
// For each line "stats" read from in it writes a line with the server's
// message counts (ServerStats); "cpuprofile <file>" starts a CPU profile
// to file and "cpuprofile-stop" ends it (each answered with a line "ok" or
// the error). It is what a ServerProcess runs.
func Serve(opts *server.Options, in io.Reader, out io.Writer) error {
	srv, err := server.NewServer(opts)
	if err != nil {
		return err
	}
	go srv.Start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if !srv.ReadyForConnections(10 * time.Second) {
		return errors.New("bench: nats-server did not start within 10s")
	}
	if _, err := fmt.Fprintln(out, srv.ClientURL()); err != nil {
		return err
	}
	var prof *os.File
	defer func() {
		if prof != nil {
			pprof.StopCPUProfile()
			prof.Close()
		}
	}()
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		var answer string
		switch cmd, arg, _ := strings.Cut(lines.Text(), " "); cmd {
		case "stats":
			v, err := srv.Varz(nil)
			if err != nil {
				return err
			}
			answer = fmt.Sprintf("%d %d %d %d", v.InMsgs, v.OutMsgs, v.InBytes, v.OutBytes)
		case "cpuprofile":
			answer = "ok"
			if f, err := os.Create(arg); err != nil {
				answer = err.Error()
			} else if err := pprof.StartCPUProfile(f); err != nil {
				f.Close()
				answer = err.Error()
			} else {
				prof = f
			}
		case "cpuprofile-stop":
			answer = "ok"
			if prof != nil {
				pprof.StopCPUProfile()
				if err := prof.Close(); err != nil {
					answer = err.Error()
				}
				prof = nil
			}
		default:
			continue
		}
		if _, err := fmt.Fprintln(out, answer); err != nil {
			return err
		}
	}
	return lines.Err()
}

// ServerStats are a nats-server's message counts so far: every message a
// client published to it (In) or it delivered to a client (Out), JetStream
// API requests, acks and replies included.
type ServerStats struct {
	InMsgs, OutMsgs, InBytes, OutBytes int64
}

func (a ServerStats) sub(b ServerStats) ServerStats {
	return ServerStats{a.InMsgs - b.InMsgs, a.OutMsgs - b.OutMsgs, a.InBytes - b.InBytes, a.OutBytes - b.OutBytes}
}

// ServerProcess is a nats-server in a child process, so that the
// processor's resident set and CPU time are measured apart from the
// server's (`processor bench -nats-process`): the embedded default runs
// both in one process, a deployment on an external NATS does not.
type ServerProcess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	url    string
	mu     sync.Mutex
}

// StartServerProcess runs name with args — a command that calls Serve —
// and waits for the URL it prints.
func StartServerProcess(name string, args ...string) (*ServerProcess, error) {
	cmd := exec.Command(name, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: nats-server process: %w", err)
	}
	s := &ServerProcess{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout)}
	line, err := s.stdout.ReadString('\n')
	if s.url = strings.TrimSpace(line); err != nil || !strings.HasPrefix(s.url, "nats://") {
		_ = s.Close()
		return nil, fmt.Errorf("bench: nats-server process printed %q: %v", line, err)
	}
	return s, nil
}

// URL is the server's client URL.
func (s *ServerProcess) URL() string { return s.url }

// CPU is the child's CPU time so far, user and system (Linux
// /proc/<pid>/stat, in clock ticks of 10ms); 0 where unknown.
func (s *ServerProcess) CPU() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which may hold spaces: state is
	// field 3, utime 14 and stime 15.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	const tick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	return time.Duration(ut+st) * tick
}

// ask sends one command line to the child and returns its answer line.
func (s *ServerProcess) ask(cmd string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := io.WriteString(s.stdin, cmd+"\n"); err != nil {
		return "", err
	}
	line, err := s.stdout.ReadString('\n')
	return strings.TrimSpace(line), err
}

// Stats asks the server for its message counts; zero if it does not say.
func (s *ServerProcess) Stats() ServerStats {
	var st ServerStats
	line, err := s.ask("stats")
	if err != nil {
		return st
	}
	if _, err := fmt.Sscan(line, &st.InMsgs, &st.OutMsgs, &st.InBytes, &st.OutBytes); err != nil {
		return ServerStats{}
	}
	return st
}

// StartCPUProfile starts a CPU profile of the server process to file.
func (s *ServerProcess) StartCPUProfile(file string) error { return s.answer("cpuprofile " + file) }

// StopCPUProfile ends the profile StartCPUProfile started.
func (s *ServerProcess) StopCPUProfile() error { return s.answer("cpuprofile-stop") }

func (s *ServerProcess) answer(cmd string) error {
	a, err := s.ask(cmd)
	if err == nil && a != "ok" {
		err = errors.New("bench: nats-server process: " + a)
	}
	return err
}

func (s *ServerProcess) proc() string { return strconv.Itoa(s.cmd.Process.Pid) }

// Close ends the child (closing its stdin) and waits for it.
func (s *ServerProcess) Close() error {
	_ = s.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		return <-done
	}
}
