package main

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// The doors of issue 31, tried from outside with the built binary: a
// console and an MCP HTTP server on loopback serve nobody without the
// token they print, and a login with the wrong rights is one line at
// start, naming whose key it is.

// envConfig writes env's configuration (its roles, its NATS URL; no
// processor credentials) to a file a command reads with --config.
func envConfig(t *testing.T, env *testenv.Env, edit func(*config.Config)) string {
	t.Helper()
	c := *env.Config
	c.NATS.Credentials = ""
	if edit != nil {
		edit(&c)
	}
	path := filepath.Join(t.TempDir(), "portcullis.hcl")
	if err := os.WriteFile(path, config.Format(&c), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func browser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// A console on loopback, started without --token-file: a local program
// gets nothing without the token and cannot settle an indeterminate
// action; the URL the console printed logs a browser in, its resolution
// is carried out and logged with its session.
func TestConsoleNeedsThePrintedToken(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	env.Fakes["demo"].TimeOut()
	m := testenv.Granted(t, testenv.Lumber("prop-door"), "sku-1001", time.Now())
	env.PublishSigned(t, m, env.Host)
	env.Recorder.Wait(t, "prop-door", testenv.Kind(schema.KindReconciliationRequired))
	fp := testenv.FingerprintOf(t, m, "sku-1001")

	_, out := startProcessor(t, t.TempDir(), "Ctrl-C stops", "console", "--url", env.Server.ClientURL(), "--nkey", writeSeed(t, env.Operator), "--listen", "127.0.0.1:0")
	base := regexp.MustCompile(`Portcullis console on (http://127\.0\.0\.1:\d+)/`).FindStringSubmatch(string(out.Bytes()))
	if base == nil {
		t.Fatalf("no banner:\n%s", out.Bytes())
	}
	// A local program, as the attacker: fetch the form, post it.
	attacker := browser()
	res, err := attacker.Get(base[1] + "/indeterminate")
	if err != nil {
		t.Fatal(err)
	}
	page := readAll(res)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/login" {
		t.Errorf("the queue without the token: %d, want 303 to /login", res.StatusCode)
	}
	form := url.Values{"fingerprint": {fp}, "effect": {"present"}, "evidence": {"ticket:ATTACK-1"}}
	if m := csrfField.FindStringSubmatch(page); m != nil {
		form.Set("csrf", m[1])
	}
	res, err = attacker.PostForm(base[1]+"/indeterminate/resolve", form)
	if err != nil {
		t.Fatal(err)
	}
	readAll(res)
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a resolution without the token: %d, want 401", res.StatusCode)
	}
	if o, _ := env.StoredOutcome(t, "prop-door"); o.Kind != schema.KindReconciliationRequired {
		t.Fatalf("the attacker settled the action: %s", o.Kind)
	}

	// The operator opens the printed URL.
	open := regexp.MustCompile(`Open (http://\S+/login\?token=\S+)`).FindStringSubmatch(string(out.Bytes()))
	file := regexp.MustCompile(`the token is in (\S+), readable only by you`).FindStringSubmatch(string(out.Bytes()))
	if open == nil || file == nil {
		t.Fatalf("no URL to open and token file:\n%s", out.Bytes())
	}
	if info, err := os.Stat(file[1]); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("the token file %s: %v %v, want mode 0600", file[1], info, err)
	}
	op := browser()
	res, err = op.Get(open[1])
	if err != nil {
		t.Fatal(err)
	}
	readAll(res)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/" {
		t.Fatalf("the printed URL: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	res, err = op.Get(base[1] + "/indeterminate")
	if err != nil {
		t.Fatal(err)
	}
	page = readAll(res)
	csrf := csrfField.FindStringSubmatch(page)
	if res.StatusCode != http.StatusOK || csrf == nil {
		t.Fatalf("the queue after logging in: %d", res.StatusCode)
	}
	form.Set("csrf", csrf[1])
	res, err = op.PostForm(base[1]+"/indeterminate/resolve", form)
	if err != nil {
		t.Fatal(err)
	}
	readAll(res)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("the operator's resolution: %d", res.StatusCode)
	}
	env.Recorder.Wait(t, "prop-door", testenv.Kind(schema.KindConfirmed))
	out.Wait(t, `"msg":"console: resolved"`)
	if !regexp.MustCompile(`"msg":"console: resolved",.*"session":"c-[0-9a-f]+"`).Match(out.Bytes()) {
		t.Errorf("the resolution is not logged with its session:\n%s", out.Bytes())
	}
}

func readAll(res *http.Response) string {
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// An operator console given a host's key fails at once with one line
// naming whose key it is and what was expected (the CLI refuses the same
// key at once too), instead of serving pages that time out.
func TestConsoleHostKeyFailsFast(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	seed := writeSeed(t, env.Host)
	cfg := envConfig(t, env, nil)
	for _, c := range []struct {
		name  string
		extra []string
		want  string
	}{
		{"without --config", nil, "which is not an operator's (--config FILE names its role)"},
		{"with --config", []string{"--config", cfg}, `the key of host "frontdesk" in ` + cfg},
	} {
		args := append([]string{"console", "--url", env.Server.ClientURL(), "--nkey", seed, "--listen", "127.0.0.1:0"}, c.extra...)
		code, out, took := runTimed(t, t.TempDir(), args...)
		t.Logf("%s", out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 1 || len(lines) != 1 || !strings.Contains(out, c.want) || !strings.Contains(out, "expected the key of an operator block") {
			t.Errorf("%s: exit %d after %s:\n%s\nwant one line naming %q and what was expected", c.name, code, took, out, c.want)
		}
		if took > failFast {
			t.Errorf("%s: took %s", c.name, took)
		}
	}
}

// `processor mcp --http` on loopback, started without --token-file, makes
// a token, says where it is and logs its endpoint; a request without the
// token is refused, one with it served.
func TestMCPHTTPNeedsThePrintedToken(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	cfg := envConfig(t, env, func(c *config.Config) {
		m := config.DevMCP()
		m.Host, m.TenantRef, m.SecurityDomainRef = testenv.HostName, testenv.Tenant, testenv.SecurityDomain
		c.MCP = m
	})
	_, out := startProcessor(t, t.TempDir(), "Ctrl-C stops", "mcp", "--config", cfg, "--nkey", writeSeed(t, env.Host), "--http", "127.0.0.1:0")
	endpoint := regexp.MustCompile(`Portcullis MCP server on (http://127\.0\.0\.1:\d+/mcp)`).FindStringSubmatch(string(out.Bytes()))
	if endpoint == nil {
		t.Fatalf("no banner:\n%s", out.Bytes())
	}
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"local-program","version":"1"}}}`
	post := func(auth string) int {
		req, _ := http.NewRequest(http.MethodPost, endpoint[1], strings.NewReader(initialize))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(res)
		return res.StatusCode
	}
	if code := post(""); code != http.StatusUnauthorized {
		t.Errorf("a request without the token: %d, want 401", code)
	}
	if code := post("Bearer not-the-token"); code != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d, want 401", code)
	}
	file := regexp.MustCompile(`the token is in (\S+) \(readable only by you\)`).FindStringSubmatch(string(out.Bytes()))
	if file == nil {
		t.Fatalf("no token file named:\n%s", out.Bytes())
	}
	tok, err := readToken(file[1])
	if err != nil {
		t.Fatalf("the token file: %v", err)
	}
	if code := post("Bearer " + tok); code != http.StatusOK {
		t.Errorf("with the printed token: %d, want 200", code)
	}
	if !regexp.MustCompile(`"msg":"mcp: serving Streamable HTTP",.*"endpoint":"` + regexp.QuoteMeta(endpoint[1]) + `"`).Match(out.Bytes()) {
		t.Errorf("the endpoint is not logged:\n%s", out.Bytes())
	}
}

// `processor mcp` given another role's key names that role.
func TestMCPOtherRolesKey(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	cfg := envConfig(t, env, func(c *config.Config) {
		m := config.DevMCP()
		m.Host, m.TenantRef, m.SecurityDomainRef = testenv.HostName, testenv.Tenant, testenv.SecurityDomain
		c.MCP = m
	})
	code, out, took := runTimed(t, t.TempDir(), "mcp", "--config", cfg, "--nkey", writeSeed(t, env.Operator))
	if code != 1 || strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, `the key of operator "oncall" in `+cfg) ||
		!strings.Contains(out, `not host "frontdesk"'s public_key`) || took > failFast {
		t.Errorf("exit %d after %s:\n%s", code, took, out)
	}
}

// `processor run` whose nats.credentials is a host's key fails at once
// with one line naming that role and what was expected — not permission
// errors printed raw and a timeout a minute later.
func TestRunWithoutTheProcessorsRightsFailsFast(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	dir := t.TempDir()
	cfg := envConfig(t, env, func(c *config.Config) {
		c.NATS.Credentials = writeSeed(t, env.Host)
		c.Store.Dir = filepath.Join(dir, "store")
		c.Metrics.Listen = ""
	})
	code, out, took := runTimed(t, dir, "run", "--config", cfg)
	t.Logf("%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 1 || len(lines) != 1 || !strings.Contains(out, `the key of host "frontdesk" in this configuration`) ||
		!strings.Contains(out, "lacks the processor's rights") || !strings.Contains(out, "processor nats-permissions") {
		t.Errorf("exit %d after %s, %d lines:\n%s", code, took, len(lines), out)
	}
	if took > failFast {
		t.Errorf("took %s", took)
	}
}
