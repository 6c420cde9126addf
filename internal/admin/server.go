package admin

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/reconciliation"
	"github.com/portcullis/portcullis/subjects"
)

// MaxRequestBytes bounds a request body.
const MaxRequestBytes = 4096

// Server answers operator requests from the processor's own state.
type Server struct {
	Store          *kv.Store
	Reconciliation *reconciliation.Stage
	Subjects       subjects.Subjects
	Clock          stages.Clock
	Log            *slog.Logger
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
	handle := func(fn func(data []byte) []byte) nats.MsgHandler {
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
			_ = m.Respond(fn(m.Data))
		}
	}
	routes := []struct {
		verb string
		fn   func([]byte) []byte
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

func (s *Server) internal(what string, err error) *Error {
	s.log().Error("admin request failed", "what", what, "err", err)
	return &Error{Code: CodeInternal, Message: what + " failed; see the processor's log"}
}

// decode strictly decodes a request body.
func decode(data []byte, v any) *Error {
	if len(data) > MaxRequestBytes {
		return bad("request too large")
	}
	if len(data) == 0 {
		data = []byte("{}")
	}
	if err := schema.Decode(data, v); err != nil {
		return bad("request does not decode")
	}
	return nil
}

func (s *Server) receipts(data []byte) []byte {
	var req ReceiptsRequest
	if e := decode(data, &req); e != nil {
		return answer[Receipts](nil, e)
	}
	if !schema.ValidFingerprint(req.Fingerprint) {
		return answer[Receipts](nil, bad("fingerprint must be sha256:<64 lowercase hex>"))
	}
	rec, found, err := s.Store.Intent(req.Fingerprint)
	if err != nil {
		return answer[Receipts](nil, s.internal("reading the journal", err))
	}
	if !found || rec.Receipt == nil {
		return answer[Receipts](nil, &Error{Code: CodeNotFound, Message: "no receipt for " + req.Fingerprint})
	}
	rs, err := s.Store.Receipts(req.Fingerprint)
	if err != nil {
		return answer[Receipts](nil, s.internal("reading receipts", err))
	}
	return answer(&Receipts{
		Fingerprint: rec.Fingerprint, Referent: rec.Referent, Proposals: slices.Clone(rec.Proposals),
		OutcomeKind: rec.OutcomeKind, Terminal: rec.OutcomeTerminal, Resolution: rec.Resolution, Receipts: rs,
	}, nil)
}

func (s *Server) list(data []byte) []byte {
	var req ListRequest
	if e := decode(data, &req); e != nil {
		return answer[List](nil, e)
	}
	actions, err := s.Reconciliation.Indeterminate()
	if err != nil {
		return answer[List](nil, s.internal("reading the indeterminate index", err))
	}
	return answer(&List{NowMs: stages.NowMs(s.Clock), Actions: actions}, nil)
}

func (s *Server) resolve(data []byte) []byte {
	var req ResolveRequest
	if e := decode(data, &req); e != nil {
		return answer[Resolved](nil, e)
	}
	if req.Effect != EffectPresent && req.Effect != EffectAbsent {
		return answer[Resolved](nil, bad(`effect must be "present" or "absent"`))
	}
	res, err := s.Reconciliation.Resolve(req.Fingerprint, req.Effect == EffectPresent, req.EvidenceRef, "")
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
