package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/internal/mcp"
)

type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// Over Streamable HTTP a request without the bearer token is refused (401),
// so is one from a foreign browser origin (403); a client with the token
// lists the tools and confirms an action, elicitation included.
func TestHTTPGuardsAndServes(t *testing.T) {
	f := start(t)
	const token = "0123456789abcdef0123456789abcdef-token"
	ts := httptest.NewServer(f.srv.HTTPHandler(mcp.HTTPOptions{Token: token, AllowedOrigins: []string{"https://agent.example"}}))
	defer ts.Close()
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	for _, c := range []struct {
		name, auth, origin string
		want               int
	}{
		{"no token", "", "", http.StatusUnauthorized},
		{"wrong token", "Bearer nope", "", http.StatusUnauthorized},
		{"foreign origin", "Bearer " + token, "https://evil.example", http.StatusForbidden},
	} {
		req, _ := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", c.name, res.StatusCode, c.want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := sdk.NewClient(&sdk.Implementation{Name: "http-agent", Version: "1"}, &sdk.ClientOptions{
		Capabilities: &sdk.ClientCapabilities{},
		ElicitationHandler: func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
		},
	})
	cs, err := cl.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: ts.URL, DisableStandaloneSSE: true,
		HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.Close() }()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "adjust_stock_asking", Arguments: cedar(12)})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || !strings.HasPrefix(res.Content[0].(*sdk.TextContent).Text, "confirmed") {
		t.Errorf("over HTTP: %+v", res.Content[0])
	}
}

// Without a token every request is refused, whatever it carries (a
// loopback address is no credential); Open (--dev) serves without one.
func TestHTTPWithoutTokenRefusesAll(t *testing.T) {
	f := start(t)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for _, c := range []struct {
		name string
		opts mcp.HTTPOptions
		auth string
		want int
	}{
		{"no token configured", mcp.HTTPOptions{}, "", http.StatusUnauthorized},
		{"no token configured, a bearer sent", mcp.HTTPOptions{}, "Bearer ", http.StatusUnauthorized},
		{"open (--dev)", mcp.HTTPOptions{Open: true}, "", http.StatusOK},
	} {
		ts := httptest.NewServer(f.srv.HTTPHandler(c.opts))
		req, _ := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		endSession(t, ts.URL, res.Header.Get("Mcp-Session-Id"), "")
		ts.Close()
		if res.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", c.name, res.StatusCode, c.want)
		}
	}
}

// Over Streamable HTTP too, a call's progress notifications rise and all
// come before its result on the call's event stream.
func TestHTTPProgressBeforeResult(t *testing.T) {
	f := start(t)
	const token = "0123456789abcdef0123456789abcdef-token"
	ts := httptest.NewServer(f.srv.HTTPHandler(mcp.HTTPOptions{Token: token}))
	defer ts.Close()
	session := ""
	post := func(body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`)
	session = res.Header.Get("Mcp-Session-Id")
	_, _ = io.ReadAll(res.Body)
	_ = res.Body.Close()
	defer endSession(t, ts.URL, session, token)
	res = post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	_ = res.Body.Close()
	res = post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"restart_service_policy","arguments":{"target":"search API","payload":{"reason":"http progress"}},"_meta":{"progressToken":"p"}}}`)
	defer res.Body.Close()
	var progress []float64
	resulted, late := false, 0
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		switch {
		case m["method"] == "notifications/progress":
			if resulted {
				late++
			}
			progress = append(progress, m["params"].(map[string]any)["progress"].(float64))
		case m["id"] == float64(2):
			resulted = true
			if !strings.Contains(data, `"status":"confirmed"`) {
				t.Errorf("result: %s", data)
			}
		}
	}
	if !resulted || len(progress) < 2 || late != 0 {
		t.Errorf("result %v, progress %v, %d after the result", resulted, progress, late)
	}
	for i := 1; i < len(progress); i++ {
		if progress[i] <= progress[i-1] {
			t.Errorf("progress does not rise: %v", progress)
		}
	}
}

// endSession ends a Streamable HTTP session (DELETE), as a client leaving
// does.
func endSession(t *testing.T, url, session, token string) {
	t.Helper()
	if session == "" {
		return
	}
	req, _ := http.NewRequest(http.MethodDelete, url, nil)
	req.Header.Set("Mcp-Session-Id", session)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
}
