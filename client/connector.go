package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"time"

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
// Dispatch is called only for a request that arrived by req.NotAfterMs
// (the end of the processor's lease, SPEC §4), and ctx ends at that
// moment: do not begin the action once ctx is done, because from then on
// another processor may conclude that the dispatch was interrupted and
// reconciliation may ask Reconcile what became of it. An action begun in
// time should be known to Reconcile by the time the processor asks, which
// is never before NotAfterMs plus the processor's approval.clock_skew.
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
	// CodeNotAfterPassed: the dispatch request came after its not_after_ms
	// (by the Connector's clock); the handler was not called
	// (schema.LateReply). The processor recognizes this code: it may send
	// the intent again with a new lease, and reconciliation finds the late
	// request's action absent, as it is.
	CodeNotAfterPassed = schema.ErrorCodeNotAfterPassed
	// CodeDispatchInProgress: a reconcile came while this Connector's
	// handler was still dispatching the same idempotency key; the handler
	// was not asked, since its answer could not yet be the truth.
	CodeDispatchInProgress = "connector.dispatch_in_progress"
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
	// Clock is the clock a request's not_after_ms is read against; nil
	// means time.Now. Keep the host's clock synchronized (NTP): see
	// Connector on clock skew.
	Clock func() time.Time
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
//	handler result                      dispatch reply                               reconcile reply
//	a valid reply                       the reply                                    the reply
//	an error                            indeterminate, CodeHandlerError              indeterminate, CodeHandlerError
//	a panic                             indeterminate, CodeHandlerPanic              indeterminate, CodeHandlerPanic
//	a reply that fails Valid            indeterminate, CodeInvalidReply              indeterminate, CodeInvalidReply
//	(undecodable request, not called)   rejected, CodeMalformedRequest               indeterminate, CodeMalformedRequest
//	(after not_after_ms, not called)    failed_before_dispatch, CodeNotAfterPassed   –
//	(key being dispatched, not called)  –                                            indeterminate, CodeDispatchInProgress
//
// A failed dispatch handler may have acted before it failed, so its error
// is never a rejection or a failure: indeterminate makes the processor
// reconcile (RECONCILIATION_REQUIRED, then Reconcile), never re-dispatch.
// A handler that knows nothing happened says so with a reply
// (failed_before_dispatch or rejected), not an error. A request the
// Connector could not read (also one without not_after_ms) reached no
// handler, so it is rejected: no effect.
//
// # Late requests and clock skew
//
// A dispatch request carries not_after_ms, the end of the processor's
// lease on it (SPEC §4). The Connector compares it with its clock when the
// handler would be called (after any wait for a free MaxConcurrent slot):
// a request that came later is answered failed_before_dispatch with
// CodeNotAfterPassed and never reaches the handler, so a processor that
// stalled past its lease (a long pause, a frozen VM, a partition) cannot
// make the provider act after another processor concluded the dispatch was
// interrupted; Reconcile later truthfully finds the action absent. The
// handler's context ends at not_after_ms too.
//
// This relies on clocks: keep the connector's host and the processors'
// within the processors' approval.clock_skew (default 30s) of each other,
// with NTP. Reconciliation believes an answer that an action is absent
// only once not_after_ms plus that skew has passed by its own clock. A
// connector clock behind by more than the skew could act on a request
// after reconciliation concluded it absent; one ahead by more than the
// lease (the provider's timeout + 5s) refuses every request (the processor
// tries again for provider.unavailable_retry, then ends the proposal
// FAILED_BEFORE_DISPATCH with error code NOT_AFTER_PASSED: nothing was
// done).
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
	now := cfg.Clock
	if now == nil {
		now = time.Now
	}
	running := &keys{n: map[string]int{}}
	for _, p := range cfg.Providers {
		d := dispatcher{provider: p, h: h, log: srv.log, now: now, running: running}
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
	now      func() time.Time
	running  *keys // idempotency keys whose dispatch handler runs
}

// keys counts the idempotency keys whose dispatch handler is running.
type keys struct {
	mu sync.Mutex
	n  map[string]int
}

func (k *keys) add(key string, d int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.n[key] += d; k.n[key] <= 0 {
		delete(k.n, key)
	}
}

func (k *keys) has(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.n[key] > 0
}

func (d dispatcher) dispatch(ctx context.Context, m *nats.Msg) {
	defer clear(m.Data) // the request may carry protected values
	var req schema.DispatchRequest
	if err := schema.Decode(m.Data, &req); err != nil || req.Schema != schema.SchemaDispatch ||
		req.Provider != d.provider || !keyMatches(req.Fingerprint, req.IdempotencyKey) || req.NotAfterMs <= 0 {
		d.answer(m, "dispatch", schema.AdapterReply{Outcome: schema.ReplyRejected, ErrorCode: CodeMalformedRequest}, CodeMalformedRequest)
		wipe(req.ProtectedDisclosure)
		return
	}
	reply, code := d.handle(ctx, req)
	wipe(req.ProtectedDisclosure)
	d.answer(m, "dispatch", reply, code)
}

// handle calls the handler for req unless it came after its not_after_ms,
// with the key marked running until the handler returned. The key is
// marked before the clock is read: a reconcile that finds it not running
// finds the request refused, or its handler done.
func (d dispatcher) handle(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, string) {
	d.running.add(req.IdempotencyKey, 1)
	defer d.running.add(req.IdempotencyKey, -1)
	if schema.Late(req.NotAfterMs, d.now().UnixMilli()) {
		return schema.LateReply(), CodeNotAfterPassed
	}
	ctx, cancel := context.WithDeadline(ctx, time.UnixMilli(req.NotAfterMs+1))
	defer cancel()
	reply, err := call(func() (schema.AdapterReply, error) { return d.h.Dispatch(ctx, req) })
	return checked(reply, err, false)
}

func (d dispatcher) reconcile(ctx context.Context, m *nats.Msg) {
	var req schema.ReconcileRequest
	if err := schema.Decode(m.Data, &req); err != nil || req.Schema != schema.SchemaReconcile ||
		!keyMatches(req.Fingerprint, req.IdempotencyKey) || req.AttemptID == "" {
		d.answer(m, "reconcile", schema.AdapterReply{Outcome: schema.ReplyIndeterminate, ErrorCode: CodeMalformedRequest}, CodeMalformedRequest)
		return
	}
	if d.running.has(req.IdempotencyKey) {
		d.answer(m, "reconcile", schema.AdapterReply{Outcome: schema.ReplyIndeterminate, ErrorCode: CodeDispatchInProgress}, CodeDispatchInProgress)
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
