package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The console's doors (SPEC §2.8 is the processor's; these are the
// browser's):
//
//   - every response carries a strict Content-Security-Policy (only the
//     console's own script, style and images; no inline code, no frames,
//     forms post only to the console) and no-sniff, no-referrer, deny-frame
//     headers;
//   - on a loopback listener, a request whose Host is not the console's own
//     address is refused (DNS rebinding);
//   - every page but the login form needs a session, on every address (a
//     loopback address is reachable by every program on the machine); only
//     Open (`--dev`, loopback only) serves without a login;
//   - failed logins are limited per client, never for everyone: per
//     address, or on loopback — where every local program shares the
//     address — per browser (its CSRF cookie); what then bounds guessing
//     is the token (a generated one is 256 random bits);
//   - /static/ serves its files and lists no directory;
//   - each login, resolution and failed login is logged with a session id
//     of the console's own (never the cookie, never a tenant or actor);
//   - every POST needs the CSRF token of its form (an HMAC of the browser's
//     CSRF cookie and session under a key that lives only in this process)
//     and must not come from another origin (Sec-Fetch-Site / Origin).
const (
	csrfCookie    = "portcullis_csrf"
	sessionCookie = "portcullis_session"
	csrfField     = "csrf"
	// MinTokenLen is the shortest login token accepted.
	MinTokenLen = 32
	// sessionTTL is how long a login lasts; maxSessions bounds them.
	sessionTTL  = 12 * time.Hour
	maxSessions = 1024
	// loginFailures failed logins a minute are allowed per client; then
	// 429 for that client until the minute is over.
	loginFailures = 10
	// maxClients bounds the clients whose failures are counted (the
	// oldest minute's are forgotten first).
	maxClients = 4096
)

// csp is the Content-Security-Policy of every response.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

type guard struct {
	key    []byte // CSRF token key, random per process
	token  []byte // sha256 of the login token; nil: no login (Open)
	secure bool
	now    func() time.Time
	log    *slog.Logger
	// hosts are the Host values a loopback listener answers (nil: any).
	hosts map[string]bool
	cop   *http.CrossOriginProtection

	mu       sync.Mutex
	sessions map[string]session   // session cookie → its session
	failures map[string]*failures // client → its failed logins
}

// session is a login: when it ends, and the id the log names it by.
type session struct {
	expires time.Time
	log     string
}

// failures counts one client's failed logins in one minute.
type failures struct {
	minute int64
	n      int
}

func newGuard(token string, secure bool, now func() time.Time, log *slog.Logger) (*guard, error) {
	g := &guard{key: make([]byte, 32), secure: secure, now: now, log: log, sessions: map[string]session{}, failures: map[string]*failures{},
		cop: http.NewCrossOriginProtection()}
	if _, err := rand.Read(g.key); err != nil {
		return nil, err
	}
	if token != "" {
		h := sha256.Sum256([]byte(token))
		g.token = h[:]
	}
	return g, nil
}

// allowHostsOf makes a loopback listener answer only to its own address:
// the IP and port, and localhost with the port.
func (g *guard) allowHostsOf(a net.Addr) {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || !tcp.IP.IsLoopback() {
		return
	}
	port := strconv.Itoa(tcp.Port)
	g.hosts = map[string]bool{
		net.JoinHostPort(tcp.IP.String(), port): true,
		net.JoinHostPort("localhost", port):     true,
	}
}

type ctxKey int

const (
	csrfKey ctxKey = iota
	sessionKey
	sessionLogKey
	csrfCookieKey
)

// wrap puts every door in front of h.
func (g *guard) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", csp)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Cross-Origin-Opener-Policy", "same-origin")
		hd.Set("Cross-Origin-Resource-Policy", "same-origin")
		if g.secure {
			hd.Set("Strict-Transport-Security", "max-age=31536000")
		}
		if g.hosts != nil && !g.hosts[strings.ToLower(r.Host)] {
			http.Error(w, "misdirected request: this console answers only to its own address", http.StatusMisdirectedRequest)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/static/") {
			if strings.HasSuffix(r.URL.Path, "/") {
				http.NotFound(w, r) // no directory listings
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		hd.Set("Cache-Control", "no-store")
		session, logID := g.session(r)
		if g.token != nil && session == "" && r.URL.Path != "/login" {
			if r.Method == http.MethodGet && r.URL.Path != "/events" && r.URL.Query().Get("fragment") == "" {
				http.Redirect(w, r, "/login", http.StatusSeeOther)
				return
			}
			http.Error(w, "log in first", http.StatusUnauthorized)
			return
		}
		csrf := g.csrfCookie(w, r)
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if err := g.cop.Check(r); err != nil {
				http.Error(w, "refused: a cross-origin request", http.StatusForbidden)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
			if !g.validCSRF(csrf, session, r.PostFormValue(csrfField)) {
				http.Error(w, "refused: the form's CSRF token is missing or wrong; reload the page and try again", http.StatusForbidden)
				return
			}
		}
		ctx := context.WithValue(r.Context(), csrfKey, g.csrfToken(csrf, session))
		ctx = context.WithValue(ctx, sessionKey, session)
		ctx = context.WithValue(ctx, sessionLogKey, logID)
		ctx = context.WithValue(ctx, csrfCookieKey, csrf)
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// csrfCookie returns the browser's CSRF cookie, setting a new one when it
// has none.
func (g *guard) csrfCookie(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) >= 22 && len(c.Value) <= 64 {
		return c.Value
	}
	v := randomID()
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: v, Path: "/", HttpOnly: true, Secure: g.secure, SameSite: http.SameSiteStrictMode})
	return v
}

// csrfToken is the token a form carries: bound to the CSRF cookie and the
// session, under the process's key.
func (g *guard) csrfToken(cookie, session string) string {
	m := hmac.New(sha256.New, g.key)
	m.Write([]byte(cookie + "\x00" + session))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (g *guard) validCSRF(cookie, session, token string) bool {
	if cookie == "" || token == "" {
		return false
	}
	return hmac.Equal([]byte(token), []byte(g.csrfToken(cookie, session)))
}

// session returns the request's live session cookie ("" for none) and
// the id the log names the session by ("open" for a console without a
// login, "" without a session).
func (g *guard) session(r *http.Request) (string, string) {
	if g.token == nil {
		return "", "open"
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return "", ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.sessions[c.Value]
	if !ok {
		return "", ""
	}
	if !g.now().Before(s.expires) {
		delete(g.sessions, c.Value)
		return "", ""
	}
	return c.Value, s.log
}

// client names who is logging in, for the failed-login limit: the
// address (an IPv6 address by its /64, which one machine commonly holds
// whole), or on loopback, which every local program shares, the browser
// (its CSRF cookie).
func client(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return "addr " + host
	case ip.IsLoopback():
		cookie, _ := r.Context().Value(csrfCookieKey).(string)
		return "browser " + cookie
	case ip.To4() == nil:
		return "net " + ip.Mask(net.CIDRMask(64, 128)).String()
	}
	return "addr " + ip.String()
}

// clientLabel is what the log says of a client: its address, never its
// cookie.
func clientLabel(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// errTooManyLogins is login's answer while failures are rate limited.
type loginResult int

const (
	loginOK loginResult = iota
	loginWrong
	loginLimited
)

// login checks a token and, when it is right, starts a session and sets
// its cookie. A client with loginFailures failed logins this minute is
// refused until the minute is over — that client only.
func (g *guard) login(w http.ResponseWriter, r *http.Request, token string) loginResult {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	minute := now.Unix() / 60
	who := client(r)
	f := g.failures[who]
	if f != nil && f.minute != minute {
		delete(g.failures, who)
		f = nil
	}
	if f != nil && f.n >= loginFailures {
		g.log.Warn("console: login refused: too many failed logins from this client", "client", clientLabel(r))
		return loginLimited
	}
	h := sha256.Sum256([]byte(token))
	if g.token == nil || subtle.ConstantTimeCompare(h[:], g.token) != 1 {
		if f == nil {
			g.forgetClients(minute)
			f = &failures{minute: minute}
			g.failures[who] = f
		}
		f.n++
		g.log.Warn("console: failed login", "client", clientLabel(r), "failures", f.n)
		return loginWrong
	}
	for id, s := range g.sessions {
		if !now.Before(s.expires) {
			delete(g.sessions, id)
		}
	}
	if len(g.sessions) >= maxSessions {
		oldest, at := "", time.Time{}
		for id, s := range g.sessions {
			if oldest == "" || s.expires.Before(at) {
				oldest, at = id, s.expires
			}
		}
		delete(g.sessions, oldest)
	}
	id := randomID()
	logID := "c-" + randomHex(6)
	g.sessions[id] = session{expires: now.Add(sessionTTL), log: logID}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true, Secure: g.secure,
		SameSite: http.SameSiteStrictMode, MaxAge: int(sessionTTL / time.Second)})
	g.log.Info("console: logged in", "session", logID, "client", clientLabel(r))
	return loginOK
}

// forgetClients makes room for one more client: the counts of past
// minutes go first, then, if still full, any.
func (g *guard) forgetClients(minute int64) {
	if len(g.failures) < maxClients {
		return
	}
	for k, f := range g.failures {
		if f.minute != minute {
			delete(g.failures, k)
		}
	}
	for k := range g.failures {
		if len(g.failures) < maxClients {
			break
		}
		delete(g.failures, k)
	}
}

// logout ends a session and clears its cookie.
func (g *guard) logout(w http.ResponseWriter, session string) {
	g.mu.Lock()
	if s, ok := g.sessions[session]; ok {
		g.log.Info("console: logged out", "session", s.log)
	}
	delete(g.sessions, session)
	g.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true, Secure: g.secure, SameSite: http.SameSiteStrictMode, MaxAge: -1})
}

func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// csrfOf is the CSRF token of the request's forms.
func csrfOf(r *http.Request) string {
	s, _ := r.Context().Value(csrfKey).(string)
	return s
}

func sessionOf(r *http.Request) string {
	s, _ := r.Context().Value(sessionKey).(string)
	return s
}

// sessionLogOf is the id the log names the request's session by ("open"
// without a login).
func sessionLogOf(r *http.Request) string {
	s, _ := r.Context().Value(sessionLogKey).(string)
	return s
}
