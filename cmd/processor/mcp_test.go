package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/internal/testenv"
)

// What the README promises an agent on a fresh clone: `processor mcp --dev`
// over stdio against `processor run --dev` lists the demo tools, confirms
// an unambiguous action, asks the user to choose for an ambiguous one, and
// asks the user to approve one that needs it: accepted → CONFIRMED,
// declined → DENIED.
func TestMCPDevOverStdio(t *testing.T) {
	bin := testenv.ProcessorBinary(t)
	run := exec.Command(bin, "run", "--dev", "--data", filepath.Join(t.TempDir(), "d"),
		"--listen", "127.0.0.1:0", "--metrics-listen", "", "--log-level", "warn")
	var out testenv.LogBuffer
	run.Stdout, run.Stderr = &out, &out
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	defer func() {
		_ = run.Process.Kill()
		<-exited
	}()
	testenv.WaitFor(t, "run --dev's banner", func() bool { return bytes.Contains(out.Bytes(), []byte("Ctrl-C stops")) })
	url := regexp.MustCompile(`NATS JetStream: (nats://\S+)`).FindStringSubmatch(string(out.Bytes()))
	if url == nil {
		t.Fatalf("no URL in the banner:\n%s", out.Bytes())
	}

	var answer func(*sdk.ElicitParams) *sdk.ElicitResult
	var questions []string
	client := sdk.NewClient(&sdk.Implementation{Name: "test-agent", Version: "1"}, &sdk.ClientOptions{
		Capabilities: &sdk.ClientCapabilities{},
		ElicitationHandler: func(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			questions = append(questions, req.Params.Message)
			return answer(req.Params), nil
		},
	})
	mcpCmd := exec.Command(bin, "mcp", "--dev", "--url", url[1])
	var mcpLog testenv.LogBuffer
	mcpCmd.Stderr = &mcpLog
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &sdk.CommandTransport{Command: mcpCmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.Close() }()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "adjust_stock,portcullis_status,restart_service" {
		t.Errorf("tools: %v", names)
	}
	call := func(tool string, args map[string]any) map[string]any {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v\n%s", tool, err, mcpLog.Bytes())
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var r map[string]any
		_ = json.Unmarshal(raw, &r)
		return r
	}
	r := call("adjust_stock", map[string]any{"target": "Lumber: Cedar-8ft-GradeA", "payload": map[string]any{"quantity": 20}})
	if r["status"] != "confirmed" || r["receipt_id"] == "" {
		t.Errorf("unambiguous adjust_stock: %v", r)
	}
	answer = func(p *sdk.ElicitParams) *sdk.ElicitResult {
		if strings.Contains(p.Message, "Which one") {
			return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"target": "payments API — staging (svc:payments-staging)"}}
		}
		return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}
	}
	r = call("restart_service", map[string]any{"target": "payments API", "payload": map[string]any{"reason": "stuck"}})
	if r["status"] != "confirmed" || len(questions) != 2 {
		t.Errorf("ambiguous restart_service, the user choosing staging and approving: %v; asked %q", r, questions)
	}
	answer = func(*sdk.ElicitParams) *sdk.ElicitResult { return &sdk.ElicitResult{Action: "decline"} }
	r = call("restart_service", map[string]any{"target": "search API", "payload": map[string]any{"reason": "deploy"}})
	if r["status"] != "denied" || r["code"] != "APPROVAL_DECLINED" {
		t.Errorf("declined restart_service: %v", r)
	}
	if !bytes.Contains(mcpLog.Bytes(), []byte("serving on stdio")) {
		t.Errorf("the log on standard error: %s", mcpLog.Bytes())
	}
}

// The command refuses, before connecting anywhere, what would expose the
// server or sign with the wrong key.
func TestMCPRefusesUnsafeStarts(t *testing.T) {
	seed := filepath.Join(t.TempDir(), "other.nk")
	var out, errb bytes.Buffer
	if code := run([]string{"keygen", "host", "--out", seed}, nil, &out, &errb); code != 0 {
		t.Fatalf("keygen: %d %s", code, errb.String())
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"mcp"}, "give --dev"},
		{[]string{"mcp", "--dev", "--http", "0.0.0.0:0"}, "not a loopback address: it needs --tls-cert, --tls-key and --token-file"},
		{[]string{"mcp", "--dev", "--token-file", "x"}, "go with --http"},
		{[]string{"mcp", "--dev", "--nkey", seed}, "--dev sends unsigned"},
		{[]string{"mcp", "--config", "../../config.example.hcl"}, `give --nkey FILE (the seed of host "frontdesk"`},
		{[]string{"mcp", "--config", "../../config.example.hcl", "--nkey", seed}, `not host "frontdesk"'s public_key`},
	} {
		out.Reset()
		errb.Reset()
		t.Setenv(EnvHostNkey, "")
		if code := run(c.args, nil, &out, &errb); code == 0 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, %s; want %q", c.args, code, errb.String(), c.want)
		}
	}
}

// mcp --dev against a processor with authentication on says what to pass
// in the command's words, not the Go client's (issue 34: it advised
// client.LoadSeed).
func TestMCPDevAgainstAuth(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	var out, errb bytes.Buffer
	code := run([]string{"mcp", "--dev", "--url", env.Server.ClientURL()}, nil, &out, &errb)
	msg := errb.String()
	if code != 1 || !strings.Contains(msg, "requires a login") || !strings.Contains(msg, "processor mcp --config FILE --nkey FILE") ||
		strings.Contains(msg, "client.") || strings.Contains(msg, "LoadSeed") {
		t.Errorf("exit %d: %s", code, msg)
	}
}
