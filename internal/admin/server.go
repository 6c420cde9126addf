package admin

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/journal"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/reconciliation"
	"github.com/portcullis/portcullis/subjects"
)

// Nonces claims an operator request's nonce until it expires: false if it
// was claimed before (kv.Store implements it).
type Nonces interface {
	ClaimNonce(nonce string, expiresAtMs, nowMs int64) (bool, error)
}

// MaxRequestBytes bounds a request body.
const MaxRequestBytes = 4096

// Server answers operator requests from the processor's own state.
type Server struct {
	Journal journal.Store
	// Nonces remembers operator request nonces (the processor's store).
	Nonces         Nonces
	Reconciliation *reconciliation.Stage
	Subjects       subjects.Subjects
	Clock          stages.Clock
	Log            *slog.Logger
	// Operators are the configured operators: only their signatures count.
	Operators []config.Role
	// AllowUnsigned accepts requests without signature headers, from an
	// unnamed operator (admission.allow_unsigned; `processor run --dev`).
	// Their stamp is checked only when the body carries one. A request
	// with either signature header is checked in full even then.
	AllowUnsigned bool
}

func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// Serve subscribes to the admin subjects on nc. stop unsubscribes and waits
// for requests being answered.
func (s *Server) Serve(nc *nats.Conn) (stop func(), err error) {
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		stopped bool
		subs    []*nats.Subscription
	)
	handle := func(fn func(hdr nats.Header, data []byte) []byte) nats.MsgHandler {
		return func(m *nats.Msg) {
			mu.Lock()
			if stopped {
				mu.Unlock()
				return
			}
			wg.Add(1)
			mu.Unlock()
			defer wg.Done()
			if m.Reply == "" {
				return
			}
			_ = m.Respond(fn(m.Header, m.Data))
		}
	}
	routes := []struct {
		verb string
		fn   func(nats.Header, []byte) []byte
	}{
		{subjects.AdminReceipt, s.receipts},
		{subjects.AdminReconcileList, s.list},
		{subjects.AdminReconcileSolve, s.resolve},
	}
	unsubscribe := func() {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
	}
	for _, r := range routes {
		sub, err := nc.Subscribe(s.Subjects.Admin(r.verb), handle(r.fn))
		if err != nil {
			unsubscribe()
			return nil, fmt.Errorf("admin: subscribe: %w", err)
		}
		subs = append(subs, sub)
	}
	if err := nc.Flush(); err != nil {
		unsubscribe()
		return nil, fmt.Errorf("admin: subscribe: %w", err)
	}
	return func() {
		unsubscribe()
		mu.Lock()
		stopped = true
		mu.Unlock()
		wg.Wait()
	}, nil
}

func answer[T any](v *T, e *Error) []byte {
	return schema.MustMarshal(reply[T]{Result: v, Error: e})
}

func bad(msg string) *Error { return &Error{Code: CodeBadRequest, Message: msg} }

// refuse logs a refused request, value-free (the verb, the code and the
// check that failed), and returns its error.
func (s *Server) refuse(verb, code, reason string) *Error {
	s.log().Warn("operator request refused", "verb", verb, "code", code, "reason", reason)
	return &Error{Code: code, Message: "operator request refused: " + reason}
}

// admit runs the checks every request passes before its verb acts, in this
// order: size; signature (unauthenticated); strict decoding into req
// (bad_request); the stamp's form (bad_request), age (stale) and nonce
// (replayed: the nonce is claimed, synced, before admit returns). It
// returns the signing operator's configured name ("" when unsigned).
//
// An unsigned request (accepted only with AllowUnsigned) may omit the
// stamp; a stamp it carries is checked like a signed request's.
func (s *Server) admit(verb string, hdr nats.Header, data []byte, req stamped) (operator string, e *Error) {
	if len(data) > MaxRequestBytes {
		return "", bad("request too large")
	}
	operator, signed, reason := authenticate(s.Operators, s.AllowUnsigned, hdr, data)
	if reason != "" {
		return "", s.refuse(verb, CodeUnauthenticated, reason)
	}
	if e := decode(data, req); e != nil {
		return "", e
	}
	st := req.stamp()
	if !signed && *st == (Stamp{}) {
		return "", nil
	}
	if st.RequestedAtMs <= 0 || !ValidNonce(st.Nonce) {
		return "", bad(fmt.Sprintf("requested_at_ms (Unix ms) and nonce (%d–%d characters of A-Z a-z 0-9 _ -) are required", MinNonceLen, MaxNonceLen))
	}
	now, skew := stages.NowMs(s.Clock), MaxRequestSkew.Milliseconds()
	switch {
	case st.RequestedAtMs < now-skew:
		return "", s.refuse(verb, CodeStale, fmt.Sprintf("requested_at_ms is more than %s old", MaxRequestSkew))
	case st.RequestedAtMs > now+skew:
		return "", s.refuse(verb, CodeStale, fmt.Sprintf("requested_at_ms is more than %s in the future", MaxRequestSkew))
	}
	// Remembered while the request could be accepted, and a little longer
	// when it was made in the processor's past.
	fresh, err := s.Nonces.ClaimNonce(st.Nonce, max(st.RequestedAtMs, now)+skew, now)
	if err != nil {
		return "", s.internal("recording the nonce", err)
	}
	if !fresh {
		return "", s.refuse(verb, CodeReplayed, "the nonce was used before")
	}
	s.log().Debug("operator request", "verb", verb, "operator", operator, "signed", signed)
	return operator, nil
}

func (s *Server) internal(what string, err error) *Error {
	s.log().Error("admin request failed", "what", what, "err", err)
	return &Error{Code: CodeInternal, Message: what + " failed; see the processor's log"}
}

// decode strictly decodes a request body.
func decode(data []byte, v any) *Error {
	if len(data) == 0 {
		data = []byte("{}")
	}
	if err := schema.Decode(data, v); err != nil {
		return bad("request does not decode")
	}
	return nil
}

func (s *Server) receipts(hdr nats.Header, data []byte) []byte {
	var req ReceiptsRequest
	if _, e := s.admit(subjects.AdminReceipt, hdr, data, &req); e != nil {
		return answer[Receipts](nil, e)
	}
	if !schema.ValidFingerprint(req.Fingerprint) {
		return answer[Receipts](nil, bad("fingerprint must be sha256:<64 lowercase hex>"))
	}
	rec, found, err := s.Journal.Load(req.Fingerprint)
	if err != nil {
		return answer[Receipts](nil, s.internal("reading the journal", err))
	}
	if !found || rec.Receipt == nil {
		return answer[Receipts](nil, &Error{Code: CodeNotFound, Message: "no receipt for " + req.Fingerprint})
	}
	rs, err := s.Journal.Receipts(req.Fingerprint)
	if err != nil {
		return answer[Receipts](nil, s.internal("reading receipts", err))
	}
	return answer(&Receipts{
		Fingerprint: rec.Fingerprint, Referent: rec.Referent, Proposals: slices.Clone(rec.Proposals),
		OutcomeKind: rec.Latest.Kind, Terminal: rec.Latest.Terminal, Resolution: rec.Resolution, Receipts: rs,
	}, nil)
}

func (s *Server) list(hdr nats.Header, data []byte) []byte {
	var req ListRequest
	if _, e := s.admit(subjects.AdminReconcileList, hdr, data, &req); e != nil {
		return answer[List](nil, e)
	}
	actions, err := s.Reconciliation.Indeterminate()
	if err != nil {
		return answer[List](nil, s.internal("reading the indeterminate index", err))
	}
	return answer(&List{NowMs: stages.NowMs(s.Clock), Actions: actions}, nil)
}

func (s *Server) resolve(hdr nats.Header, data []byte) []byte {
	var req ResolveRequest
	operator, e := s.admit(subjects.AdminReconcileSolve, hdr, data, &req)
	if e != nil {
		return answer[Resolved](nil, e)
	}
	if req.Effect != EffectPresent && req.Effect != EffectAbsent {
		return answer[Resolved](nil, bad(`effect must be "present" or "absent"`))
	}
	res, err := s.Reconciliation.Resolve(req.Fingerprint, req.Effect == EffectPresent, req.EvidenceRef, operator)
	switch {
	case errors.Is(err, reconciliation.ErrInvalidFingerprint), errors.Is(err, reconciliation.ErrInvalidEvidence):
		return answer[Resolved](nil, bad(err.Error()))
	case errors.Is(err, reconciliation.ErrNotFound):
		return answer[Resolved](nil, &Error{Code: CodeNotFound, Message: "no receipt for " + req.Fingerprint})
	case errors.Is(err, reconciliation.ErrNotIndeterminate):
		return answer[Resolved](nil, &Error{Code: CodeNotIndeterminate, Message: err.Error()})
	case err != nil:
		return answer[Resolved](nil, s.internal("recording the resolution", err))
	}
	return answer(&Resolved{Fingerprint: req.Fingerprint, OutcomeKind: res.OutcomeKind, Receipt: res.Receipt, Proposals: res.Proposals}, nil)
}
