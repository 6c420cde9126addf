package console_test

import (
	"bytes"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/console"
	"github.com/portcullis/portcullis/internal/testenv"
)

const loginToken = "0123456789abcdef0123456789abcdef-token"

// browser is another client of the same console: its own cookies.
func (f *fixture) browser() *fixture {
	jar, _ := cookiejar.New(nil)
	g := *f
	g.web = &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &g
}

// failLogins posts n wrong tokens from f's browser.
func (f *fixture) failLogins(t *testing.T, n int) {
	t.Helper()
	_, page := f.get(t, "/login")
	csrf := token(t, page)
	for range n {
		f.post(t, "/login", url.Values{"token": {"guess"}, "csrf": {csrf}}, nil)
	}
}

// Ten wrong logins lock out the client that made them, for a minute —
// not everyone: another browser then logs in with the right token at
// once, and the locked one can again after the minute.
func TestLoginLimitPerClient(t *testing.T) {
	f := newFixture(t, func(c *console.Config) { c.Token = loginToken })
	f.failLogins(t, 10)
	_, page := f.get(t, "/login")
	if res, _ := f.post(t, "/login", url.Values{"token": {loginToken}, "csrf": {token(t, page)}}, nil); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the guessing client, right token after ten failures: %d, want 429", res.StatusCode)
	}
	other := f.browser()
	_, page = other.get(t, "/login")
	if res, _ := other.post(t, "/login", url.Values{"token": {loginToken}, "csrf": {token(t, page)}}, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("another client, right token after someone's ten failures: %d, want 303 (logged in)", res.StatusCode)
	}
	if code, _ := other.get(t, "/indeterminate"); code != http.StatusOK {
		t.Errorf("the other client's session: %d", code)
	}
	f.clock.Advance(time.Minute)
	_, page = f.get(t, "/login")
	if res, _ := f.post(t, "/login", url.Values{"token": {loginToken}, "csrf": {token(t, page)}}, nil); res.StatusCode != http.StatusSeeOther {
		t.Errorf("the guessing client a minute later: %d, want 303", res.StatusCode)
	}
}

// The URL the command prints (/login?token=…) logs in and leaves the
// token out of the address bar; a wrong one counts as a failed login.
func TestLoginURL(t *testing.T) {
	f := newFixture(t, func(c *console.Config) { c.Token = loginToken })
	res, err := f.web.Get(f.base + "/login?token=" + url.QueryEscape(loginToken))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/" {
		t.Fatalf("the printed URL: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	if code, _ := f.get(t, "/indeterminate"); code != http.StatusOK {
		t.Errorf("after the printed URL: %d", code)
	}
	g := f.browser()
	if code, _ := g.get(t, "/login?token=wrong"); code != http.StatusUnauthorized {
		t.Errorf("a wrong token in the URL: %d", code)
	}
}

// /static/ serves its files and lists no directory.
func TestStaticListsNoDirectory(t *testing.T) {
	f := newFixture(t, func(c *console.Config) { c.Token = loginToken })
	for _, path := range []string{"/static/", "/static//", "/static/./"} {
		code, body := f.get(t, path)
		if code != http.StatusNotFound || strings.Contains(body, "console.css") {
			t.Errorf("%s: %d\n%s", path, code, body)
		}
	}
	if code, _ := f.get(t, "/static/console.css"); code != http.StatusOK {
		t.Errorf("a file: %d", code)
	}
}

// A console needs a login token on every address; only Open (--dev)
// serves without one, and only on loopback.
func TestTokenRequired(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	for _, cfg := range []console.Config{
		{Admin: env.Admin()},
		{Admin: env.Admin(), Token: "short"},
		{Admin: env.Admin(), Token: "short", Open: true},
	} {
		if c, err := console.New(cfg); err == nil {
			_ = c.Close()
			t.Errorf("console.New(%+v) accepted", cfg)
		}
	}
	c, err := console.New(console.Config{Admin: env.Admin(), Open: true, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Skip(err)
	}
	defer ln.Close()
	if err := c.Serve(ln); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Errorf("an open console on every interface: %v", err)
	}
}

// Who did what: a login, a failed login and a resolution are logged with
// the session (the console's own id, never the cookie), value-free.
func TestSessionsLogged(t *testing.T) {
	var logs bytes.Buffer
	f := newFixture(t, func(c *console.Config) {
		c.Token = loginToken
		c.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	fp := f.stuck(t, "prop-logged", 3)
	f.failLogins(t, 1)
	_, page := f.get(t, "/login")
	f.post(t, "/login", url.Values{"token": {loginToken}, "csrf": {token(t, page)}}, nil)
	_, page = f.get(t, "/indeterminate")
	res, _ := f.post(t, "/indeterminate/resolve", url.Values{"csrf": {token(t, page)}, "fingerprint": {fp}, "effect": {"present"}, "evidence": {"ticket:OPS-1"}}, nil)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("resolve: %d", res.StatusCode)
	}
	var loggedIn, resolved string
	for _, line := range strings.Split(logs.String(), "\n") {
		switch {
		case strings.Contains(line, `"msg":"console: logged in"`):
			loggedIn = line
		case strings.Contains(line, `"msg":"console: resolved"`):
			resolved = line
		}
	}
	if !strings.Contains(logs.String(), `"msg":"console: failed login"`) || loggedIn == "" || resolved == "" {
		t.Fatalf("the log:\n%s", logs.String())
	}
	id := between(loggedIn, `"session":"`, `"`)
	if id == "" || !strings.Contains(resolved, `"session":"`+id+`"`) {
		t.Errorf("the resolution does not name the session that logged in (%q):\n%s", id, resolved)
	}
	for _, c := range f.web.Jar.Cookies(mustURL(t, f.base)) {
		if strings.Contains(logs.String(), c.Value) {
			t.Errorf("the log holds the cookie %s", c.Name)
		}
	}
	if strings.Contains(logs.String(), loginToken) || strings.Contains(logs.String(), testenv.Tenant) {
		t.Error("the log holds the token or the tenant")
	}
}

func between(s, from, to string) string {
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, to)
	return v
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
