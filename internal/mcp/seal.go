package mcp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis/portcullis/internal/config"
)

// Two things this server hands out come back through the client, and are
// sealed with an HMAC under a key of this process (random at start): the
// state of a call waiting for the user's answer to an input request
// (protocol 2026-07-28), and the token of a clarification given to a
// client without elicitation. Each is bound to everything it may be used
// with, and expires.
//
// The key is the MCP server's own, not the processor's internal key: this
// process is a host, outside the processor's trust, and a key that
// authenticates internal messages must not leave the processors. Nothing
// sealed needs to outlive the process: MCP sessions do not either.

// stateLifetime bounds how long a question may wait for its answer.
const stateLifetime = 30 * time.Minute

// state is what a call needs to continue after an input request.
type state struct {
	Purpose    string `json:"u"`
	Tool       string `json:"t"`
	Digest     string `json:"d"` // the call's arguments
	Session    string `json:"s"`
	ProposalID string `json:"p"`
	Stage      string `json:"g"`
	// Chosen is the record the user picked (the proposal's one candidate).
	Chosen string `json:"c,omitempty"`
	// Offered are the records the choose question offered.
	Offered []string `json:"o,omitempty"`
	// Bound is the record the approval question named.
	Bound string `json:"b,omitempty"`
	// Progress is the last progress value sent in the call, so that the
	// next round's rise above it.
	Progress float64 `json:"n,omitempty"`
	Expires  int64   `json:"e"`
}

const purposeState = "state"

// errBadState: a request state this server did not make for this call.
var errBadState = errors.New("mcp: the request state is not this server's state for this call")

// errBadClarification: a clarification token this server did not give for
// this call.
var errBadClarification = errors.New("mcp: the clarification is not one this server gave for this call")

func (s *Server) mac(body []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write(body)
	return m.Sum(nil)
}

func (s *Server) seal(st state) string {
	st.Purpose = purposeState
	st.Expires = s.now().Add(stateLifetime).Unix()
	body, _ := json.Marshal(st)
	return base64.RawURLEncoding.EncodeToString(body) + "." + base64.RawURLEncoding.EncodeToString(s.mac(body))
}

func (s *Server) open(sealed, toolName, argDigest, session string) (state, error) {
	body64, mac64, ok := strings.Cut(sealed, ".")
	body, err1 := base64.RawURLEncoding.Strict().DecodeString(body64)
	mac, err2 := base64.RawURLEncoding.Strict().DecodeString(mac64)
	if !ok || err1 != nil || err2 != nil {
		return state{}, errBadState
	}
	var st state
	if !hmac.Equal(mac, s.mac(body)) || json.Unmarshal(body, &st) != nil {
		return state{}, errBadState
	}
	if st.Purpose != purposeState || st.Tool != toolName || st.Digest != argDigest || st.Session != session || s.now().Unix() > st.Expires {
		return state{}, errBadState
	}
	return st, nil
}

// clarificationPrefix starts every clarification token (its version).
const clarificationPrefix = "c1."

// clarification is the token of a clarification: bound to the tool, the
// target words, the payload, the session and the records offered (which
// the next call recomputes from the same target words), until it expires.
func (s *Server) clarification(t *tool, a args, session string, offered []config.MCPCandidate) string {
	exp := s.now().Add(stateLifetime).Unix()
	return clarificationPrefix + strconv.FormatInt(exp, 36) + "." +
		base64.RawURLEncoding.EncodeToString(s.clarificationMAC(t.Name, a, session, offered, exp))
}

func (s *Server) clarificationMAC(toolName string, a args, session string, offered []config.MCPCandidate, exp int64) []byte {
	refs := make([]string, len(offered))
	for i, c := range offered {
		refs[i] = c.Referent
	}
	body, _ := json.Marshal([]any{"clarification", toolName, a.Target, digest(a.Payload), session, refs, exp})
	return s.mac(body)
}

// openClarification returns the records a clarification token offered,
// when this server gave it for this tool, target, payload and session and
// it has not expired.
func (s *Server) openClarification(token string, t *tool, a args, session string) ([]config.MCPCandidate, error) {
	rest, ok := strings.CutPrefix(token, clarificationPrefix)
	exp36, mac64, ok2 := strings.Cut(rest, ".")
	exp, err1 := strconv.ParseInt(exp36, 36, 64)
	mac, err2 := base64.RawURLEncoding.Strict().DecodeString(mac64)
	// One spelling per token: base 36 reads either case.
	if !ok || !ok2 || err1 != nil || err2 != nil || strconv.FormatInt(exp, 36) != exp36 || s.now().Unix() > exp {
		return nil, errBadClarification
	}
	offered := t.choices(a.Target)
	if !hmac.Equal(mac, s.clarificationMAC(t.Name, a, session, offered, exp)) {
		return nil, errBadClarification
	}
	return offered, nil
}
