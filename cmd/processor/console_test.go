package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/testenv"
)

// TestConsoleFlags: the console's safety rules are usage errors before
// anything connects — a key or --dev; --dev on loopback only; any other
// address only with TLS and a login token; the token file private and
// long enough.
func TestConsoleFlags(t *testing.T) {
	t.Setenv(EnvOperatorNkey, "")
	dir := t.TempDir()
	seed := filepath.Join(dir, "op.nk")
	if code := run([]string{"keygen", "operator", "--out", seed}, nil, io.Discard, io.Discard); code != 0 {
		t.Fatal("keygen")
	}
	cert, key := testenv.SelfSignedCert(t, dir, "console", "console.example")
	good := filepath.Join(dir, "token")
	if err := os.WriteFile(good, []byte(strings.Repeat("t", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open-token")
	if err := os.WriteFile(open, []byte(strings.Repeat("t", 40)), 0o644); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short-token")
	if err := os.WriteFile(short, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no key", []string{"console"}, 2, "give --nkey FILE"},
		{"dev elsewhere", []string{"console", "--dev", "--listen", "0.0.0.0:9465"}, 2, "--dev serves on loopback only"},
		{"every interface", []string{"console", "--nkey", seed, "--listen", ":9465"}, 2, "needs --tls-cert, --tls-key and --token-file"},
		{"no login", []string{"console", "--nkey", seed, "--listen", "0.0.0.0:9465", "--tls-cert", cert, "--tls-key", key}, 2, "--token-file"},
		{"no TLS", []string{"console", "--nkey", seed, "--listen", "0.0.0.0:9465", "--token-file", good}, 2, "--tls-cert"},
		{"half TLS", []string{"console", "--nkey", seed, "--tls-cert", cert}, 2, "together"},
		{"bad address", []string{"console", "--dev", "--listen", "nowhere"}, 2, "--listen"},
		{"readable token", []string{"console", "--nkey", seed, "--listen", "0.0.0.0:9465", "--tls-cert", cert, "--tls-key", key, "--token-file", open}, 1, "chmod 600"},
		{"short token", []string{"console", "--nkey", seed, "--token-file", short}, 1, "at least 32 characters"},
		{"bad certificate", []string{"console", "--nkey", seed, "--tls-cert", key, "--tls-key", cert}, 1, "--tls-cert"},
	} {
		var out, errb bytes.Buffer
		if code := run(c.args, nil, &out, &errb); code != c.code || !strings.Contains(errb.String(), c.msg) {
			t.Errorf("%s: exit %d, want %d with %q:\n%s", c.name, code, c.code, c.msg, errb.String())
		}
	}
	c := newCmdline("console", command{}, io.Discard, io.Discard)
	opts, _, ok := consoleOptions(c, "0.0.0.0:9465", false, true, cert, key, good)
	if !ok || opts.TLS == nil || opts.Token != strings.Repeat("t", 40) {
		t.Errorf("TLS and a token elsewhere: %+v %v", opts, ok)
	}
}

// TestConsoleCommand runs the built `processor console` beside a processor
// with NATS authentication on, logged in and signing as its operator: it
// says where it serves and the URL to open (a login token made at start),
// serves the queue to the browser that opened it, and stops on SIGTERM
// with exit status 0, its token file gone.
func TestConsoleCommand(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	seed := writeSeed(t, env.Operator)
	bin := testenv.ProcessorBinary(t)                                       // built first: under load a build takes long
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "console", "--url", env.Server.ClientURL(), "--nkey", seed, "--listen", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(stdout)
	line, err := lines.ReadString('\n')
	if err != nil {
		t.Fatalf("no banner: %v\n%s", err, stderr.String())
	}
	m := regexp.MustCompile(`Portcullis console on (http://127\.0\.0\.1:\d+)/ .*requests signed by operator U`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("banner %q", line)
	}
	open, _ := lines.ReadString('\n')
	where, _ := lines.ReadString('\n')
	login := regexp.MustCompile(`Open (http://\S+/login\?token=\S+)`).FindStringSubmatch(open)
	file := regexp.MustCompile(`the token is in (\S+),`).FindStringSubmatch(where)
	if login == nil || file == nil {
		t.Fatalf("no URL to open: %q %q", open, where)
	}
	jar, _ := cookiejar.New(nil)
	web := &http.Client{Jar: jar}
	if res, err := web.Get(login[1]); err != nil {
		t.Fatal(err)
	} else {
		res.Body.Close()
	}
	res, err := web.Get(m[1] + "/indeterminate")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "No indeterminate actions.") {
		t.Errorf("queue: %d\n%s", res.StatusCode, body)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit: %v\n%s", err, stderr.String())
	}
	if _, err := os.Stat(file[1]); !os.IsNotExist(err) {
		t.Errorf("the token file outlived the console: %v", err)
	}
}
