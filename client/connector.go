package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// ProviderHandler carries out actions for a provider connector (SPEC §4).
// Its methods are called concurrently.
//
// Dispatch performs the action at most once per req.IdempotencyKey: the
// processor never sends a fingerprint twice, but a connector restarted
// mid-call, or a reply lost on the way back, must not act twice; pass the
// key to the system of record. Reply confirmed (the effect exists),
// acknowledged (accepted, to be verified), rejected (declined, no effect),
// failed_before_dispatch (provably not sent on) or indeterminate (unknown).
// req.ProtectedDisclosure.Values, when present, are protected values: use
// them in memory only, never log or store them, and do not keep them past
// the call (the Connector zeroes them when Dispatch returns).
//
// Reconcile is read-only: it says what became of an earlier dispatch of
// req.IdempotencyKey: confirmed, rejected (absent), failed_before_dispatch
// or indeterminate (still unknown); never acknowledged.
//
// An error, a panic or a reply outside the contract is answered
// indeterminate (see Connector): only a reply states that nothing happened.
type ProviderHandler interface {
	Dispatch(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error)
	Reconcile(ctx context.Context, req schema.ReconcileRequest) (schema.AdapterReply, error)
}

// Error codes a Connector puts into the replies it makes on a handler's
// behalf. They end up in the receipt's error_code.
const (
	// CodeMalformedRequest: the request did not decode strictly as a
	// dispatch or reconcile request of this provider; the handler was not
	// called.
	CodeMalformedRequest = "connector.malformed_request"
	// CodeHandlerError: the handler returned an error.
	CodeHandlerError = "connector.handler_error"
	// CodeHandlerPanic: the handler panicked.
	CodeHandlerPanic = "connector.handler_panic"
	// CodeInvalidReply: the handler's reply failed schema.AdapterReply.Valid
	// (an unknown outcome, acknowledged to a reconcile, an evidence ref
	// without ':', …).
	CodeInvalidReply = "connector.invalid_reply"
)

// ConnectorConfig configures a Connector.
type ConnectorConfig struct {
	// Providers served: the providers of this connector's `connector`
	// block (its login may serve no others). At least one.
	Providers []string
	// Prefix is the processor's subject prefix; empty means "actions".
	Prefix string
	// Queue is the NATS queue group; empty means DefaultQueue. Run several
	// processes of one connector (same key, same queue) to share the load.
	Queue string
	// MaxConcurrent bounds handler calls running at once, dispatch and
	// reconcile together; zero means DefaultMaxConcurrent.
	MaxConcurrent int
	// Logger receives one value-free line per request the Connector
	// answered on the handler's behalf: provider, method and code, never a
	// payload, a value or the handler's error text (log your own errors
	// in the handler, without protected values). Nil discards.
	Logger *slog.Logger
}

// Connector serves `<prefix>.provider.<p>.dispatch` and `.reconcile` for
// its providers with a ProviderHandler.
//
// Requests are decoded strictly (schema.Decode: no unknown or duplicate
// members); the provider, schema, fingerprint and idempotency key must
// agree with the subject and each other. Every reply is exactly the reply
// schema, checked with schema.AdapterReply.Valid before it is sent, since
// the processor treats any other reply as MALFORMED_ADAPTER_RESULT. What a
// Connector answers:
//
//	handler result                      dispatch reply                    reconcile reply
//	a valid reply                       the reply                         the reply
//	an error                            indeterminate, CodeHandlerError   indeterminate, CodeHandlerError
//	a panic                             indeterminate, CodeHandlerPanic   indeterminate, CodeHandlerPanic
//	a reply that fails Valid            indeterminate, CodeInvalidReply   indeterminate, CodeInvalidReply
//	(undecodable request, not called)   rejected, CodeMalformedRequest    indeterminate, CodeMalformedRequest
//
// A failed dispatch handler may have acted before it failed, so its error
// is never a rejection or a failure: indeterminate makes the processor
// reconcile (RECONCILIATION_REQUIRED, then Reconcile), never re-dispatch.
// A handler that knows nothing happened says so with a reply
// (failed_before_dispatch or rejected), not an error. A request the
// Connector could not read reached no handler, so it is rejected: no
// effect.
type Connector struct {
	srv *server
}

var providerPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// ServeConnector subscribes to every provider's dispatch and reconcile
// subjects and serves them with h until Drain or Stop. nc is the
// connector's own connection (Connect with its key).
func ServeConnector(nc *nats.Conn, cfg ConnectorConfig, h ProviderHandler) (*Connector, error) {
	if h == nil {
		return nil, errors.New("client: ServeConnector: no handler")
	}
	if len(cfg.Providers) == 0 {
		return nil, errors.New("client: ServeConnector: no providers")
	}
	subj, err := subjects.New(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("client: ServeConnector: %w", err)
	}
	for _, p := range cfg.Providers {
		if !providerPattern.MatchString(p) {
			return nil, fmt.Errorf("client: ServeConnector: invalid provider name %q", p)
		}
	}
	srv, err := newServer(nc, cfg.MaxConcurrent, cfg.Logger)
	if err != nil {
		return nil, err
	}
	c := &Connector{srv: srv}
	for _, p := range cfg.Providers {
		d := dispatcher{provider: p, h: h, log: srv.log}
		if err := srv.subscribe(subj.ProviderDispatch(p), cfg.Queue, d.dispatch); err == nil {
			err = srv.subscribe(subj.ProviderReconcile(p), cfg.Queue, d.reconcile)
		}
		if err != nil {
			srv.halt()
			return nil, err
		}
	}
	if err := srv.ready(); err != nil {
		srv.halt()
		return nil, err
	}
	return c, nil
}

// Drain stops taking requests, lets every request already received be
// handled and answered, and returns when that is done. If ctx ends first,
// it stops as Stop does and returns ctx's error.
func (c *Connector) Drain(ctx context.Context) error { return c.srv.drain(ctx) }

// Stop stops at once: requests not yet handed to the handler get no reply
// (the processor's request times out: indeterminate, reconciled later),
// running handlers' contexts are cancelled, and Stop waits for them to
// return (their replies are still sent).
func (c *Connector) Stop() { c.srv.halt() }

type dispatcher struct {
	provider string
	h        ProviderHandler
	log      *slog.Logger
}

func (d dispatcher) dispatch(ctx context.Context, m *nats.Msg) {
	defer clear(m.Data) // the request may carry protected values
	var req schema.DispatchRequest
	if err := schema.Decode(m.Data, &req); err != nil || req.Schema != schema.SchemaDispatch ||
		req.Provider != d.provider || !keyMatches(req.Fingerprint, req.IdempotencyKey) {
		d.answer(m, "dispatch", schema.AdapterReply{Outcome: schema.ReplyRejected, ErrorCode: CodeMalformedRequest}, CodeMalformedRequest)
		wipe(req.ProtectedDisclosure)
		return
	}
	reply, err := call(func() (schema.AdapterReply, error) { return d.h.Dispatch(ctx, req) })
	wipe(req.ProtectedDisclosure)
	reply, code := checked(reply, err, false)
	d.answer(m, "dispatch", reply, code)
}

func (d dispatcher) reconcile(ctx context.Context, m *nats.Msg) {
	var req schema.ReconcileRequest
	if err := schema.Decode(m.Data, &req); err != nil || req.Schema != schema.SchemaReconcile ||
		!keyMatches(req.Fingerprint, req.IdempotencyKey) || req.AttemptID == "" {
		d.answer(m, "reconcile", schema.AdapterReply{Outcome: schema.ReplyIndeterminate, ErrorCode: CodeMalformedRequest}, CodeMalformedRequest)
		return
	}
	reply, err := call(func() (schema.AdapterReply, error) { return d.h.Reconcile(ctx, req) })
	reply, code := checked(reply, err, true)
	d.answer(m, "reconcile", reply, code)
}

// checked maps a handler's result to the reply to send, and the code of a
// reply made on the handler's behalf ("" for the handler's own).
func checked(reply schema.AdapterReply, err error, forReconcile bool) (schema.AdapterReply, string) {
	code := ""
	switch {
	case errors.Is(err, errPanic):
		code = CodeHandlerPanic
	case err != nil:
		code = CodeHandlerError
	case !reply.Valid(forReconcile):
		code = CodeInvalidReply
	default:
		return reply, ""
	}
	return schema.AdapterReply{Outcome: schema.ReplyIndeterminate, ErrorCode: code}, code
}

func (d dispatcher) answer(m *nats.Msg, method string, reply schema.AdapterReply, code string) {
	if code != "" {
		d.log.Warn("client: connector answered on the handler's behalf",
			"provider", d.provider, "method", method, "outcome", reply.Outcome, "error_code", code)
	}
	respond(d.log, m, schema.MustMarshal(reply))
}

// respond sends one reply, logging (value-free) when it cannot.
func respond(log *slog.Logger, m *nats.Msg, body []byte) {
	if m.Reply == "" {
		log.Warn("client: a request without a reply subject", "subject", m.Subject)
		return
	}
	if err := m.Respond(body); err != nil {
		log.Warn("client: reply not sent", "subject", m.Subject, "error", err)
	}
}

// keyMatches checks the idempotency key (64 lowercase hex digits) against
// its fingerprint.
func keyMatches(fp, key string) bool {
	return schema.ValidFingerprint(fp) && fp == schema.FingerprintOfKey(key)
}

// wipe zeroes protected values and empties their map.
func wipe(d *schema.DispatchDisclosure) {
	if d == nil {
		return
	}
	for class, v := range d.Values {
		clear(v)
		delete(d.Values, class)
	}
}
