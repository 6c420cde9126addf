package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/schema"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// pageTimeout bounds what one page asks of the processor and the streams.
const pageTimeout = 15 * time.Second

// pages renders the console's pages from the embedded templates.
type pages struct {
	c     *Console
	tmpl  map[string]*template.Template
	files http.Handler
}

// view is what every page's template gets.
type view struct {
	Title, Page string
	CSRF        string
	// Signer is who the console acts as (the operator block's name once
	// the processor has told it), SignerKey that operator's public key.
	Signer, SignerKey string
	Unsigned          bool
	LoggedIn          bool
	Error             string
	Flash             string
	Now               time.Time
	Data              any
}

var pageNames = []string{"overview", "indeterminate", "approvals", "timeline", "search", "login"}

func newPages(c *Console) (*pages, error) {
	p := &pages{c: c, tmpl: map[string]*template.Template{}}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", name, err)
		}
		p.tmpl[name] = t
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	p.files = http.StripPrefix("/static/", http.FileServerFS(static))
	return p, nil
}

func (p *pages) mux() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", p.overview)
	m.HandleFunc("GET /indeterminate", p.indeterminate)
	m.HandleFunc("POST /indeterminate/resolve", p.resolve)
	m.HandleFunc("GET /approvals", p.approvals)
	m.HandleFunc("GET /timeline", p.timeline)
	m.HandleFunc("GET /search", p.search)
	m.HandleFunc("GET /events", p.c.live.serveEvents)
	m.HandleFunc("GET /login", p.loginForm)
	m.HandleFunc("POST /login", p.login)
	m.HandleFunc("POST /logout", p.logout)
	m.Handle("GET /static/", p.files)
	return m
}

// render writes a page, or with ?fragment=1 only its live part.
func (p *pages) render(w http.ResponseWriter, r *http.Request, status int, name string, v view) {
	v.Page = name
	v.CSRF = csrfOf(r)
	v.Now = p.c.cfg.Now()
	v.LoggedIn = sessionOf(r) != ""
	v.Unsigned = p.c.cfg.Admin.Key == nil
	v.Signer = "unsigned requests (--dev)"
	if k := p.c.cfg.Admin.Key; k != nil {
		if pub, err := k.PublicKey(); err == nil {
			v.SignerKey = pub
			v.Signer = "signing as operator " + pub[:6] + "…" + pub[len(pub)-4:]
			if name := p.c.operatorName(r.Context()); name != "" {
				v.Signer = "operator " + name
			}
		}
	}
	block := "layout"
	if r.URL.Query().Get("fragment") != "" {
		block = "live"
	}
	var buf bytes.Buffer
	if err := p.tmpl[name].ExecuteTemplate(&buf, block, v); err != nil {
		p.c.log.Error("console: render", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// problem turns a failure into a page status and a value-free message.
func (p *pages) problem(err error) (int, string) {
	var ue *userError
	var ae *admin.Error
	switch {
	case errors.As(err, &ue):
		return http.StatusBadRequest, ue.msg
	case errors.Is(err, admin.ErrNoProcessor):
		return http.StatusBadGateway, "No processor answers on " + p.c.subj.Admins() + ": is one running with this prefix on this NATS server?"
	case errors.Is(err, admin.ErrUnauthenticated):
		return http.StatusBadGateway, "The processor refused the console's request (unauthenticated): start the console with --nkey FILE, the seed of a key in one of the processor's operator blocks."
	case errors.Is(err, admin.ErrStale):
		return http.StatusBadGateway, "The processor refused the console's request as stale: is this machine's clock within a minute of the processor's?"
	case errors.As(err, &ae):
		code := http.StatusBadGateway
		switch ae.Code {
		case admin.CodeNotFound:
			code = http.StatusNotFound
		case admin.CodeBadRequest:
			code = http.StatusBadRequest
		case admin.CodeNotIndeterminate:
			code = http.StatusConflict
		}
		return code, "The processor answered: " + ae.Message + " (" + ae.Code + ")"
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "The processor or the NATS server did not answer in time."
	}
	p.c.log.Warn("console: request failed", "err", err)
	return http.StatusBadGateway, "Reading from NATS failed; see the console's log."
}

func (p *pages) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), pageTimeout)
}

// overviewData is the overview page's.
type overviewData struct {
	Overview  *overview
	Incidents []schema.IncidentEvent
}

func (p *pages) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := p.ctx(r)
	defer cancel()
	v := view{Title: "Overview"}
	d := overviewData{Incidents: p.c.live.recent()}
	status := http.StatusOK
	o, err := p.c.stats.overview(ctx)
	if err != nil {
		status, v.Error = p.problem(err)
	}
	d.Overview = o
	v.Data = d
	p.render(w, r, status, "overview", v)
}

func (p *pages) indeterminate(w http.ResponseWriter, r *http.Request) {
	p.queue(w, r, http.StatusOK, "", "")
}

// queue renders the indeterminate queue, with a message after a refused
// resolution.
func (p *pages) queue(w http.ResponseWriter, r *http.Request, status int, msg, failed string) {
	ctx, cancel := p.ctx(r)
	defer cancel()
	v := view{Title: "Indeterminate actions", Error: msg}
	l, err := p.c.cfg.Admin.List(ctx)
	if err != nil {
		status, v.Error = p.problem(err)
	}
	v.Data = struct {
		List   *admin.List
		Failed string
	}{l, failed}
	p.render(w, r, status, "indeterminate", v)
}

// resolve is the resolve form's POST: the request is signed with the
// console's operator key, so the receipt and the activity record name
// the operator, exactly as `processor reconcile resolve --receipt` does.
func (p *pages) resolve(w http.ResponseWriter, r *http.Request) {
	fp, ok := admin.NormalizeFingerprint(r.PostFormValue("fingerprint"))
	effect, evidence := r.PostFormValue("effect"), strings.TrimSpace(r.PostFormValue("evidence"))
	switch {
	case !ok:
		p.queue(w, r, http.StatusBadRequest, "The form names no fingerprint.", "")
		return
	case effect != admin.EffectPresent && effect != admin.EffectAbsent:
		p.queue(w, r, http.StatusBadRequest, "Choose whether the effect is present or absent.", fp)
		return
	case !schema.ValidEvidenceRef(evidence):
		p.queue(w, r, http.StatusBadRequest, "The evidence must be one line of at most 512 characters containing ':' (e.g. ticket:OPS-1234).", fp)
		return
	}
	ctx, cancel := p.ctx(r)
	defer cancel()
	// The receipt the page showed: the finding settles that one only, and
	// is refused if a redispatch has made another the latest since.
	checks := admin.ResolveChecks{ReceiptID: r.PostFormValue("receipt")}
	res, err := p.c.cfg.Admin.ResolveChecked(ctx, admin.Target{Fingerprint: fp}, effect == admin.EffectPresent, evidence, checks)
	if err != nil {
		status, msg := p.problem(err)
		p.queue(w, r, status, msg, fp)
		return
	}
	p.c.log.Info("console: resolved", "session", sessionLogOf(r), "fingerprint", fp, "outcome", res.OutcomeKind, "receipt", res.Receipt.ReceiptID)
	http.Redirect(w, r, "/timeline?q="+fp+"&resolved="+res.Receipt.ReceiptID, http.StatusSeeOther)
}

// approvalRow is one parked proposal with what its NEEDS_APPROVAL outcome
// says (the processor does not store summaries).
type approvalRow struct {
	admin.ParkedApproval
	Summary string
	Spend   *schema.Spend
}

func (p *pages) approvals(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := p.ctx(r)
	defer cancel()
	v := view{Title: "Pending approvals"}
	status := http.StatusOK
	var rows []approvalRow
	a, err := p.c.cfg.Admin.Approvals(ctx, admin.DefaultApprovalsLimit)
	if err != nil {
		status, v.Error = p.problem(err)
	} else {
		for _, pa := range a.Approvals {
			row := approvalRow{ParkedApproval: pa}
			o, found, err := p.c.lastOutcome(ctx, schema.ProposalRef{Host: pa.Host, ProposalID: pa.ProposalID})
			if err == nil && found && o.Approval != nil {
				row.Summary, row.Spend = o.Approval.Summary, o.Approval.ExternalSpend
			}
			rows = append(rows, row)
		}
	}
	v.Data = struct {
		Approvals *admin.Approvals
		Rows      []approvalRow
	}{a, rows}
	p.render(w, r, status, "approvals", v)
}

// timelineData is the timeline page's.
type timelineData struct {
	Query    string
	Timeline *timeline
	// Resolved is the resolution just recorded (after the resolve form).
	Resolved *schema.Receipt
}

func (p *pages) timeline(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query().Get("q")
	v := view{Title: "Timeline"}
	d := timelineData{Query: q}
	status := http.StatusOK
	if strings.TrimSpace(q) != "" {
		ctx, cancel := p.ctx(r)
		defer cancel()
		tl, err := p.c.timeline(ctx, q)
		if err != nil {
			status, v.Error = p.problem(err)
		}
		if tl != nil {
			tl.order(r.URL.Query().Get("order") == orderOldest)
		}
		d.Timeline = tl
		if id := r.URL.Query().Get("resolved"); tl != nil && tl.Receipts != nil && id != "" {
			for i := range tl.Receipts.Receipts {
				if rc := &tl.Receipts.Receipts[i]; rc.ReceiptID == id {
					d.Resolved = rc
					v.Flash = fmt.Sprintf("Resolved by %s: effect %s, receipt %s; every proposal of the intent gets the outcome.",
						operatorOf(rc), effectOf(rc), rc.ReceiptID)
				}
			}
		}
	}
	v.Data = d
	p.render(w, r, status, "timeline", v)
}

// Orders of the timeline and of search results: newest first unless
// ?order=oldest.
const (
	orderNewest = "newest"
	orderOldest = "oldest"
)

// operatorName is the configured name of the operator block whose key
// the console signs with, as the processor answers it (status.get), ""
// until it has: asked at most every few seconds until known, then kept.
func (c *Console) operatorName(ctx context.Context) string {
	c.who.Lock()
	defer c.who.Unlock()
	if c.who.name != "" || (!c.who.asked.IsZero() && time.Since(c.who.asked) < 5*time.Second) {
		return c.who.name
	}
	c.who.asked = time.Now()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if st, err := c.cfg.Admin.Status(ctx); err == nil {
		c.who.name = st.Operator
	}
	return c.who.name
}

func effectOf(r *schema.Receipt) string {
	if r.Status == schema.StatusConfirmed {
		return "present (CONFIRMED)"
	}
	return "absent (REJECTED)"
}

// searchData is the search page's.
type searchData struct {
	Query   searchQuery
	Asked   bool
	Result  *searchResult
	NextURL string
	// ToggleURL is the same search in the other order.
	ToggleURL string
	Kinds     []schema.Kind
	Codes     []schema.Code
	Phases    []schema.Phase
}

func (p *pages) search(w http.ResponseWriter, r *http.Request) {
	v := view{Title: "Search"}
	// Streams stamp messages with the server's clock: the window is wall time.
	q, problems := parseSearch(r.URL.Query(), time.Now())
	d := searchData{Query: q, Asked: len(r.URL.Query()) > 0, Kinds: schema.Kinds(), Codes: codeNames(), Phases: schema.Phases()}
	status := http.StatusOK
	switch {
	case len(problems) > 0:
		status, v.Error = http.StatusBadRequest, strings.Join(problems, "; ")
	case d.Asked:
		ctx, cancel := p.ctx(r)
		defer cancel()
		res, err := p.c.search(ctx, q)
		if err != nil {
			status, v.Error = p.problem(err)
		}
		d.Result = res
		if res != nil && res.Next > 0 {
			d.NextURL = q.next(res)
		}
		d.ToggleURL = q.toggled()
	}
	v.Data = d
	p.render(w, r, status, "search", v)
}

// loginForm is the login page; with ?token= (the URL the command prints)
// it logs in at once, and leaves the token out of the address bar.
func (p *pages) loginForm(w http.ResponseWriter, r *http.Request) {
	if tok := r.URL.Query().Get("token"); tok != "" && p.c.guard.token != nil {
		p.loginWith(w, r, tok)
		return
	}
	if p.c.guard.token == nil || sessionOf(r) != "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	p.render(w, r, http.StatusOK, "login", view{Title: "Log in"})
}

func (p *pages) login(w http.ResponseWriter, r *http.Request) {
	if p.c.guard.token == nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	p.loginWith(w, r, r.PostFormValue("token"))
}

func (p *pages) loginWith(w http.ResponseWriter, r *http.Request, token string) {
	switch p.c.guard.login(w, r, token) {
	case loginOK:
		http.Redirect(w, r, "/", http.StatusSeeOther)
	case loginLimited:
		p.render(w, r, http.StatusTooManyRequests, "login", view{Title: "Log in", Error: "Too many failed logins from here; wait a minute."})
	default:
		p.render(w, r, http.StatusUnauthorized, "login", view{Title: "Log in", Error: "Wrong token."})
	}
}

func (p *pages) logout(w http.ResponseWriter, r *http.Request) {
	p.c.guard.logout(w, sessionOf(r))
	target := "/"
	if p.c.guard.token != nil {
		target = "/login"
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}
