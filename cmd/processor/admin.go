package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/schema/keyfile"
	"github.com/portcullis/portcullis/subjects"
)

// DefaultAdminURL is where the operator commands look for a processor by
// default: the embedded server of `processor run --dev`.
const DefaultAdminURL = "nats://127.0.0.1:4222"

// Environment variables of the operator commands.
const (
	// EnvNATSURL is the NATS URL when --url (and --config) give none.
	EnvNATSURL = "NATS_URL"
	// EnvOperatorNkey is the operator's seed file when --nkey gives none.
	EnvOperatorNkey = "PORTCULLIS_OPERATOR_NKEY"
)

// operatorNow stamps operator requests (requested_at_ms); tests set it to
// their processor's clock.
var operatorNow = time.Now

// conn holds the flags every operator command shares: where the running
// processor's NATS is, how to log in, which operator signs, and under which
// prefix the processor answers.
type conn struct {
	url, creds, nkey, prefix, config string
	timeout                          time.Duration
	output
}

func (c *conn) register(fs *flag.FlagSet) {
	c.registerConn(fs)
	c.output.register(fs)
}

// registerConn registers the connection flags alone (no -o).
func (c *conn) registerConn(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "url", "", "`URL` of the running processor's NATS server (default $"+EnvNATSURL+", else "+DefaultAdminURL+")")
	fs.StringVar(&c.creds, "creds", "", "NATS login: a credentials `FILE` (.creds) or an nkey seed file (SU…)")
	fs.StringVar(&c.nkey, "nkey", "", "the operator's nkey seed `FILE`: logs in to NATS with it (unless --creds) and signs every request (default $"+EnvOperatorNkey+"; without either, requests go unsigned and only a --dev processor answers them)")
	fs.StringVar(&c.prefix, "prefix", subjects.DefaultPrefix, "subject `PREFIX` of the processor")
	fs.StringVar(&c.config, "config", "", "take --url, --creds and --prefix from the processor's configuration `FILE` (flags given explicitly win)")
	fs.DurationVar(&c.timeout, "timeout", admin.DefaultTimeout, "how long to wait for the processor's answer")
}

// output is the -o flag of the commands that print what they read.
type output struct {
	format string
	isJSON bool
}

// Output formats.
const (
	formatText = "text"
	formatJSON = "json"
)

func (o *output) register(fs *flag.FlagSet) {
	fs.StringVar(&o.format, "o", formatText, "output `FORMAT`: text or json")
	fs.StringVar(&o.format, "output", formatText, "the same as -o (`FORMAT`: text or json)")
	fs.BoolVar(&o.isJSON, "json", false, "the same as -o json")
}

// json reports whether JSON was asked for; an unknown format is an error.
func (o *output) json() (bool, error) {
	switch o.format {
	case formatText:
		return o.isJSON, nil
	case formatJSON:
		return true, nil
	}
	return false, fmt.Errorf("-o %q: the formats are text and json", o.format)
}

// resolve fills what the flags left open: from --config first, then from
// the environment, then the defaults. So the URL is --url, else --config's,
// else $NATS_URL, else DefaultAdminURL; the operator's seed is --nkey, else
// $PORTCULLIS_OPERATOR_NKEY.
func (c *conn) resolve(fs *flag.FlagSet) error {
	urlFlag := c.url != ""
	if err := c.fromConfig(fs); err != nil {
		return err
	}
	from := "--url"
	if !urlFlag && c.url != "" {
		from = "the --config file's nats address"
	}
	if c.url == "" {
		c.url, from = os.Getenv(EnvNATSURL), "$"+EnvNATSURL
	}
	if c.url == "" {
		c.url = DefaultAdminURL
	}
	if err := checkURL(c.url, from); err != nil {
		return err
	}
	if c.nkey == "" {
		c.nkey = os.Getenv(EnvOperatorNkey)
	}
	return nil
}

// fromConfig applies --config to the flags not given explicitly.
func (c *conn) fromConfig(fs *flag.FlagSet) error {
	if c.config == "" {
		return nil
	}
	cfg, err := config.Load(c.config)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["prefix"] {
		c.prefix = cfg.Prefix
	}
	if c.url == "" {
		if cfg.NATS.Embedded {
			host, port, err := net.SplitHostPort(cfg.NATS.Listen)
			if err != nil {
				return fmt.Errorf("nats.listen: %w", err)
			}
			if host == "" || host == "0.0.0.0" || host == "::" {
				host = "127.0.0.1"
			}
			c.url = "nats://" + net.JoinHostPort(host, port)
		} else {
			c.url = cfg.NATS.URL
		}
	}
	if !set["creds"] && cfg.NATS.Credentials != "" {
		c.creds = cfg.NATS.Credentials
	}
	return nil
}

// session is a connection of an operator command: the operator's key signs
// its requests (nil: unsigned). ctx ends, with the server's refusal as its
// cause, as soon as NATS refuses one of the session's publishes or
// subscriptions (a permissions violation, which NATS reports only
// asynchronously: the request itself would wait for its whole timeout).
type session struct {
	nc     *nats.Conn
	subj   subjects.Subjects
	key    nkeys.KeyPair
	keys   []nkeys.KeyPair // wiped on close
	who    string          // who logged in, for messages: a public key, --creds FILE, or "" (anonymous)
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// login says who logged in, for messages.
func (s *session) login() string {
	if s.who == "" {
		return "an anonymous login"
	}
	return "the login of " + s.who
}

func (s *session) close() {
	if s.cancel != nil {
		s.cancel(nil)
	}
	if s.nc != nil {
		s.nc.Close()
	}
	for _, k := range s.keys {
		k.Wipe()
	}
}

// errRefused is the cause of a session's end: NATS refused what the login
// may not do. It wraps nats.ErrPermissionViolation.
type errRefused struct {
	login string
	err   error
}

func (e *errRefused) Error() string { return fmt.Sprintf("NATS refused %s: %v", e.login, e.err) }
func (e *errRefused) Unwrap() error { return e.err }

// refusedBy is the cause of ctx's end when NATS refused the session
// something, else err.
func refusedBy(ctx context.Context, err error) error {
	var r *errRefused
	if cause := context.Cause(ctx); errors.As(cause, &r) {
		return r
	}
	return err
}

// errLogin: the NATS server was reached and refused the login.
type errLogin struct {
	url, who string // who: as session.who
	err      error
}

func (e *errLogin) Error() string {
	if e.who == "" {
		return fmt.Sprintf("NATS at %s refused an anonymous login (%v): it requires one; pass --nkey FILE, the seed of an operator block's key (or set $%s)", e.url, e.err, EnvOperatorNkey)
	}
	return fmt.Sprintf("NATS at %s refused the login of %s (%v): is it the key of an operator block of the processor's configuration? Pass that key's seed with --nkey FILE", e.url, e.who, e.err)
}
func (e *errLogin) Unwrap() error { return e.err }

// checkURL refuses, at once, a server URL nats.go would only time out on
// (an http:// address, a metrics listener): the configuration's rule for
// nats.url (config.NotNATS).
func checkURL(raw, from string) error {
	if bad := config.NotNATS(raw); bad != "" {
		return fmt.Errorf("%s %s is not a NATS server URL: give nats://host:port (tls://, ws:// and wss:// work too); the processor's /metrics address is HTTP, not NATS", from, bad)
	}
	return nil
}

// open connects to NATS. The login is --creds (a .creds file, or an nkey
// seed file: nkey challenge–response), else the operator's --nkey; an nkey
// login receives replies under its own inbox prefix (_INBOX.<public key>),
// the only inbox an authenticated role may subscribe to. A server that does
// not authenticate clients (`processor run --dev`) cannot take an nkey
// login (it offers no nonce to sign): the command then connects without
// one, and the operator's key only signs.
func (c *conn) open() (*session, error) {
	s := &session{}
	ok := false
	defer func() {
		if !ok {
			s.close()
		}
	}()
	var err error
	if s.subj, err = subjects.New(c.prefix); err != nil {
		return nil, err
	}
	if c.nkey != "" {
		if s.key, err = keyfile.LoadSeed(c.nkey); err != nil {
			return nil, fmt.Errorf("--nkey: %w", err)
		}
		s.keys = append(s.keys, s.key)
	}
	opts := []nats.Option{nats.Name("portcullis-operator"), nats.Timeout(5 * time.Second)}
	login := s.key
	if c.creds != "" {
		jwt, err := keyfile.IsCreds(c.creds)
		if err != nil {
			return nil, fmt.Errorf("--creds: %w", err)
		}
		login = nil
		if jwt {
			opts = append(opts, nats.UserCredentials(c.creds))
		} else {
			if login, err = keyfile.LoadSeed(c.creds); err != nil {
				return nil, fmt.Errorf("--creds: %w", err)
			}
			s.keys = append(s.keys, login)
		}
	}
	var withLogin []nats.Option
	if login != nil {
		pub, err := login.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("nkey: %w", err)
		}
		withLogin = []nats.Option{nats.Nkey(pub, login.Sign), nats.CustomInboxPrefix(subjects.Inbox(pub))}
	}
	switch {
	case login != nil:
		s.who, _ = login.PublicKey()
	case c.creds != "":
		s.who = "--creds " + c.creds
	}
	// A permission violation ends the session's context at once.
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			s.cancel(&errRefused{login: s.login(), err: err})
		}
	}))
	s.nc, err = nats.Connect(c.url, append(opts, withLogin...)...)
	if errors.Is(err, nats.ErrNkeysNotSupported) {
		// The server authenticates nobody: every client may connect, and
		// the operator's key (if any) only signs.
		s.nc, err = nats.Connect(c.url, opts...)
	}
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
		// Reached, and refused: say whose login, and what to pass.
		return nil, &errLogin{url: redactURL(c.url), who: s.who, err: err}
	case err != nil:
		return nil, fmt.Errorf("cannot reach NATS at %s: %w", redactURL(c.url), err)
	}
	ok = true
	return s, nil
}

// redactURL hides a password in a NATS URL.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	return u.Redacted()
}

func (c *conn) client() (*admin.Client, *session, error) {
	s, err := c.open()
	if err != nil {
		return nil, nil, err
	}
	return &admin.Client{NC: s.nc, Subjects: s.subj, Timeout: c.timeout, Key: s.key, Now: operatorNow}, s, nil
}

// fail prints a command's failure, every line prefixed "processor <cmd>: ",
// with advice for the operator commands' refusals, and returns exit
// status 1.
func fail(stderr io.Writer, cmd string, err error) int {
	switch {
	case errors.Is(err, admin.ErrNoProcessor):
		fmt.Fprintf(stderr, "processor %s: %v: is a processor with this --prefix running on this NATS server?\n", cmd, err)
	case errors.Is(err, admin.ErrUnauthenticated):
		fmt.Fprintf(stderr, "processor %s: %v: sign with --nkey FILE (or $%s), the seed of a key configured in an operator block of the processor\n", cmd, err, EnvOperatorNkey)
	case errors.Is(err, admin.ErrStale):
		fmt.Fprintf(stderr, "processor %s: %v: is this machine's clock within %s of the processor's (and not far behind the clock a request it accepted was stamped by)?\n", cmd, err, admin.MaxRequestSkew)
	case errors.Is(err, nats.ErrPermissionViolation):
		fmt.Fprintf(stderr, "processor %s: %v: this key may not send operator requests; use an operator key (--nkey FILE, the seed of a key in an operator block of the processor's configuration); with one, check that --prefix is the processor's subjects.prefix\n", cmd, err)
	default:
		// A configuration's diagnostics are one per line: each line
		// starts with the command, like every other failure.
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "processor %s: %s\n", cmd, line)
		}
	}
	return 1
}

// targetArg reads the argument that names an intent: a fingerprint
// ("sha256:<hex>" or the hex digits alone), or a proposal
// ("<host>/<proposal_id>") whose fingerprint the processor looks up.
func targetArg(c *cmdline, pos []string) (admin.Target, int, bool) {
	if len(pos) != 1 {
		return admin.Target{}, c.usageError("give a fingerprint or <host>/<proposal_id>"), false
	}
	if strings.Contains(pos[0], "/") {
		ref, ok := admin.ParseProposalRef(pos[0])
		if !ok {
			return admin.Target{}, c.usageError("%q is not <host>/<proposal_id> (host: A-Z a-z 0-9 _ -; proposal id: also :)", pos[0]), false
		}
		return admin.Target{Proposal: &ref}, 0, true
	}
	fp, ok := admin.NormalizeFingerprint(pos[0])
	if !ok {
		return admin.Target{}, c.usageError("%q is not a fingerprint (sha256:<64 hex digits>) or <host>/<proposal_id>", pos[0]), false
	}
	return admin.Target{Fingerprint: fp}, 0, true
}

// operator parses an operator command's flags (its own are registered on
// c.fs already) and checks the output format. done: return code.
func (c *cmdline) operator(args []string) (cn *conn, asJSON bool, pos []string, code int, done bool) {
	cn = &conn{}
	cn.register(c.fs)
	pos, code, done = c.parse(args)
	if done {
		return nil, false, nil, code, true
	}
	asJSON, err := cn.json()
	if err != nil {
		return nil, false, nil, c.usageError("%v", err), true
	}
	return cn, asJSON, pos, 0, false
}

// ask connects as the operator and returns the client of the processor's
// API and the context of its requests, which ends at once when NATS
// refuses the login something (the client's errors then say so). done:
// return code (the failure is reported).
// answer is how every operator command ends: ask the running processor
// once (call), then print its answer as JSON (--json) or for a person
// (render). A refusal or no answer is one line on stderr (c.fail).
func answer[T any](c *cmdline, cn *conn, asJSON bool, call func(context.Context, *admin.Client) (T, error), render func(io.Writer, T)) int {
	cl, ctx, closeFn, code, done := c.ask(cn)
	if done {
		return code
	}
	defer closeFn()
	v, err := call(ctx, cl)
	if err != nil {
		return c.fail(err)
	}
	if asJSON {
		writeJSON(c.stdout, v)
		return 0
	}
	render(c.stdout, v)
	return 0
}

func (c *cmdline) ask(cn *conn) (cl *admin.Client, ctx context.Context, closeFn func(), code int, done bool) {
	if err := cn.resolve(c.fs); err != nil {
		return nil, nil, nil, c.fail(err), true
	}
	cl, s, err := cn.client()
	if err != nil {
		return nil, nil, nil, c.fail(err), true
	}
	return cl, s.ctx, s.close, 0, false
}

func formatMs(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
