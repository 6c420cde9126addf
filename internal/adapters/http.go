package adapters

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/portcullis/portcullis/schema"
)

// StatusError is the unknown-outcome error of an HTTP answer that carries no
// valid reply: 1xx/3xx/5xx, or 4xx without a valid reply body.
type StatusError struct {
	Code int
}

func (e *StatusError) Error() string { return fmt.Sprintf("http status %d", e.Code) }

// HTTP POSTs the request bodies of SPEC §4 to `<base_url>/dispatch` and
// `<base_url>/reconcile`, with `Idempotency-Key: <64 hex>`, and a
// dispatch's not_after_ms also as `Actions-Not-After: <unix ms>`: a server
// must not act on a dispatch it receives after that moment (SPEC §4) and
// answers it with schema.LateReply's body (a 4xx with that body is a reply).
//
// Mapping of what happens to the error classes of the package:
//
//   - no connection was ever obtained (refused, DNS failure, dial or TLS
//     handshake failure or timeout, a proxy that refused): ErrNotInvoked. The
//     request is written only on an obtained connection, so no byte of it
//     can have reached the server.
//   - any failure after a connection was obtained: the deadline →
//     ErrTimeout, anything else → unknown.
//   - 2xx: the body must be a valid reply, else ErrMalformedReply.
//   - 4xx: a body that is a valid reply is the reply (a connector may answer
//     409 or 422 with "rejected"); otherwise *StatusError (unknown).
//   - 1xx, 3xx (redirects are never followed), 5xx: *StatusError (unknown);
//     the body is not read.
//
// Each request uses a fresh connection (keep-alives off) and its body
// cannot be replayed (GetBody is nil): Go's transport would otherwise retry
// a POST that carries an Idempotency-Key after a reused connection failed,
// possibly after the server had read it.
type HTTP struct {
	name    string
	base    string
	timeout time.Duration
	client  *http.Client
}

// NewHTTP returns the http adapter of provider name. baseURL must be an
// absolute http or https URL; a timeout ≤ 0 means
// DefaultTimeout.
func NewHTTP(name, baseURL string, timeout time.Duration) (*HTTP, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("adapters: provider %q: base_url must be an http:// or https:// URL without query", name)
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true) // one request per connection, simple to reason about
	transport := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: timeout}).DialContext,
		TLSHandshakeTimeout: timeout,
		DisableKeepAlives:   true,
		DisableCompression:  true,
		Protocols:           protocols,
	}
	return &HTTP{
		name:    name,
		base:    strings.TrimRight(baseURL, "/"),
		timeout: timeout,
		client: &http.Client{
			Transport: transport,
			// A redirect is an answer, not an instruction: following it
			// could deliver the action to a second server.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// Kind implements Adapter.
func (a *HTTP) Kind() string { return KindHTTP }

// Dispatch implements Adapter.
func (a *HTTP) Dispatch(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
	body, err := encodeDispatch(a.name, &req)
	if err != nil {
		return schema.AdapterReply{}, err
	}
	return a.post(ctx, MethodDispatch, req.IdempotencyKey, body, strconv.FormatInt(req.NotAfterMs, 10))
}

// Reconcile implements Adapter.
func (a *HTTP) Reconcile(ctx context.Context, req schema.ReconcileRequest) (schema.AdapterReply, error) {
	body, err := encodeReconcile(a.name, &req)
	if err != nil {
		return schema.AdapterReply{}, err
	}
	return a.post(ctx, MethodReconcile, req.IdempotencyKey, body, "")
}

// post sends body; notAfter, when set, goes into the Actions-Not-After
// header (a dispatch's not_after_ms, for servers that read headers before
// bodies).
func (a *HTTP) post(ctx context.Context, method, key string, body []byte, notAfter string) (schema.AdapterReply, error) {
	if err := ctx.Err(); err != nil {
		return schema.AdapterReply{}, notSent(a.name, method, err)
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	var connected atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { connected.Store(true) },
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+"/"+method, bytes.NewReader(body))
	if err != nil {
		return schema.AdapterReply{}, invalid(a.name, method, "request")
	}
	req.GetBody = nil // never replayed by the transport; see HTTP
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if notAfter != "" {
		req.Header.Set(schema.HeaderNotAfter, notAfter)
	}

	resp, err := a.client.Do(req)
	if err != nil {
		if !connected.Load() {
			return schema.AdapterReply{}, fmt.Errorf("adapters: %s %s: %w: no connection: %w", a.name, method, ErrNotInvoked, cause(err))
		}
		return schema.AdapterReply{}, a.afterSend(method, err)
	}
	defer resp.Body.Close()

	code := resp.StatusCode
	if code < 200 || (code >= 300 && code < 400) || code >= 500 {
		return schema.AdapterReply{}, fmt.Errorf("adapters: %s %s: outcome unknown: %w", a.name, method, &StatusError{Code: code})
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxReplyBytes+1))
	if err != nil {
		return schema.AdapterReply{}, a.afterSend(method, err)
	}
	reply, err := DecodeReply(data, method == MethodReconcile)
	if err != nil {
		if code >= 400 {
			return schema.AdapterReply{}, fmt.Errorf("adapters: %s %s: outcome unknown: %w", a.name, method, &StatusError{Code: code})
		}
		return schema.AdapterReply{}, fmt.Errorf("adapters: %s %s: %w", a.name, method, err)
	}
	return reply, nil
}

// afterSend classifies a failure once a connection existed: the request may
// have been received.
func (a *HTTP) afterSend(method string, err error) error {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Errorf("adapters: %s %s: %w after %s", a.name, method, ErrTimeout, a.timeout)
	}
	return fmt.Errorf("adapters: %s %s: outcome unknown: %w", a.name, method, cause(err))
}

// cause drops the *url.Error wrapper, whose text repeats the URL (config,
// but it may carry user info), keeping the underlying error for errors.Is.
func cause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
