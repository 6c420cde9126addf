package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/testenv"
)

// runMainEnv, set in a child's environment, makes the test binary run as
// the processor (a command such as `bench -serve-nats`, which
// `bench -nats-process` starts from its own executable).
const runMainEnv = "PORTCULLIS_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

func TestValidate(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"validate", "--config", "../../config.example.hcl"}, nil, &out, &errb); code != 0 {
		t.Fatalf("example: exit %d: %s", code, errb.String())
	}
	bad := filepath.Join(t.TempDir(), "bad.hcl")
	os.WriteFile(bad, []byte("nats {\n  listen = 4222\n  frob = 1\n}\n"), 0o600)
	out.Reset()
	errb.Reset()
	if code := run([]string{"validate", "--config", bad}, nil, &out, &errb); code != 1 {
		t.Fatalf("bad config: exit %d", code)
	}
	if !strings.Contains(errb.String(), "bad.hcl:3,") {
		t.Errorf("error lacks file:line: %s", errb.String())
	}
	if code := run([]string{"validate"}, nil, &out, &errb); code != 2 {
		t.Errorf("no --config: exit %d", code)
	}
	if code := run([]string{"frobnicate"}, nil, &out, &errb); code != 2 {
		t.Errorf("unknown command: exit %d", code)
	}
}

// `processor run --dev` answers JetStream on its --listen address, serves
// /metrics on its --metrics-listen address, and drains on SIGTERM. (The
// defaults, 127.0.0.1:4222 and :9464, are the config package's constants;
// the test takes free ports so that it never meets a processor already
// running on this machine.)
func TestRunDev(t *testing.T) {
	bin := testenv.ProcessorBinary(t)
	dir := t.TempDir()
	natsAddr, metricsAddr := freeAddr(t), freeAddr(t)
	cmd := exec.Command(bin, "run", "--dev", "--listen", natsAddr, "--metrics-listen", metricsAddr)
	cmd.Dir = dir
	var out testenv.LogBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	out.Wait(t, "Portcullis is running")
	if !bytes.Contains(out.Bytes(), []byte("UNSIGNED PROPOSALS")) {
		t.Error("--dev does not warn about unsigned proposals")
	}
	nc, err := nats.Connect("nats://" + natsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.Stream(ctx, "ACTIONS_PROPOSALS"); err != nil {
		t.Errorf("proposals stream: %v", err)
	}
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(body, []byte("actions_stage_messages_total")) {
		t.Errorf("metrics lack actions_stage_messages_total")
	}
	nc.Close()
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, out.Bytes())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "store")); err != nil {
		t.Errorf("no data/store: %v", err)
	}
}
