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

// A clarification token opens only for the tool, target words, payload
// and session it was given for, and not once it expired.
func TestClarificationTokenBinding(t *testing.T) {
	now := time.Unix(1_764_424_800, 0)
	s := &Server{key: []byte("0123456789abcdef0123456789abcdef"), now: func() time.Time { return now }}
	tl, err := newTool(config.DevMCP().Tools[1])
	if err != nil {
		t.Fatal(err)
	}
	a, err := tl.parse(json.RawMessage(`{"target":"payments API","payload":{"reason":"r"}}`))
	if err != nil {
		t.Fatal(err)
	}
	tok := s.clarification(tl, a, "s-1", tl.choices(a.Target))
	if offered, err := s.openClarification(tok, tl, a, "s-1"); err != nil || len(offered) != 2 {
		t.Fatalf("the right call: %v %v", offered, err)
	}
	other := a
	other.Target = "payments api"
	payload := a
	payload.Payload = []byte(`{"reason":"s"}`)
	for name, c := range map[string]struct {
		a       args
		session string
	}{"another session": {a, "s-2"}, "other target words": {other, "s-1"}, "another payload": {payload, "s-1"}} {
		if _, err := s.openClarification(tok, tl, c.a, c.session); err == nil {
			t.Errorf("%s: opened", name)
		}
	}
	now = now.Add(stateLifetime + time.Second)
	if _, err := s.openClarification(tok, tl, a, "s-1"); err == nil {
		t.Error("an expired token opened")
	}
	if _, err := s.open(tok, tl.Name, a.digest, "s-1"); err == nil {
		t.Error("a clarification token opened as a request state")
	}
}

// A clarification token comes back through the model: only one this server
// gave for this call opens, whatever else is sent.
func FuzzOpenClarification(f *testing.F) {
	s := &Server{key: []byte("0123456789abcdef0123456789abcdef"), now: time.Now}
	tl, err := newTool(config.DevMCP().Tools[1])
	if err != nil {
		f.Fatal(err)
	}
	a, err := tl.parse(json.RawMessage(`{"target":"payments API","payload":{"reason":"r"}}`))
	if err != nil {
		f.Fatal(err)
	}
	good := s.clarification(tl, a, "s-1", tl.choices(a.Target))
	for _, seed := range []string{good, good + "x", "c1.", "c1.zzzzzz.", "c1.-1.AAAA", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, token string) {
		if _, err := s.openClarification(token, tl, a, "s-1"); err == nil && token != good {
			t.Fatalf("opened a token it did not give: %q", token)
		}
	})
}
