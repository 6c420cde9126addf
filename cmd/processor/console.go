package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/console"
)

// consoleAbout is `processor console -h`'s text.
const consoleAbout = `Serves the operator's web console: an overview (stage throughput, consumer lag, every processor's
readiness, the indeterminate and pending-approval counts, recent incident events), the indeterminate queue
with a resolve form, pending approvals, an intent's timeline (by fingerprint, <host>/<proposal_id> or receipt
id) and outcome and incident search. It logs in to NATS as an operator and uses only what an operator may:
the signed operator API on <prefix>.admin.>, outcomes and incident events received live, direct gets and
stream info; it creates no consumer. Every request is signed with --nkey's key, so a resolution names that
operator as processor reconcile resolve does. At start it asks the processor once: a key that may not use the
operator API is one line naming whose key it is (--config FILE names the role), and exit 1.
--dev: no key (requests go unsigned; only a --dev processor answers them), and no login on loopback.
Every browser logs in first, on loopback too: the token is --token-file's (at least 32 characters, in a file
only its owner may read), else one made at start in a new file only you may read; the URL to open, token
included, is printed (as notebook servers do). Failed logins are limited per client (per browser on
loopback). It listens on loopback (` + console.DefaultListen + `) and answers only to that address. Another
address needs --tls-cert, --tls-key and --token-file. Every form carries a CSRF token; the
Content-Security-Policy allows only the console's own script and style. Each login and resolution is logged
with its session.
The URL is --url, else the --config file's, else $` + EnvNATSURL + `, else ` + DefaultAdminURL + `.`

// cmdConsole runs the console until SIGTERM or SIGINT.
func cmdConsole(c *cmdline, args []string, _ io.Reader) int {
	listen := c.fs.String("listen", console.DefaultListen, "`ADDR` to serve on (another than loopback needs --tls-cert, --tls-key and --token-file)")
	dev := c.fs.Bool("dev", false, "development: no operator key needed (requests go unsigned; only a --dev processor answers them) and no login; loopback only")
	certFile := c.fs.String("tls-cert", "", "serve HTTPS with this certificate `FILE` (PEM; with --tls-key)")
	keyFile := c.fs.String("tls-key", "", "the certificate's private key `FILE` (PEM)")
	tokenFile := c.fs.String("token-file", "", "the login token is this `FILE`'s content (at least 32 characters, readable by its owner only); default: a new token in a new file, printed at start")
	var level levelFlag
	level.register(c, "the least severe `LEVEL` the console logs (JSON on standard error): debug, info, warn or error")
	cn := &conn{}
	cn.registerConn(c.fs)
	if _, code, done := c.parse(args); done {
		return code
	}
	if err := cn.resolve(c.fs); err != nil {
		return c.fail(err)
	}
	opts, code, ok := consoleOptions(c, *listen, *dev, cn.nkey != "", *certFile, *keyFile, *tokenFile)
	if !ok {
		return code
	}
	generated := ""
	if opts.Token == "" && !opts.Open {
		path, tok, remove, err := newTokenFile("console")
		if err != nil {
			return c.fail(err)
		}
		defer remove()
		opts.Token, generated = tok, path
	}
	cl, sess, err := cn.client()
	if err != nil {
		return c.fail(err)
	}
	defer sess.close()
	log := newLog(c.stderr, &level)
	if err := probeOperator(cl, sess, cn, log); err != nil {
		return c.fail(err)
	}
	opts.Admin, opts.Log = cl, log.With("component", "console")
	con, err := console.New(opts)
	if err != nil {
		return c.fail(err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		_ = con.Close()
		return c.fail(fmt.Errorf("console: %w", err))
	}
	scheme := "http"
	if opts.TLS != nil {
		scheme = "https"
	}
	signer := "unsigned (--dev)"
	if cl.Key != nil {
		pub, _ := cl.Key.PublicKey()
		signer = "operator " + pub
	}
	base := fmt.Sprintf("%s://%s/", scheme, ln.Addr())
	fmt.Fprintf(c.stdout, "Portcullis console on %s — NATS %s, requests signed by %s. Ctrl-C stops.\n", base, redactURL(cn.url), signer)
	switch {
	case opts.Open:
		fmt.Fprintf(c.stdout, "  No login (--dev): any program on this machine may use it.\n")
		log.Info("console: serving", "url", base, "login", "none (--dev, loopback)")
	case generated != "":
		fmt.Fprintf(c.stdout, "  Open %slogin?token=%s\n  (the token is in %s, readable only by you; it ends with this console)\n", base, url.QueryEscape(opts.Token), generated)
		log.Info("console: serving", "url", base, "login", "the token in "+generated)
	default:
		fmt.Fprintf(c.stdout, "  Log in with the token of %s.\n", *tokenFile)
		log.Info("console: serving", "url", base, "login", "the token of "+*tokenFile)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- con.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err = <-served:
	}
	if cerr := con.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return c.fail(err)
	}
	return 0
}

// probeOperator asks the processor for its status once, at start, so that
// a key that may not use the operator API is one line at once — naming
// whose key it is — instead of a console whose every page times out. A
// processor that does not answer yet is only logged: the console may start
// first.
func probeOperator(cl *admin.Client, s *session, cn *conn, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	_, err := cl.Status(ctx)
	err = refusedBy(s.ctx, err)
	var refused *errRefused
	switch {
	case err == nil:
		return nil
	case errors.As(err, &refused), errors.Is(err, nats.ErrPermissionViolation), errors.Is(err, admin.ErrUnauthenticated):
		who := s.login()
		if s.who != "" && s.key != nil {
			pub, _ := s.key.PublicKey()
			who = "the key " + pub + ", " + operatorWhose(cn, pub) + ","
		}
		return fmt.Errorf("%s may not use the operator API (%v): expected the key of an operator block, given with --nkey FILE", who, errors.Unwrap(err))
	case errors.Is(err, admin.ErrNoProcessor), errors.Is(err, context.DeadlineExceeded):
		log.Warn("console: no processor answers yet; the pages say so until one does", "error", err)
		return nil
	}
	log.Warn("console: the processor's status could not be read", "error", err)
	return nil
}

// operatorWhose names the role of a key from --config, when given.
func operatorWhose(cn *conn, pub string) string {
	if cn.config == "" {
		return "which is not an operator's (--config FILE names its role)"
	}
	cfg, err := config.Load(cn.config)
	if err != nil {
		return "which is not an operator's"
	}
	return whose(cfg, cn.config, pub)
}

// consoleOptions checks the console's safety flags: loopback without TLS
// is fine; any other address needs TLS and a token file; --dev stays on
// loopback and needs no login; without --dev a key must sign. A login
// token is required on every address; without --token-file (and without
// --dev) the command makes one. It returns the options or the usage
// error's code.
func consoleOptions(c *cmdline, listen string, dev, haveKey bool, certFile, keyFile, tokenFile string) (console.Config, int, bool) {
	var opts console.Config
	if _, _, err := net.SplitHostPort(listen); err != nil {
		return opts, c.usageError("--listen %q: %v", listen, err), false
	}
	loopback := config.Loopback(listen)
	switch {
	case !dev && !haveKey:
		return opts, c.usageError("give --nkey FILE (an operator's seed; or $%s) to sign requests, or --dev for a --dev processor", EnvOperatorNkey), false
	case dev && !loopback:
		return opts, c.usageError("--dev serves on loopback only"), false
	case (certFile == "") != (keyFile == ""):
		return opts, c.usageError("give --tls-cert and --tls-key together"), false
	case !loopback && (certFile == "" || tokenFile == ""):
		return opts, c.usageError("--listen %s is not a loopback address: it needs --tls-cert, --tls-key and --token-file", listen), false
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return opts, c.fail(fmt.Errorf("--tls-cert/--tls-key: %w", err)), false
		}
		opts.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if tokenFile != "" {
		tok, err := readToken(tokenFile)
		if err != nil {
			return opts, c.fail(fmt.Errorf("--token-file: %w", err)), false
		}
		opts.Token = tok
	}
	opts.Open = dev && opts.Token == ""
	return opts, 0, true
}
