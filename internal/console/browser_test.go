package console_test

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// The browser tests drive the console in headless Chromium (Debian's
// `chromium`; .ci/run installs it) with chromedp, against a real processor
// (testenv), the way an operator would: pages, the live refresh, the
// resolve form. They skip when no Chromium is installed. Each view's
// screenshot is written into $PORTCULLIS_CONSOLE_SCREENSHOTS when it is
// set, else to the test's artifact directory (kept with `go test
// -artifacts`). docs/operators.md shows TestBrowserDemo's (the others'
// names begin with browser- and layout-), regenerated with
//
//	PORTCULLIS_CONSOLE_SCREENSHOTS=$PWD/docs/console go test ./internal/console -run '^TestBrowserDemo$'`

// EnvChromium names the browser binary; else chromium, chromium-browser
// or google-chrome on PATH.
const EnvChromium = "PORTCULLIS_CHROMIUM"

// EnvRequireChromium set to 1 (as .ci/run does) makes a missing browser a
// failure instead of a skip.
const EnvRequireChromium = "PORTCULLIS_REQUIRE_CHROMIUM"

// EnvScreenshots is where the tests write their screenshots.
const EnvScreenshots = "PORTCULLIS_CONSOLE_SCREENSHOTS"

// chromium finds the browser or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(EnvChromium); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(EnvRequireChromium) == "1" {
		t.Fatal("no Chromium, and " + EnvRequireChromium + "=1: install it (apt-get install chromium) or set " + EnvChromium)
	}
	t.Skip("no Chromium: the browser tests need it (apt-get install chromium, or set " + EnvChromium + "); .ci/run installs it")
	return ""
}

// browser starts headless Chromium with a fresh profile and returns a tab's
// context; the browser stops when the test ends.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// do runs browser steps, bounded by testenv.WaitTimeout.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, testenv.WaitTimeout)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// run runs one browser action that returns a value.
func run[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, testenv.WaitTimeout)
	defer cancel()
	v, err := chromedp.Run(c, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// screenshots is where a test writes its screenshots (the tests name
// theirs apart).
func screenshots(t *testing.T) string {
	t.Helper()
	if d := os.Getenv(EnvScreenshots); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.ArtifactDir()
}

// shot writes a PNG of the whole page as dir/name.png, in the page's 256
// most frequent colours (a third of the size; the README shows them).
func shot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	raw := run(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	var out bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(&out, paletted(img)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// paletted maps an image onto its 256 most frequent colours: a UI has
// few, and the rest are the edges of anti-aliased text.
func paletted(img image.Image) *image.Paletted {
	b := img.Bounds()
	counts := map[color.RGBA]int{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			counts[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)]++
		}
	}
	colors := make([]color.RGBA, 0, len(counts))
	for c := range counts {
		colors = append(colors, c)
	}
	slices.SortFunc(colors, func(a, c color.RGBA) int {
		if n := counts[c] - counts[a]; n != 0 {
			return n
		}
		return int(a.R) - int(c.R) + 256*(int(a.G)-int(c.G)) + 65536*(int(a.B)-int(c.B))
	})
	pal := make(color.Palette, 0, 256)
	for _, c := range colors[:min(256, len(colors))] {
		pal = append(pal, c)
	}
	p := image.NewPaletted(b, pal)
	draw.Draw(p, b, img, b.Min, draw.Src)
	return p
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return run(t, ctx, "text of "+sel, chromedp.Text(chromedp.CSS(sel)))
}

// TestBrowser: an operator's round in a real browser against a processor
// — the overview counts a stuck (exhausted) action; the queue shows it;
// resolving it through the form ends it as `processor reconcile resolve`
// does (every proposal gets the outcome, the receipt names the operator),
// it leaves the queue, and its timeline ends with the resolution; a
// pending approval appears on the open approvals page and leaves it when
// granted, without a reload; a post without the form's CSRF token is
// refused, by the form and by a script, and changes nothing.
func TestBrowser(t *testing.T) {
	chromium(t)
	f := newFixture(t)
	fpA := f.stuck(t, "prop-a", 20)
	fpB := f.stuck(t, "prop-b", 30)
	dir := screenshots(t)
	ctx := browser(t)

	// The overview, once its script has refreshed it (so the page runs
	// its script under the Content-Security-Policy, and throughput has two
	// samples).
	do(t, ctx, "overview", chromedp.Navigate(f.base+"/"), chromedp.WaitVisible(chromedp.ID("count-indeterminate")))
	if s := text(t, ctx, "#count-indeterminate"); !strings.Contains(s, "2") {
		t.Errorf("overview: %q", s)
	}
	do(t, ctx, "the overview's live refresh", chromedp.WaitVisible(chromedp.CSS(`#live[data-refreshed]`)))
	if s := text(t, ctx, "#live-state"); s != "live" {
		t.Errorf("live state %q", s)
	}
	shot(t, ctx, dir, "browser-overview")

	// The queue, and the resolve form.
	rowA := `tr[data-fingerprint="` + fpA + `"]`
	rowB := `tr[data-fingerprint="` + fpB + `"]`
	do(t, ctx, "queue", chromedp.Navigate(f.base+"/indeterminate"), chromedp.WaitVisible(chromedp.CSS(rowA)), chromedp.WaitVisible(chromedp.CSS(rowB)))
	shot(t, ctx, dir, "browser-indeterminate")
	do(t, ctx, "resolve A",
		chromedp.Click(chromedp.CSS(rowA+` input[value="absent"]`)),
		chromedp.SendKeys(chromedp.CSS(rowA+` input[name="evidence"]`), "ticket:OPS-42"),
		chromedp.Click(chromedp.CSS(rowA+` button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(".flash")),
	)
	if s := text(t, ctx, ".flash"); !strings.Contains(s, "Resolved by "+testenv.OperatorName) || !strings.Contains(s, "REJECTED") {
		t.Errorf("flash %q", s)
	}
	last := text(t, ctx, "#timeline li:first-child") // newest first
	if !strings.Contains(last, "REJECTED") || !strings.Contains(last, "resolved by operator "+testenv.OperatorName) {
		t.Errorf("the timeline's newest entry is %q", last)
	}
	shot(t, ctx, dir, "browser-timeline")
	o := f.env.Recorder.Wait(t, "prop-a", testenv.Kind(schema.KindRejected))
	if o.Receipt.Reconciliation.Operator != testenv.OperatorName || o.Receipt.ErrorCode != string(schema.CodeOperatorResolved) || o.Receipt.EvidenceRefs[0] != "ticket:OPS-42" {
		t.Errorf("the resolution: %+v", o.Receipt)
	}
	do(t, ctx, "queue after resolving", chromedp.Navigate(f.base+"/indeterminate"), chromedp.WaitVisible(chromedp.CSS(rowB)),
		chromedp.WaitNotPresent(chromedp.CSS(rowA)))

	// A form without its CSRF token, and a script's post: refused.
	status := run(t, ctx, "a script's post", chromedp.Evaluate[int](`fetch('/indeterminate/resolve', {method: 'POST',
		headers: {'Content-Type': 'application/x-www-form-urlencoded'},
		body: 'fingerprint=`+fpB+`&effect=absent&evidence=ticket:FORGED-1'}).then(r => r.status)`, chromedp.EvalAwaitPromise))
	if status != 403 {
		t.Errorf("a script's post without the token: %d", status)
	}
	run(t, ctx, "a form without its CSRF token", chromedp.Evaluate[bool](`(() => {
			const f = document.querySelector('`+rowB+` form');
			f.querySelector('input[name="csrf"]').remove();
			f.querySelector('input[value="absent"]').checked = true;
			f.querySelector('input[name="evidence"]').value = 'ticket:FORGED-2';
			f.requestSubmit();
			return true;
		})()`))
	do(t, ctx, "the refusal", chromedp.WaitVisible(chromedp.CSS("pre")))
	if s := text(t, ctx, "pre"); !strings.Contains(s, "CSRF token is missing") {
		t.Errorf("the refusal: %q", s)
	}
	shot(t, ctx, dir, "browser-csrf-refused")
	f.env.Quiesce(t)
	if l, err := f.env.Admin().List(context.Background()); err != nil || len(l.Actions) != 1 || l.Actions[0].Fingerprint != fpB {
		t.Errorf("after the refused posts: %+v %v", l, err)
	}

	// A pending approval appears on the open page and leaves it.
	f.env.Fakes["demo"].OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed}, nil
	})
	row := `tr[data-proposal="frontdesk/prop-wait"]`
	do(t, ctx, "approvals", chromedp.Navigate(f.base+"/approvals"), chromedp.WaitVisible(chromedp.ID("approvals-count")))
	if s := text(t, ctx, "#approvals-count"); s != "0 pending" {
		t.Errorf("approvals before: %q", s)
	}
	wait := testenv.Lumber("prop-wait")
	testenv.Set(wait, "intent.payload", map[string]any{"quantity": 50}) // another intent than prop-a's
	f.env.PublishSigned(t, wait, f.env.Host)
	do(t, ctx, "the approval appears", chromedp.WaitVisible(chromedp.CSS(row)))
	if s := text(t, ctx, row); !strings.Contains(s, "Add 20 boards of cedar 8ft grade A") {
		t.Errorf("the approval's row: %q", s)
	}
	shot(t, ctx, dir, "browser-approvals")
	g := testenv.Grant(testenv.FingerprintOf(t, wait, "sku-1001"), f.clock.Now(), nil)
	g["proposal_id"] = "prop-wait"
	f.env.PublishGrant(t, g, f.env.Host)
	f.env.Recorder.Wait(t, "prop-wait", testenv.Kind(schema.KindConfirmed))
	do(t, ctx, "the approval leaves", chromedp.WaitNotPresent(chromedp.CSS(row)))
	if s := text(t, ctx, "#approvals-count"); s != "0 pending" {
		t.Errorf("approvals after: %q", s)
	}

	// Search.
	do(t, ctx, "search", chromedp.Navigate(f.base+"/search?what=outcomes&kind=REJECTED"+searchWindow()), chromedp.WaitVisible(chromedp.ID("search-count")))
	if s := text(t, ctx, "#search-count"); !strings.HasPrefix(s, "1 found") {
		t.Errorf("search: %q", s)
	}
	shot(t, ctx, dir, "browser-search")
	t.Logf("screenshots in %s", dir)
}

// overflow lists what sticks out past the right edge of the window, by
// the elements' own boxes (getBoundingClientRect), not only the page's
// scroll width: "tag#id.class: right edge" for each, at most ten.
const overflow = `(() => {
	const w = document.documentElement.clientWidth;
	const out = [];
	if (document.documentElement.scrollWidth > w) out.push('the page scrolls sideways: ' + document.documentElement.scrollWidth + ' > ' + w);
	for (const el of document.querySelectorAll('body *')) {
		const r = el.getBoundingClientRect();
		if (r.width === 0 && r.height === 0) continue;
		if (r.right > w + 0.5 && out.length < 10) {
			out.push(el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.className && typeof el.className === 'string' ? '.' + el.className.split(' ').join('.') : '') +
				': right ' + Math.round(r.right) + ' > ' + w + ' (' + (el.textContent || '').trim().slice(0, 40) + ')');
		}
	}
	return out;
})()`

// TestBrowserLayout: at 1280 px, with ids as long as they come (a 64
// character proposal id, a 64 character referent, fingerprints and
// receipt ids), no element of any page sticks out of the window (issue
// 34: on the Indeterminate page a long proposal id pushed the resolve
// form's evidence field off the right edge; Search's "until" field
// wrapped onto a line of its own). The header names the operator by its
// block name; an exhausted intent's timeline offers the resolve form and
// the way to the queue; timelines and search show the newest first, with
// a toggle; a repeat of an intent is marked recorded earlier.
func TestBrowserLayout(t *testing.T) {
	chromium(t)
	f := newFixture(t)
	long := strings.Repeat("p", 56) + "-0123456" // 64 characters
	referent := "sku-" + strings.Repeat("7", 60)
	m := testenv.Lumber(long)
	testenv.Set(m, "grounding.candidates", []any{map[string]any{"referent": referent, "source": "authoritative",
		"attributes": map[string]any{"resource": "Lumber: Cedar-8ft-GradeA"}, "evidence_refs": []any{"catalog:12#" + referent}}})
	m = testenv.Granted(t, m, referent, f.clock.Now())
	f.env.PublishSigned(t, m, f.env.Host)
	f.env.Recorder.Wait(t, long, testenv.Kind(schema.KindReconciliationRequired))
	f.clock.Advance(5 * time.Second)
	f.env.Recorder.Wait(t, long, testenv.Count(2))
	f.clock.Advance(10 * time.Second)
	f.env.Recorder.Wait(t, long, testenv.Terminal)
	fp := testenv.FingerprintOf(t, m, referent)
	f.stuck(t, "prop-short", 30)

	// A confirmed intent, and the same intent again under another id.
	f.env.Fakes["demo"].OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed}, nil
	})
	for _, id := range []string{"prop-first", "prop-again"} {
		p := testenv.Set(testenv.Lumber(id), "intent.payload", map[string]any{"quantity": 7})
		f.env.PublishSigned(t, testenv.Granted(t, p, "sku-1001", f.clock.Now()), f.env.Host)
		f.env.Recorder.Wait(t, id, testenv.Terminal)
	}
	wait := testenv.Set(testenv.Lumber(strings.Repeat("w", 64)), "intent.payload", map[string]any{"quantity": 99})
	f.env.PublishSigned(t, wait, f.env.Host)
	f.env.Recorder.Wait(t, strings.Repeat("w", 64), testenv.Kind(schema.KindNeedsApproval))
	f.env.Quiesce(t)

	dir := screenshots(t)
	ctx := browser(t)
	fits := func(name, path, ready string) {
		t.Helper()
		do(t, ctx, name, chromedp.Navigate(f.base+path), chromedp.WaitVisible(chromedp.CSS(ready)))
		if out := run(t, ctx, "bounds of "+name, chromedp.Evaluate[[]string](overflow)); len(out) > 0 {
			t.Errorf("%s at 1280 px: outside the window:\n  %s", name, strings.Join(out, "\n  "))
			shot(t, ctx, dir, "layout-"+name)
		}
	}
	fits("overview", "/", "#count-indeterminate")
	fits("indeterminate", "/indeterminate", `tr[data-fingerprint="`+fp+`"]`)
	fits("approvals", "/approvals", `tr[data-proposal="frontdesk/`+strings.Repeat("w", 64)+`"]`)
	fits("timeline", "/timeline?q="+fp, "#timeline")
	fits("timeline by proposal", "/timeline?q=frontdesk/"+long, "#timeline")
	fits("search", "/search?what=outcomes"+searchWindow(), "#search-count")
	fits("search of incidents", "/search?what=incidents&code=RECONCILE_EXHAUSTED"+searchWindow(), "#search-count")

	// Search's form: from and until on one row, inside the window.
	do(t, ctx, "the search form", chromedp.Navigate(f.base+"/search"), chromedp.WaitVisible(chromedp.CSS(`input[name="until"]`)))
	boxes := run(t, ctx, "the search form's fields", chromedp.Evaluate[[]float64](`['from', 'until'].flatMap(n => { const r = document.querySelector('input[name="' + n + '"]').getBoundingClientRect(); return [r.top, r.right]; })`))
	if len(boxes) != 4 || boxes[0] != boxes[2] || boxes[3] > 1280 {
		t.Errorf("from and until (top, right): %v, want one row inside 1280 px", boxes)
	}

	// The header names the operator by its block, with its key as the title.
	if s := text(t, ctx, "#signer"); s != "operator "+testenv.OperatorName {
		t.Errorf("header: %q, want the operator's block name", s)
	}

	// The exhausted intent's timeline: newest first, the resolve form and
	// the queue's link; oldest first after the toggle.
	do(t, ctx, "the exhausted intent's timeline", chromedp.Navigate(f.base+"/timeline?q="+fp), chromedp.WaitVisible(chromedp.CSS(`#settle form`)))
	if s := text(t, ctx, "#settle"); !strings.Contains(s, "Waiting for an operator") || !strings.Contains(s, "Indeterminate queue") {
		t.Errorf("the settle box: %q", s)
	}
	newest := text(t, ctx, "#timeline li:first-child")
	shot(t, ctx, dir, "layout-timeline-exhausted")
	do(t, ctx, "oldest first", chromedp.Click(chromedp.CSS(`#order a`)), chromedp.WaitVisible(chromedp.CSS(`#settle form`)))
	if oldest := text(t, ctx, "#timeline li:last-child"); oldest != newest || !strings.Contains(newest, "RECONCILE_EXHAUSTED") {
		t.Errorf("newest first %q; the last oldest first %q", newest, text(t, ctx, "#timeline li:last-child"))
	}

	// The repeat: recorded earlier, on its timeline and in search.
	do(t, ctx, "the repeat's timeline", chromedp.Navigate(f.base+"/timeline?q=frontdesk/prop-again"), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	entries := run(t, ctx, "timeline entries", chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#timeline li')).map(li => li.textContent.replace(/\s+/g, ' '))`))
	marked := map[string]bool{}
	for _, e := range entries {
		if strings.Contains(e, "→ CONFIRMED") {
			marked[map[bool]string{true: "again", false: "first"}[strings.Contains(e, "prop-again")]] = strings.Contains(e, "recorded earlier")
		}
	}
	if !marked["again"] || marked["first"] {
		t.Errorf("recorded earlier on the timeline: %v\n%s", marked, strings.Join(entries, "\n"))
	}
	do(t, ctx, "search, newest first", chromedp.Navigate(f.base+"/search?what=outcomes&kind=CONFIRMED"+searchWindow()), chromedp.WaitVisible(chromedp.ID("search-count")))
	rows := run(t, ctx, "search rows", chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('table.results tbody tr')).map(tr => tr.textContent.replace(/\s+/g, ' '))`))
	if len(rows) != 2 || !strings.Contains(rows[0], "prop-again") || !strings.Contains(rows[0], "recorded earlier") || strings.Contains(rows[1], "recorded earlier") {
		t.Errorf("search, newest first:\n%s", strings.Join(rows, "\n"))
	}
	do(t, ctx, "search, oldest first", chromedp.Click(chromedp.CSS(`#order a`)), chromedp.WaitVisible(chromedp.ID("search-count")))
	rows = run(t, ctx, "search rows", chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('table.results tbody tr')).map(tr => tr.textContent.replace(/\s+/g, ' '))`))
	if len(rows) != 2 || !strings.Contains(rows[0], "prop-first") {
		t.Errorf("search, oldest first:\n%s", strings.Join(rows, "\n"))
	}
}
