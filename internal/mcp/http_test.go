package mcp_test

import (
	"context"
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
