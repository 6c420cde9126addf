package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/schema/keyfile"
	"github.com/portcullis/portcullis/subjects"
)

// Conn is a NATS connection logged in as one role's identity: the key it
// logged in with is the key a Host on it signs with (SPEC §2.7: a host
// signs with the key it logs in with). It is a *nats.Conn for everything
// else: pass c.Conn to ServeConnector, ServeResolver and
// ServeCandidateSource, Close or Drain it when done.
type Conn struct {
	*nats.Conn
	key nkeys.KeyPair
	pub string
	// login is the identity the server authenticated: a public key, or ""
	// for none (anonymous, or a server that authenticates nobody).
	login string
	refusals
}

// PublicKey is the public key ("U…") of the identity the connection was
// made with, "" for an anonymous one.
func (c *Conn) PublicKey() string { return c.pub }

// LoadSeed reads a role's nkey seed from a file written by `processor
// keygen <role> --out FILE` (one line, "SU…"; a NATS .creds file holding
// one works too), for Connect. Its errors name the file, never its
// content. Wipe the key when done.
func LoadSeed(path string) (nkeys.KeyPair, error) {
	kp, err := keyfile.LoadSeed(path)
	if err != nil {
		return nil, fmt.Errorf("client: load seed: %w", keyfileError{err})
	}
	return kp, nil
}

// keyfileError is a keyfile error without its package's prefix (errors.Is
// still sees what it wraps: os.ErrNotExist, keyfile.ErrNotSeed).
type keyfileError struct{ error }

func (e keyfileError) Error() string { return strings.TrimPrefix(e.error.Error(), "keyfile: ") }
func (e keyfileError) Unwrap() error { return e.error }

// Connect connects to NATS at url as the role whose key is seed: it logs
// in with the nkey (challenge–response; the seed never leaves the
// process), receives every reply (JetStream publish acks, direct gets,
// request replies) under the role's own inbox prefix _INBOX.<public key>,
// the only inbox its permissions allow (SPEC §2.8), and a Host on the
// connection signs with the same key. Every role (host, connector,
// resolver, source) uses its own key and so its own inbox. Against a
// server that authenticates nobody (processor run --dev) the key only
// signs.
//
// A nil seed connects anonymously with the default inbox prefix, which
// only a server without authentication accepts; a Host on it sends
// unsigned messages, which only a processor with admission.allow_unsigned
// (run --dev) admits.
//
// opts are applied after these, so they may add a name, TLS, reconnect
// settings or handlers (an error handler is called as well as the one
// Connect installs). An option that logs in as another identity than
// seed's (another nkey, a .creds file of another user, a user and
// password, a token) is refused with ErrIdentityMismatch: the key that
// signs must be the one the server knows.
//
// Errors: ErrNotNATS for a URL that is not nats:// (tls://, ws://, wss://,
// or host:port alone), at once; ErrLoginRefused when the server was
// reached and refused the login; ErrIdentityMismatch.
func Connect(url string, seed nkeys.KeyPair, opts ...nats.Option) (*Conn, error) {
	if err := checkURL(url); err != nil {
		return nil, err
	}
	c := &Conn{key: seed}
	var login []nats.Option
	if seed != nil {
		pub, err := seed.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("client: connect: %w", err)
		}
		c.pub = pub
		login = []nats.Option{nats.Nkey(pub, seed.Sign), nats.CustomInboxPrefix(subjects.Inbox(pub))}
	}
	final := append(append(login, opts...), c.refusals.option())
	o := nats.GetDefaultOptions()
	for _, opt := range final {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("client: connect: %w", err)
		}
	}
	who, err := loginOf(&o)
	if err != nil {
		return nil, fmt.Errorf("client: connect: %w", err)
	}
	if seed != nil && who != c.pub {
		if who == "" {
			who = "a login without an nkey"
		}
		return nil, fmt.Errorf("client: connect: %w: the options log in as %s, the key that signs is %s", ErrIdentityMismatch, who, c.pub)
	}
	c.login = who
	nc, err := nats.Connect(url, final...)
	if errors.Is(err, nats.ErrNkeysNotSupported) && seed != nil {
		// The server authenticates nobody: everyone connects, and the key
		// only signs.
		c.login = ""
		nc, err = nats.Connect(url, append(slices.Clone(opts), c.refusals.option())...)
	}
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
		if who == "" {
			return nil, fmt.Errorf("client: connect to %s: %w: %w: the server requires a login; connect with the role's seed (client.LoadSeed of the file `processor keygen` wrote)", redactURL(url), ErrLoginRefused, err)
		}
		return nil, fmt.Errorf("client: connect to %s: %w: %w: is %s the public_key of the role's block in the processor's configuration?", redactURL(url), ErrLoginRefused, err, who)
	case err != nil:
		return nil, fmt.Errorf("client: connect to %s: %w", redactURL(url), err)
	}
	c.Conn = nc
	return c, nil
}

// loginOf is the identity options log in as: an nkey's public key, a
// user JWT's subject (the user's public key), "" for none; an error for a
// user and password or a token, which are no role's identity.
func loginOf(o *nats.Options) (string, error) {
	switch {
	case o.UserJWT != nil:
		token, err := o.UserJWT()
		if err != nil {
			return "", err
		}
		return jwtSubject(token)
	case o.Nkey != "":
		return o.Nkey, nil
	case o.User != "" || o.Token != "" || o.TokenHandler != nil:
		return "a user and password or token", nil
	}
	return "", nil
}

// jwtSubject is a user JWT's "sub": the user's public key. The signature
// is the server's to check; only the identity is read here.
func jwtSubject(token string) (string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", errors.New("user JWT: not a JWT")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", errors.New("user JWT: claims do not decode")
	}
	var claims struct {
		Sub string `json:"sub"`
	}
	if err := json.Unmarshal(raw, &claims); err != nil || claims.Sub == "" {
		return "", errors.New("user JWT: no subject")
	}
	return claims.Sub, nil
}

// natsSchemes are the URL schemes nats.go connects with.
var natsSchemes = []string{"nats", "tls", "ws", "wss"}

// checkURL refuses a server URL nats.go would only time out on (an
// http:// address): each of a comma-separated list must be nats://,
// tls://, ws:// or wss://, or host:port alone.
func checkURL(raw string) error {
	for _, one := range strings.Split(raw, ",") {
		one = strings.TrimSpace(one)
		if !strings.Contains(one, "://") {
			continue
		}
		u, err := url.Parse(one)
		if err != nil || !slices.Contains(natsSchemes, strings.ToLower(u.Scheme)) {
			return fmt.Errorf("client: connect: %w: %s (give nats://host:port; tls://, ws:// and wss:// work too)", ErrNotNATS, redactURL(one))
		}
	}
	return nil
}

// redactURL hides passwords in a server URL list.
func redactURL(raw string) string {
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}

// refusals tells operations on a connection, at once, that the server
// refused one of their publishes or subscriptions: NATS reports a
// permissions violation only to the connection's error handler, and the
// publish or request itself would wait for its whole timeout.
type refusals struct {
	mu      sync.Mutex
	waiters map[*refusalWaiter]struct{}
}

type refusalWaiter struct {
	subject string
	cancel  context.CancelCauseFunc
}

// violationText finds what was refused in a permissions violation.
var violationText = regexp.MustCompile(`Permissions Violation for (Publish|Subscription) to "([^"]*)"`)

// option installs the error handler that reports violations, calling the
// one the other options set as well.
func (r *refusals) option() nats.Option {
	return func(o *nats.Options) error {
		user := o.AsyncErrorCB
		o.AsyncErrorCB = func(nc *nats.Conn, sub *nats.Subscription, err error) {
			r.refused(err)
			if user != nil {
				user(nc, sub, err)
			}
		}
		return nil
	}
}

func (r *refusals) refused(err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	m := violationText.FindStringSubmatch(err.Error())
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range r.waiters {
		// A refused publish concerns the operation on that subject; a
		// refused subscription to an inbox, every request (their replies
		// can never come).
		if m == nil || m[2] == w.subject || (m[1] == "Subscription" && strings.HasPrefix(m[2], "_INBOX.")) {
			w.cancel(err)
		}
	}
}

// watch returns ctx, ended with the server's refusal as its cause as soon
// as the server refuses an operation on subject, and a function that
// stops watching (and ends the context). On a nil refusals (a host on a
// connection Connect did not make) the context ends only with ctx.
func (r *refusals) watch(ctx context.Context, subject string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	if r == nil {
		return ctx, func() { cancel(nil) }
	}
	w := &refusalWaiter{subject: subject, cancel: cancel}
	r.mu.Lock()
	if r.waiters == nil {
		r.waiters = map[*refusalWaiter]struct{}{}
	}
	r.waiters[w] = struct{}{}
	r.mu.Unlock()
	return ctx, func() {
		r.mu.Lock()
		delete(r.waiters, w)
		r.mu.Unlock()
		cancel(nil)
	}
}

// refusedCause is the permissions violation that ended ctx, or nil.
func refusedCause(ctx context.Context) error {
	if cause := context.Cause(ctx); errors.Is(cause, nats.ErrPermissionViolation) {
		return cause
	}
	return nil
}
