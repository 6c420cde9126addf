package mcp

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/config"
)

// Arguments are untrusted bytes from a model: whatever they are, parse
// either returns arguments the schema accepts or an error wrapping
// ErrBadArguments; it never panics.
func FuzzParseArguments(f *testing.F) {
	tl, err := newTool(config.DevMCP().Tools[0])
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{`{"target":"Lumber: Pine-8ft","payload":{"quantity":3}}`, `{"target":"x","payload":{"quantity":3},"choice":"sku-2001"}`,
		`{"target":"x","payload":{"quantity":3},"tenant_ref":"t"}`, `{"a":1,"a":2}`, `[]`, `null`, ``, `{"payload":{"quantity":1e400}}`, "{\"target\":\"\xff\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		a, err := tl.parse(json.RawMessage(raw))
		if err != nil {
			if !errors.Is(err, ErrBadArguments) {
				t.Fatalf("error %v does not wrap ErrBadArguments", err)
			}
			return
		}
		if a.Target == "" || len(a.Payload) == 0 || a.digest == "" {
			t.Fatalf("accepted %q as %+v", raw, a)
		}
	})
}

// A request state comes back through the client: only one this server
// sealed, for this tool, these arguments and this session, opens.
func FuzzOpenState(f *testing.F) {
	s := &Server{key: []byte("0123456789abcdef0123456789abcdef"), now: time.Now}
	good := s.seal(state{Tool: "t", Digest: "d", Session: "s", ProposalID: "mcp-1", Stage: inputApprove})
	f.Add(good)
	f.Add(good + "x")
	f.Add("e30.AAAA")
	f.Fuzz(func(t *testing.T, sealed string) {
		st, err := s.open(sealed, "t", "d", "s")
		if err == nil && (st.ProposalID != "mcp-1" || st.Stage != inputApprove) {
			t.Fatalf("opened a state it did not seal: %q → %+v", sealed, st)
		}
	})
	if _, err := s.open(good, "other-tool", "d", "s"); err == nil {
		f.Fatal("a state opened for another tool")
	}
	if _, err := s.open(good, "t", "other-args", "s"); err == nil {
		f.Fatal("a state opened for other arguments")
	}
}
