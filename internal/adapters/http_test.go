package adapters_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/schema"
)

// httpConnector is an httptest server counting the requests that reached
// its handler.
type httpConnector struct {
	*httptest.Server
	hits atomic.Int64
}

func newConnector(t *testing.T, h http.HandlerFunc) *httpConnector {
	t.Helper()
	c := &httpConnector{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(c.Close)
	return c
}

func newHTTP(t *testing.T, base string, timeout time.Duration) *adapters.HTTP {
	t.Helper()
	a, err := adapters.NewHTTP("inventory", base, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func reply(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func TestHTTPDispatchRoundTrip(t *testing.T) {
	req := dispatchReq("inventory", "http-rt")
	var problems []string
	c := newConnector(t, func(w http.ResponseWriter, r *http.Request) {
		check := func(ok bool, what string) {
			if !ok {
				problems = append(problems, what)
			}
		}
		check(r.Method == http.MethodPost, "method "+r.Method)
		check(r.URL.Path == "/api/v1/dispatch", "path "+r.URL.Path)
		check(r.Header.Get("Idempotency-Key") == req.IdempotencyKey, "idempotency key")
		check(r.Header.Get("Actions-Not-After") == strconv.FormatInt(req.NotAfterMs, 10), "Actions-Not-After "+r.Header.Get("Actions-Not-After"))
		check(r.Header.Get("Content-Type") == "application/json", "content type")
		body, _ := io.ReadAll(r.Body)
		var got schema.DispatchRequest
		check(schema.Decode(body, &got) == nil, "body does not strictly decode")
		check(string(schema.MustMarshal(got)) == string(schema.MustMarshal(req)), "body differs")
		reply(w, http.StatusOK, `{"outcome":"confirmed","provider_action_id":"ord_9","evidence_refs":["inv:ord_9"]}`)
	})
	a := newHTTP(t, c.URL+"/api/v1/", 5*time.Second)
	r, err := a.Dispatch(t.Context(), req)
	if err != nil || r.Outcome != schema.ReplyConfirmed || r.ProviderActionID != "ord_9" {
		t.Fatalf("reply %+v, %v", r, err)
	}
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	if a.Kind() != "http" {
		t.Fatal(a.Kind())
	}
}

func TestHTTPReconcile(t *testing.T) {
	var answer atomic.Value
	answer.Store(`{"outcome":"rejected","error_code":"NOT_FOUND"}`)
	c := newConnector(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/reconcile" {
			reply(w, http.StatusNotFound, "")
			return
		}
		var got schema.ReconcileRequest
		body, _ := io.ReadAll(r.Body)
		if schema.Decode(body, &got) != nil || got.AttemptID != "att-2" {
			reply(w, http.StatusBadRequest, "")
			return
		}
		reply(w, http.StatusOK, answer.Load().(string))
	})
	a := newHTTP(t, c.URL, 5*time.Second)
	r, err := a.Reconcile(t.Context(), reconcileReq("http-rec", "att-2"))
	if err != nil || r.Outcome != schema.ReplyRejected || r.ErrorCode != "NOT_FOUND" {
		t.Fatalf("reply %+v, %v", r, err)
	}
	answer.Store(`{"outcome":"acknowledged"}`)
	if _, err := a.Reconcile(t.Context(), reconcileReq("http-rec", "att-2")); class(err) != "malformed" {
		t.Fatalf("acknowledged reconcile: %s (%v)", class(err), err)
	}
}

// TestHTTPRefused: nothing listens on the port, so no connection and no
// byte of the request reached anyone.
func TestHTTPRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	a := newHTTP(t, "http://"+addr, 5*time.Second)
	_, err = a.Dispatch(t.Context(), dispatchReq("inventory", "refused"))
	if class(err) != "not_invoked" {
		t.Fatalf("got %s (%v), want not_invoked", class(err), err)
	}
	if _, err := a.Reconcile(t.Context(), reconcileReq("refused", "a")); class(err) != "not_invoked" {
		t.Fatalf("reconcile: %s (%v)", class(err), err)
	}
}

// TestHTTPNoSuchHost: a name that cannot resolve (RFC 2606 .invalid).
func TestHTTPNoSuchHost(t *testing.T) {
	a := newHTTP(t, "http://connector.invalid", 5*time.Second)
	if _, err := a.Dispatch(t.Context(), dispatchReq("inventory", "dns")); class(err) != "not_invoked" {
		t.Fatalf("got %s (%v), want not_invoked", class(err), err)
	}
}

// TestHTTPTLSHandshakeFails: the handshake precedes the request, so a
// failed one means no byte of the request was sent.
func TestHTTPTLSHandshakeFails(t *testing.T) {
	plain := newConnector(t, func(w http.ResponseWriter, r *http.Request) { reply(w, 200, `{"outcome":"confirmed"}`) })
	untrusted := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("handler reached through an untrusted certificate")
	}))
	untrusted.Config.ErrorLog = log.New(io.Discard, "", 0) // the expected handshake failure
	untrusted.StartTLS()
	t.Cleanup(untrusted.Close)
	for _, base := range []string{strings.Replace(plain.URL, "http://", "https://", 1), untrusted.URL} {
		a := newHTTP(t, base, 5*time.Second)
		if _, err := a.Dispatch(t.Context(), dispatchReq("inventory", "tls")); class(err) != "not_invoked" {
			t.Errorf("%s: got %s (%v), want not_invoked", base, class(err), err)
		}
	}
	if plain.hits.Load() != 0 {
		t.Fatal("the plain server's handler was reached")
	}
}

// TestHTTPContextDone: a context done before the call sends nothing.
func TestHTTPContextDone(t *testing.T) {
	c := newConnector(t, func(w http.ResponseWriter, r *http.Request) { reply(w, 200, `{"outcome":"confirmed"}`) })
	a := newHTTP(t, c.URL, 5*time.Second)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := a.Dispatch(ctx, dispatchReq("inventory", "done"))
	if class(err) != "not_invoked" || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %s (%v)", class(err), err)
	}
	if c.hits.Load() != 0 {
		t.Fatal("the connector was reached")
	}
}

func TestHTTPTimeout(t *testing.T) {
	release := make(chan struct{})
	c := newConnector(t, func(w http.ResponseWriter, r *http.Request) {
		select { // sleeps past the adapter's timeout
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	a := newHTTP(t, c.URL, 300*time.Millisecond)
	_, err := a.Dispatch(t.Context(), dispatchReq("inventory", "slow"))
	if class(err) != "timeout" {
		t.Fatalf("got %s (%v), want timeout", class(err), err)
	}
	if c.hits.Load() != 1 {
		t.Fatalf("hits %d", c.hits.Load())
	}
}

// TestHTTPSlowBody: headers arrive, the body does not: a timeout after the
// provider was invoked.
func TestHTTPSlowBody(t *testing.T) {
	release := make(chan struct{})
	c := newConnector(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"outcome":`)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	a := newHTTP(t, c.URL, 300*time.Millisecond)
	if _, err := a.Dispatch(t.Context(), dispatchReq("inventory", "slow-body")); class(err) != "timeout" {
		t.Fatalf("got %s (%v), want timeout", class(err), err)
	}
}

// TestHTTPConnectionDropped: the server read the request and hung up
// without answering. The provider may have acted: unknown, not "not
// invoked", and the transport must not have sent it again.
func TestHTTPConnectionDropped(t *testing.T) {
	c := newConnector(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	a := newHTTP(t, c.URL, 5*time.Second)
	for range 3 {
		_, err := a.Dispatch(t.Context(), dispatchReq("inventory", "dropped"))
		if class(err) != "unknown" {
			t.Fatalf("got %s (%v), want unknown", class(err), err)
		}
	}
	if n := c.hits.Load(); n != 3 {
		t.Fatalf("connector saw %d requests for 3 dispatches: the transport replayed", n)
	}
}

func TestHTTPStatuses(t *testing.T) {
	valid := `{"outcome":"rejected","error_code":"OUT_OF_STOCK"}`
	cases := []struct {
		status int
		body   string
		want   string
	}{
		{200, valid, "ok"},
		{201, valid, "ok"},
		{200, `{"outcome":"confirmed","note":"x"}`, "malformed"},
		{200, `<html>ok</html>`, "malformed"},
		{204, ``, "malformed"},
		{200, `{"outcome":"confirmed"}` + strings.Repeat(" ", adapters.MaxReplyBytes), "malformed"},
		{409, valid, "ok"},
		{422, valid, "ok"},
		{400, `{"error":"bad request"}`, "unknown"},
		{404, `not found`, "unknown"},
		{429, ``, "unknown"},
		{500, valid, "unknown"},
		{502, `bad gateway`, "unknown"},
		{503, `{"outcome":"failed_before_dispatch"}`, "unknown"},
	}
	for _, c := range cases {
		srv := newConnector(t, func(w http.ResponseWriter, r *http.Request) { reply(w, c.status, c.body) })
		a := newHTTP(t, srv.URL, 5*time.Second)
		r, err := a.Dispatch(t.Context(), dispatchReq("inventory", "status"))
		if got := class(err); got != c.want {
			t.Errorf("%d %.30q: got %s (%v), want %s", c.status, c.body, got, err, c.want)
			continue
		}
		if c.want == "unknown" {
			var se *adapters.StatusError
			if !errors.As(err, &se) || se.Code != c.status {
				t.Errorf("%d: error %v is not a StatusError with the code", c.status, err)
			}
		}
		if c.want == "ok" && r.Outcome != schema.ReplyRejected {
			t.Errorf("%d: reply %+v", c.status, r)
		}
	}
}

// TestHTTPRedirectNotFollowed: a redirect is an answer of unknown meaning;
// following it could deliver the action to a second server.
func TestHTTPRedirectNotFollowed(t *testing.T) {
	other := newConnector(t, func(w http.ResponseWriter, r *http.Request) { reply(w, 200, `{"outcome":"confirmed"}`) })
	for _, status := range []int{301, 302, 307, 308} {
		c := newConnector(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+"/dispatch", status)
		})
		a := newHTTP(t, c.URL, 5*time.Second)
		_, err := a.Dispatch(t.Context(), dispatchReq("inventory", "redirect"))
		var se *adapters.StatusError
		if class(err) != "unknown" || !errors.As(err, &se) || se.Code != status {
			t.Errorf("%d: got %s (%v)", status, class(err), err)
		}
	}
	if other.hits.Load() != 0 {
		t.Fatal("a redirect was followed")
	}
}

// A server that honours Actions-Not-After refuses a dispatch that reaches
// it late (here: its clock runs two hours ahead, past dispatchReq's
// not_after_ms an hour from now) with schema.LateReply's
// body; a 4xx with a valid reply body is a reply, so the processor learns
// that nothing was done.
func TestHTTPLateRefusal(t *testing.T) {
	c := newConnector(t, func(w http.ResponseWriter, r *http.Request) {
		notAfter, err := strconv.ParseInt(r.Header.Get(schema.HeaderNotAfter), 10, 64)
		if err != nil || schema.Late(notAfter, time.Now().Add(2*time.Hour).UnixMilli()) {
			reply(w, http.StatusConflict, string(schema.MustMarshal(schema.LateReply())))
			return
		}
		reply(w, http.StatusOK, `{"outcome":"confirmed"}`)
	})
	a := newHTTP(t, c.URL, 5*time.Second)
	r, err := a.Dispatch(t.Context(), dispatchReq("inventory", "http-late"))
	if err != nil || !r.IsLate() || r.Outcome != schema.ReplyFailedBeforeDispatch || r.ErrorCode != schema.ErrorCodeNotAfterPassed {
		t.Fatalf("reply %+v, %v", r, err)
	}
}
