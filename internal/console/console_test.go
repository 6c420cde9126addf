package console_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/console"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is a processor (testenv, a manual clock) whose fake provider
// "demo" never answers, and a console signed as its operator, served on a
// loopback listener.
type fixture struct {
	env   *testenv.Env
	clock *stages.ManualClock
	con   *console.Console
	base  string
	web   *http.Client
}

func newFixture(t *testing.T, opts ...func(*console.Config)) *fixture {
	t.Helper()
	clock := stages.NewManualClock(time.UnixMilli(1_764_424_800_000))
	env := testenv.New(t, testenv.WithClock(clock), testenv.WithAuth(), testenv.WithConfig(func(c *config.Config) {
		c.Reconciliation.Interval = 5 * time.Second
		c.Reconciliation.MaxAttempts = 2
	}))
	env.Fakes["demo"].TimeOut()
	f := &fixture{env: env, clock: clock}
	cfg := console.Config{Admin: env.Admin(), Now: clock.Now, Log: slog.New(slog.DiscardHandler), Open: true}
	for _, o := range opts {
		o(&cfg)
	}
	f.serve(t, cfg)
	return f
}

// serve starts a console on a loopback listener.
func (f *fixture) serve(t *testing.T, cfg console.Config) {
	t.Helper()
	con, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- con.Serve(ln) }()
	t.Cleanup(func() {
		if err := con.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	jar, _ := cookiejar.New(nil)
	f.con, f.base = con, "http://"+ln.Addr().String()
	f.web = &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// stuck publishes a granted lumber proposal (quantity q) whose dispatch
// times out and whose reconciliation is exhausted: terminal
// RECONCILIATION_REQUIRED, waiting for an operator. It returns the
// fingerprint.
func (f *fixture) stuck(t *testing.T, pid string, q int) string {
	t.Helper()
	m := testenv.Lumber(pid)
	testenv.Set(m, "intent.payload", map[string]any{"quantity": q})
	m = testenv.Granted(t, m, "sku-1001", f.clock.Now())
	f.env.PublishSigned(t, m, f.env.Host)
	f.env.Recorder.Wait(t, pid, testenv.Kind(schema.KindReconciliationRequired))
	f.clock.Advance(5 * time.Second)
	f.env.Recorder.Wait(t, pid, testenv.Count(2))
	f.clock.Advance(10 * time.Second)
	f.env.Recorder.Wait(t, pid, testenv.Terminal)
	return testenv.FingerprintOf(t, m, "sku-1001")
}

// get fetches a page and returns its status and body.
func (f *fixture) get(t *testing.T, path string) (int, string) {
	t.Helper()
	res, err := f.web.Get(f.base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

// post sends a form and returns the response (body closed, read into the
// string).
func (f *fixture) post(t *testing.T, path string, form url.Values, hdr http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header[k] = v
	}
	res, err := f.web.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// token is the CSRF token of a page's forms.
func token(t *testing.T, page string) string {
	t.Helper()
	m := csrfRe.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", page)
	}
	return m[1]
}

func mustContain(t *testing.T, what, page string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(page, w) {
			t.Errorf("%s lacks %q", what, w)
		}
	}
	if t.Failed() {
		t.Logf("%s:\n%s", what, page)
	}
}

// TestPages: every page answers from the operator's view of a deployment
// with an exhausted action, a parked approval and a confirmed one —
// counts, the queue, approvals with their summary, timelines by each kind
// of name, search — each under the security headers.
func TestPages(t *testing.T) {
	f := newFixture(t)
	fp := f.stuck(t, "prop-stuck", 20)
	wait := testenv.Set(testenv.Lumber("prop-wait"), "intent.payload", map[string]any{"quantity": 50}) // another intent than prop-stuck's
	f.env.PublishSigned(t, wait, f.env.Host)
	f.env.Recorder.Wait(t, "prop-wait", testenv.Kind(schema.KindNeedsApproval))

	code, page := f.get(t, "/")
	if code != http.StatusOK {
		t.Fatalf("overview: %d\n%s", code, page)
	}
	mustContain(t, "overview", page, `id="count-indeterminate"><strong>1</strong>`, `id="count-approvals"><strong>1</strong>`,
		`<strong>1/1</strong> processors ready`, `data-stage="dispatch"`, `data-processor="`+f.env.Processor().InstanceID()+`"`,
		"ADAPTER_TIMEOUT", "RECONCILE_EXHAUSTED")

	_, page = f.get(t, "/indeterminate")
	mustContain(t, "queue", page, `data-fingerprint="`+fp+`"`, "exhausted", "2/2", "frontdesk/prop-stuck", `name="effect" value="absent"`, `name="csrf"`)

	_, page = f.get(t, "/approvals")
	mustContain(t, "approvals", page, `data-proposal="frontdesk/prop-wait"`, "Add 20 boards of cedar 8ft grade A", "1 pending")

	_, page = f.get(t, "/timeline?q="+fp)
	mustContain(t, "timeline by fingerprint", page, "ADAPTER_TIMEOUT", "RECONCILE_EXHAUSTED", "rcn_"+fp[7:23]+"_2", "frontdesk/prop-stuck")
	// An exhausted intent's timeline: the resolve form for its latest
	// receipt, and the way to the queue; newest first, with the toggle.
	rs0, err := f.env.Admin().Receipts(context.Background(), fp)
	if err != nil {
		t.Fatal(err)
	}
	latest := rs0.Receipts[len(rs0.Receipts)-1]
	mustContain(t, "an exhausted intent's timeline", page, `id="settle"`, "Waiting for an operator", `action="/indeterminate/resolve"`,
		`name="receipt" value="`+latest.ReceiptID+`"`, `href="/indeterminate"`, "Newest first", "order=oldest")
	mustContain(t, "the header", page, `id="signer" title="`, ">operator "+testenv.OperatorName+"</span>")
	_, parked := f.get(t, "/timeline?q=frontdesk/prop-wait")
	mustContain(t, "a parked proposal's timeline", parked, `id="parked"`, `href="/approvals"`)
	_, byProposal := f.get(t, "/timeline?q=frontdesk/prop-stuck")
	mustContain(t, "timeline by proposal", byProposal, `id="intent-fingerprint">`+fp)
	rs, err := f.env.Admin().Receipts(context.Background(), fp)
	if err != nil {
		t.Fatal(err)
	}
	_, byReceipt := f.get(t, "/timeline?q="+rs.Receipts[0].ReceiptID)
	mustContain(t, "timeline by receipt", byReceipt, `id="intent-fingerprint">`+fp, "receipt "+rs.Receipts[0].ReceiptID)
	code, page = f.get(t, "/timeline?q=sha256:nonsense")
	if code != http.StatusBadRequest || !strings.Contains(page, `class="error"`) {
		t.Errorf("a bad name: %d", code)
	}
	code, _ = f.get(t, "/timeline?q=frontdesk/never")
	if code != http.StatusNotFound {
		t.Errorf("an unknown proposal: %d", code)
	}

	window := searchWindow()
	_, page = f.get(t, "/search?what=outcomes&kind=RECONCILIATION_REQUIRED&code=RECONCILE_EXHAUSTED"+window)
	mustContain(t, "outcome search", page, `1 found in`, "frontdesk/prop-stuck")
	_, page = f.get(t, "/search?what=outcomes&host=frontdesk&kind=NEEDS_APPROVAL"+window)
	mustContain(t, "outcome search by host", page, `1 found in`, "frontdesk/prop-wait")
	_, page = f.get(t, "/search?what=outcomes&host=otherhost"+window)
	mustContain(t, "outcome search of another host", page, `0 found in 0`)
	_, page = f.get(t, "/search?what=incidents&phase=dispatch&code=ADAPTER_TIMEOUT"+window)
	mustContain(t, "incident search", page, `1 found in 1 message`)
	_, page = f.get(t, "/search?what=outcomes&limit=1"+window)
	mustContain(t, "a search that stops at its limit", page, `1 found in 1 message`, `id="search-next"`)
	code, _ = f.get(t, "/search?kind=MAYBE")
	if code != http.StatusBadRequest {
		t.Errorf("a search for an unknown kind: %d", code)
	}

	// The live part alone, for the page's script.
	_, frag := f.get(t, "/indeterminate?fragment=1")
	if strings.Contains(frag, "<html") || !strings.Contains(frag, `data-fingerprint="`+fp+`"`) {
		t.Errorf("fragment:\n%s", frag)
	}
	res, err := f.web.Get(f.base + "/static/console.js")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/javascript") {
		t.Errorf("script: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
}

// TestResolveForm: the resolve form settles an exhausted action through
// the signed operator API, naming the operator (as `processor reconcile
// resolve` does): every proposal gets the outcome, the action leaves the
// queue, and its timeline ends with the resolution. A post without the
// form's CSRF token, with another browser's, or from another origin
// changes nothing.
func TestResolveForm(t *testing.T) {
	f := newFixture(t)
	fp := f.stuck(t, "prop-a", 20)
	_, page := f.get(t, "/indeterminate")
	tok := token(t, page)
	form := url.Values{"fingerprint": {fp}, "effect": {"absent"}, "evidence": {"ticket:OPS-42"}}

	refused := []struct {
		name string
		form url.Values
		hdr  http.Header
	}{
		{"no token", form, nil},
		{"a made-up token", with(form, "csrf", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"), nil},
		{"another origin", with(form, "csrf", tok), http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://evil.example"}}},
	}
	for _, c := range refused {
		res, body := f.post(t, "/indeterminate/resolve", c.form, c.hdr)
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d %s", c.name, res.StatusCode, body)
		}
	}
	// Another browser (its own CSRF cookie) cannot use this one's token.
	other := *f
	jar, _ := cookiejar.New(nil)
	other.web = &http.Client{Jar: jar, CheckRedirect: f.web.CheckRedirect}
	other.get(t, "/")
	if res, _ := other.post(t, "/indeterminate/resolve", with(form, "csrf", tok), nil); res.StatusCode != http.StatusForbidden {
		t.Errorf("another browser's token: %d", res.StatusCode)
	}
	f.env.Quiesce(t)
	if l, err := f.env.Admin().List(context.Background()); err != nil || len(l.Actions) != 1 {
		t.Fatalf("after refused posts: %+v %v", l, err)
	}

	res, body := f.post(t, "/indeterminate/resolve", with(with(form, "csrf", tok), "evidence", "no colon"), nil)
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "evidence") {
		t.Errorf("bad evidence: %d", res.StatusCode)
	}
	// The form names the receipt the page showed: a finding about another
	// receipt than the latest (a redispatch since) is refused.
	if !strings.Contains(page, `name="receipt" value="rcpt_`) {
		t.Fatalf("the form does not name the receipt shown:\n%s", page)
	}
	res, body = f.post(t, "/indeterminate/resolve", with(with(form, "csrf", tok), "receipt", "rcpt_"+strings.Repeat("0", 32)), nil)
	if res.StatusCode != http.StatusConflict || !strings.Contains(body, "not_indeterminate") {
		t.Errorf("a finding about another receipt: %d", res.StatusCode)
	}
	res, _ = f.post(t, "/indeterminate/resolve", with(form, "csrf", tok), nil)
	loc := res.Header.Get("Location")
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/timeline?q="+fp+"&resolved=rcpt_") {
		t.Fatalf("resolve: %d %q", res.StatusCode, loc)
	}
	o := f.env.Recorder.Wait(t, "prop-a", testenv.Kind(schema.KindRejected))
	if o.Receipt.ErrorCode != string(schema.CodeOperatorResolved) || o.Receipt.Reconciliation.Operator != testenv.OperatorName ||
		o.Receipt.EvidenceRefs[0] != "ticket:OPS-42" || !o.Terminal {
		t.Errorf("the resolution's outcome: %+v", o)
	}
	_, page = f.get(t, loc)
	mustContain(t, "timeline after resolving", page, "Resolved by "+testenv.OperatorName+": effect absent (REJECTED)", "rejected — resolved by operator "+testenv.OperatorName)
	entries := strings.Split(page, `<li class="entry`)
	newest := entries[1] // newest first
	mustContain(t, "the timeline's newest entry", newest, "REJECTED", o.Receipt.ReceiptID, "resolved by operator "+testenv.OperatorName)
	_, oldest := f.get(t, loc+"&order=oldest")
	entries = strings.Split(oldest, `<li class="entry`)
	mustContain(t, "the timeline's last entry, oldest first", entries[len(entries)-1], "REJECTED", o.Receipt.ReceiptID)
	if strings.Contains(page, `id="settle"`) {
		t.Error("a settled intent's timeline offers the resolve form")
	}
	mustContain(t, "the timeline", page, "OPERATOR_RESOLVED", "ticket:OPS-42")
	_, page = f.get(t, "/indeterminate")
	if strings.Contains(page, `data-fingerprint="`+fp+`"`) || !strings.Contains(page, "No indeterminate actions.") {
		t.Errorf("the action is still queued:\n%s", page)
	}

	// Resolving it again: the processor's refusal, shown with the queue.
	res, body = f.post(t, "/indeterminate/resolve", with(form, "csrf", tok), nil)
	if res.StatusCode != http.StatusConflict || !strings.Contains(body, "not_indeterminate") {
		t.Errorf("resolve again: %d", res.StatusCode)
	}
}

// searchWindow is a search window around now: streams stamp messages
// with the server's clock, not the processor's manual one.
func searchWindow() string {
	now := time.Now().UTC()
	return "&from=" + now.Add(-time.Hour).Format("2006-01-02T15:04") + "&until=" + now.Add(time.Hour).Format("2006-01-02T15:04")
}

func with(v url.Values, k, s string) url.Values {
	out := url.Values{}
	for key, vals := range v {
		out[key] = append([]string(nil), vals...)
	}
	out.Set(k, s)
	return out
}

// TestDoors: the security headers on every response; a loopback console
// answers only to its own address (DNS rebinding); with a token, nothing
// but the login form without a session, wrong tokens refused and rate
// limited, and logging out ends the session.
func TestDoors(t *testing.T) {
	const tok = "0123456789abcdef0123456789abcdef-token"
	f := newFixture(t, func(c *console.Config) { c.Token = tok })
	for _, path := range []string{"/", "/login", "/static/console.css", "/nothing"} {
		res, err := f.web.Get(f.base + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		h := res.Header
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") ||
			!strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s: CSP %q", path, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s: headers %v", path, h)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, f.base+"/login", nil)
	req.Host = "attacker.example:80"
	if res, err := f.web.Do(req); err != nil || res.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("a rebound Host: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(f.base, "http://"))
	req, _ = http.NewRequest(http.MethodGet, f.base+"/login", nil)
	req.Host = "localhost:" + port
	if res, err := f.web.Do(req); err != nil || res.StatusCode != http.StatusOK {
		t.Errorf("localhost: %v %v", res, err)
	} else {
		res.Body.Close()
	}

	for _, path := range []string{"/", "/indeterminate", "/timeline?q=x"} {
		res, err := f.web.Get(f.base + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/login" {
			t.Errorf("%s without a session: %d %s", path, res.StatusCode, res.Header.Get("Location"))
		}
	}
	for _, path := range []string{"/indeterminate?fragment=1", "/events"} {
		if code, _ := f.get(t, path); code != http.StatusUnauthorized {
			t.Errorf("%s without a session: %d", path, code)
		}
	}
	if res, _ := f.post(t, "/indeterminate/resolve", url.Values{}, nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a post without a session: %d", res.StatusCode)
	}
	_, page := f.get(t, "/login")
	login := token(t, page)
	if res, _ := f.post(t, "/login", url.Values{"token": {tok}}, nil); res.StatusCode != http.StatusForbidden {
		t.Errorf("a login without the form's CSRF token: %d", res.StatusCode)
	}
	if res, _ := f.post(t, "/login", url.Values{"token": {"wrong"}, "csrf": {login}}, nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d", res.StatusCode)
	}
	res, _ := f.post(t, "/login", url.Values{"token": {tok}, "csrf": {login}}, nil)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", res.StatusCode)
	}
	code, page := f.get(t, "/")
	if code != http.StatusOK || !strings.Contains(page, "Log out") {
		t.Fatalf("after login: %d", code)
	}
	// The session's forms carry a token bound to it.
	res, _ = f.post(t, "/logout", url.Values{"csrf": {token(t, page)}}, nil)
	if res.StatusCode != http.StatusSeeOther {
		t.Errorf("logout: %d", res.StatusCode)
	}
	if res, err := f.web.Get(f.base + "/"); err != nil || res.StatusCode != http.StatusSeeOther {
		t.Errorf("after logout: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	// Guessing is rate limited: after ten failures a minute, even the
	// right token waits.
	_, page = f.get(t, "/login")
	login = token(t, page)
	for range 10 {
		f.post(t, "/login", url.Values{"token": {"guess"}, "csrf": {login}}, nil)
	}
	if res, _ := f.post(t, "/login", url.Values{"token": {tok}, "csrf": {login}}, nil); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("after ten failures: %d", res.StatusCode)
	}
}

// TestValueFree: payloads, candidate attributes and actor ids planted in
// proposals appear on no page the console serves.
func TestValueFree(t *testing.T) {
	f := newFixture(t)
	secrets := []string{"SECRET-PAYLOAD-7731", "SECRET-ATTRIBUTE-5520", "actor:SECRET-ACTOR-1187"}
	m := testenv.Lumber("prop-secret")
	testenv.Set(m, "intent.payload", map[string]any{"quantity": 3, "note": secrets[0]})
	testenv.Set(m, "grounding.candidates", []any{map[string]any{"referent": "sku-1001", "source": "authoritative",
		"attributes": map[string]any{"resource": "Lumber: Cedar-8ft-GradeA", "color": secrets[1]}, "evidence_refs": []string{}}})
	testenv.Set(m, "context.actor.actor_ref", secrets[2])
	f.env.PublishSigned(t, m, f.env.Host) // parked for approval
	f.env.Recorder.Wait(t, "prop-secret", testenv.Kind(schema.KindNeedsApproval))
	fp := f.stuck(t, "prop-stuck", 20)
	window := searchWindow()
	for _, path := range []string{"/", "/indeterminate", "/approvals", "/timeline?q=frontdesk/prop-secret", "/timeline?q=" + fp,
		"/search?what=outcomes" + window, "/search?what=incidents" + window} {
		code, page := f.get(t, path)
		if code != http.StatusOK {
			t.Errorf("%s: %d", path, code)
		}
		for _, s := range secrets {
			if strings.Contains(page, s) {
				t.Errorf("%s shows %q", path, s)
			}
		}
	}
}

// TestEvents: the event stream tells an open page that an outcome and an
// incident event arrived.
func TestEvents(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.base+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	res, err := f.web.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); res.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("events: %d %s", res.StatusCode, ct)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	m := testenv.Lumber("prop-x")
	testenv.Set(m, "grounding.scope", "security-domain:elsewhere") // DENIED: an outcome and an incident event
	f.env.PublishSigned(t, m, f.env.Host)
	seen := map[string]bool{}
	timeout := time.After(testenv.WaitTimeout)
	for !seen["event: outcome"] || !seen["event: incident"] {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the event stream ended")
			}
			seen[l] = true
			if strings.HasPrefix(l, "data: ") && strings.Contains(l, "security-domain") {
				t.Errorf("an event carries a value: %s", l)
			}
		case <-timeout:
			t.Fatalf("events seen: %v", seen)
		}
	}
}

// TestUnsignedRefused: a console without a key, beside a processor that
// does not accept unsigned requests, says what to do instead of showing
// empty pages.
func TestUnsignedRefused(t *testing.T) {
	f := newFixture(t, func(c *console.Config) {
		c.Admin = &admin.Client{NC: c.Admin.NC, Subjects: c.Admin.Subjects, Now: c.Admin.Now}
	})
	code, page := f.get(t, "/indeterminate")
	if code != http.StatusBadGateway || !strings.Contains(page, "--nkey") {
		t.Errorf("unsigned: %d\n%s", code, page)
	}
}

// TestDevConsole: `processor console --dev` beside `processor run --dev`:
// unsigned requests to a processor that accepts them; a resolution is an
// unnamed operator's, as `processor reconcile resolve` without a key.
func TestDevConsole(t *testing.T) {
	clock := stages.NewManualClock(time.UnixMilli(1_764_424_800_000))
	env := testenv.New(t, testenv.WithClock(clock), testenv.WithConfig(func(c *config.Config) {
		c.Admission.AllowUnsigned = true
		c.Reconciliation.Interval = 5 * time.Second
		c.Reconciliation.MaxAttempts = 2
	}))
	env.Fakes["demo"].OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{}, adapters.ErrTimeout
	})
	f := &fixture{env: env, clock: clock}
	f.serve(t, console.Config{Admin: &admin.Client{NC: env.NC, Subjects: env.Subjects, Now: clock.Now}, Now: clock.Now, Log: slog.New(slog.DiscardHandler), Open: true})
	m := testenv.Granted(t, testenv.Lumber("prop-dev"), "sku-1001", clock.Now())
	env.Publish(t, m)
	env.Recorder.Wait(t, "prop-dev", testenv.Kind(schema.KindReconciliationRequired))
	fp := testenv.FingerprintOf(t, m, "sku-1001")
	code, page := f.get(t, "/indeterminate")
	if code != http.StatusOK || !strings.Contains(page, `data-fingerprint="`+fp+`"`) || !strings.Contains(page, "unsigned requests (--dev)") {
		t.Fatalf("queue: %d\n%s", code, page)
	}
	res, _ := f.post(t, "/indeterminate/resolve", url.Values{"csrf": {token(t, page)}, "fingerprint": {fp}, "effect": {"present"}, "evidence": {"ticket:DEV-1"}}, nil)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("resolve: %d", res.StatusCode)
	}
	o := env.Recorder.Wait(t, "prop-dev", testenv.Kind(schema.KindConfirmed))
	if o.Receipt.Reconciliation.Operator != "" {
		t.Errorf("an unsigned resolution names %q", o.Receipt.Reconciliation.Operator)
	}
	_, page = f.get(t, res.Header.Get("Location"))
	mustContain(t, "timeline", page, "Resolved by an unnamed operator (unsigned request): effect present (CONFIRMED)")
}
