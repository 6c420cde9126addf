package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

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
operator as processor reconcile resolve does. --dev: no key (requests go unsigned; only a --dev processor
answers them).
It listens on loopback (` + console.DefaultListen + `) and answers only to that address. Another address
needs --tls-cert, --tls-key and --token-file (a login token of at least 32 characters, in a file only its
owner may read). Every form carries a CSRF token; the Content-Security-Policy allows only the console's own
script and style.
The URL is --url, else the --config file's, else $` + EnvNATSURL + `, else ` + DefaultAdminURL + `.`

// cmdConsole runs the console until SIGTERM or SIGINT.
func cmdConsole(c *cmdline, args []string, _ io.Reader) int {
	listen := c.fs.String("listen", console.DefaultListen, "`ADDR` to serve on (another than loopback needs --tls-cert, --tls-key and --token-file)")
	dev := c.fs.Bool("dev", false, "development: no operator key needed (requests go unsigned; only a --dev processor answers them); loopback only")
	certFile := c.fs.String("tls-cert", "", "serve HTTPS with this certificate `FILE` (PEM; with --tls-key)")
	keyFile := c.fs.String("tls-key", "", "the certificate's private key `FILE` (PEM)")
	tokenFile := c.fs.String("token-file", "", "require a login: the token is this `FILE`'s content (at least 32 characters, readable by its owner only)")
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
	cl, sess, err := cn.client()
	if err != nil {
		return c.fail(err)
	}
	defer sess.close()
	log := newLog(c.stderr, &level)
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
	fmt.Fprintf(c.stdout, "Portcullis console on %s://%s/ — NATS %s, requests signed by %s. Ctrl-C stops.\n",
		scheme, ln.Addr(), redactURL(cn.url), signer)
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

// consoleOptions checks the console's safety flags: loopback without TLS
// or login is fine; any other address needs both; --dev stays on loopback;
// without --dev a key must sign. It returns the options or the usage
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
	return opts, 0, true
}

// readToken reads a login token: the file's content without surrounding
// white space, at least console.MinTokenLen characters, in a file nobody
// but its owner may read (where the system has such modes).
func readToken(path string) (string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if runtime.GOOS != "windows" && info.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s may be read by others (mode %v): chmod 600 it", path, info.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < console.MinTokenLen || strings.ContainsAny(tok, "\r\n") {
		return "", fmt.Errorf("%s: the token must be one line of at least %d characters (e.g. head -c 32 /dev/urandom | base64 > %s)", path, console.MinTokenLen, path)
	}
	return tok, nil
}
