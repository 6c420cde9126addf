package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
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
//   - with a login token, every page but the login form needs a session;
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
	// loginFailures failed logins a minute are allowed; then 429 until the
	// minute is over.
	loginFailures = 10
)

// csp is the Content-Security-Policy of every response.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

type guard struct {
	key    []byte // CSRF token key, random per process
	token  []byte // sha256 of the login token; nil: no login
	secure bool
	now    func() time.Time
	// hosts are the Host values a loopback listener answers (nil: any).
	hosts map[string]bool
	cop   *http.CrossOriginProtection

	mu       sync.Mutex
	sessions map[string]time.Time // session id → expiry
	failMin  int64                // the minute failures counts
	failures int
}

func newGuard(token string, secure bool, now func() time.Time) (*guard, error) {
	g := &guard{key: make([]byte, 32), secure: secure, now: now, sessions: map[string]time.Time{}, cop: http.NewCrossOriginProtection()}
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
			h.ServeHTTP(w, r)
			return
		}
		hd.Set("Cache-Control", "no-store")
		session := g.session(r)
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

// session returns the request's live session id ("" for none).
func (g *guard) session(r *http.Request) string {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	exp, ok := g.sessions[c.Value]
	if !ok {
		return ""
	}
	if !g.now().Before(exp) {
		delete(g.sessions, c.Value)
		return ""
	}
	return c.Value
}

// errTooManyLogins is login's answer while failures are rate limited.
type loginResult int

const (
	loginOK loginResult = iota
	loginWrong
	loginLimited
)

// login checks a token and, when it is right, starts a session and sets
// its cookie.
func (g *guard) login(w http.ResponseWriter, token string) loginResult {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if m := now.Unix() / 60; m != g.failMin {
		g.failMin, g.failures = m, 0
	}
	if g.failures >= loginFailures {
		return loginLimited
	}
	h := sha256.Sum256([]byte(token))
	if g.token == nil || subtle.ConstantTimeCompare(h[:], g.token) != 1 {
		g.failures++
		return loginWrong
	}
	for id, exp := range g.sessions {
		if !now.Before(exp) {
			delete(g.sessions, id)
		}
	}
	if len(g.sessions) >= maxSessions {
		oldest, at := "", time.Time{}
		for id, exp := range g.sessions {
			if oldest == "" || exp.Before(at) {
				oldest, at = id, exp
			}
		}
		delete(g.sessions, oldest)
	}
	id := randomID()
	g.sessions[id] = now.Add(sessionTTL)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true, Secure: g.secure,
		SameSite: http.SameSiteStrictMode, MaxAge: int(sessionTTL / time.Second)})
	return loginOK
}

// logout ends a session and clears its cookie.
func (g *guard) logout(w http.ResponseWriter, session string) {
	g.mu.Lock()
	delete(g.sessions, session)
	g.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true, Secure: g.secure, SameSite: http.SameSiteStrictMode, MaxAge: -1})
}

func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
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
