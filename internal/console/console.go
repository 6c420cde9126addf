// Package console is `processor console`: the operator's web console. A
// process logged in to NATS as an operator serves it; it reads and acts
// only through what SPEC §2.8 gives an operator — the signed operator API
// on `<prefix>.admin.>` (internal/admin), outcomes and incident events
// received live, direct gets and stream info on the outcome and incident
// streams and the activity bucket — and never creates a consumer.
//
// Pages: the overview (stage throughput and consumer lag, every
// processor's readiness, the indeterminate and pending-approval counts,
// recent incident events), the indeterminate queue with a resolve form
// (the request signed with the operator's key, so the resolution names the
// operator as `processor reconcile resolve` does), pending approvals, an
// intent's timeline, and outcome and incident search. Everything shown is
// value-free: no payload or protected value reaches an operator.
//
// Templates and assets are embedded; the pages work without JavaScript,
// and a small same-origin script refreshes the live parts on server-sent
// events. Safety (security.go): a login token on every address (loopback
// too; only Open, for --dev on loopback, serves without one); loopback by
// default with a Host check against DNS rebinding; another address only
// with TLS; failed logins limited per client; a CSRF token on every form;
// a strict Content-Security-Policy; every login and resolution logged
// with its session.
//
// It owns the console's pages, sessions and live events. Operator code
// imports no stage (internal/rules): every read and settlement goes through
// the operator API (internal/admin).
package console

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/subjects"
)

// DefaultListen is where the console listens unless told otherwise.
const DefaultListen = "127.0.0.1:9465"

// Config configures a console.
type Config struct {
	// Admin asks the processor; its Key signs every request (nil:
	// unsigned, answered only by a processor that accepts unsigned input,
	// `processor run --dev`). Its NC is also the connection the console
	// reads streams and receives live messages on.
	Admin *admin.Client
	// Token is the login every browser must give first (a secret from a
	// file, at least MinTokenLen characters). Required unless Open.
	Token string
	// Open serves without a login when Token is empty: `processor console
	// --dev`, beside a `run --dev` processor that answers unsigned
	// operator requests from any local program anyway. Serve refuses it
	// on a listener that is not loopback.
	Open bool
	// TLS serves HTTPS (Serve wraps the listener); nil: plain HTTP, which
	// only a loopback address may use.
	TLS *tls.Config
	// Log receives the console's own log; nil: slog.Default().
	Log *slog.Logger
	// Now is the console's clock (ages, search windows); nil: time.Now.
	Now func() time.Time
}

// Console is a running console: its live subscriptions and, once Serve
// runs, its HTTP server.
type Console struct {
	cfg   Config
	subj  subjects.Subjects
	nc    *nats.Conn
	js    jetstream.JetStream
	log   *slog.Logger
	live  *hub
	guard *guard
	pages *pages
	stats *sampler

	// who is the operator the console acts as (operatorName).
	who struct {
		sync.Mutex
		name  string
		asked time.Time
	}

	mu  sync.Mutex
	srv *http.Server
}

// New starts a console's live subscriptions. Serve serves it; Close ends
// both.
func New(cfg Config) (*Console, error) {
	if cfg.Admin == nil || cfg.Admin.NC == nil {
		return nil, errors.New("console: no operator connection")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	js, err := jetstream.New(cfg.Admin.NC)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	if (!cfg.Open || cfg.Token != "") && len(cfg.Token) < MinTokenLen {
		return nil, fmt.Errorf("console: a login token of at least %d characters is required on every address (Open serves without one: --dev, loopback only)", MinTokenLen)
	}
	c := &Console{cfg: cfg, subj: cfg.Admin.Subjects, nc: cfg.Admin.NC, js: js, log: cfg.Log}
	g, err := newGuard(cfg.Token, cfg.TLS != nil, cfg.Now, cfg.Log)
	if err != nil {
		return nil, err
	}
	c.guard = g
	// Samples are spaced in real time, whatever clock the pages show.
	c.stats = &sampler{client: cfg.Admin, now: time.Now}
	if c.live, err = startHub(c.nc, c.subj, c.log); err != nil {
		return nil, err
	}
	c.live.preload(c.recentIncidents)
	if c.pages, err = newPages(c); err != nil {
		c.live.close()
		return nil, err
	}
	return c, nil
}

// Handler is the console's HTTP handler, every page behind the guard. A
// handler used without Serve checks no Host header (Serve sets the
// addresses a loopback listener answers to).
func (c *Console) Handler() http.Handler { return c.guard.wrap(c.pages.mux()) }

// Serve serves the console on ln until Close (TLS when configured). On a
// loopback listener it answers only requests whose Host is the listener's
// own address (or localhost with its port): a page that DNS-rebinds a
// name to 127.0.0.1 reaches nothing.
func (c *Console) Serve(ln net.Listener) error {
	if tcp, ok := ln.Addr().(*net.TCPAddr); c.guard.token == nil && (!ok || !tcp.IP.IsLoopback()) {
		return fmt.Errorf("console: serving without a login (Open) on %s, which is not a loopback address", ln.Addr())
	}
	c.guard.allowHostsOf(ln.Addr())
	if c.cfg.TLS != nil {
		ln = tls.NewListener(ln, c.cfg.TLS)
	}
	srv := &http.Server{
		Handler:           c.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(c.log.Handler(), slog.LevelWarn),
	}
	c.mu.Lock()
	if c.srv != nil {
		c.mu.Unlock()
		return errors.New("console: already serving")
	}
	c.srv = srv
	c.mu.Unlock()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close ends the live streams (server-sent events return), then the HTTP
// server, then the subscriptions. The operator's connection is the
// caller's.
func (c *Console) Close() error {
	c.live.close()
	c.mu.Lock()
	srv := c.srv
	c.mu.Unlock()
	var err error
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err = srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
	}
	return err
}
