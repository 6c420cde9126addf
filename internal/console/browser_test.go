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

	"github.com/chromedp/chromedp"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// The browser tests drive the console in headless Chromium (Debian's
// `chromium`; .ci/run installs it) with chromedp, against a real processor
// (testenv), the way an operator would: pages, the live refresh, the
// resolve form. They skip when no Chromium is installed. Each view's
// screenshot is written under $PORTCULLIS_CONSOLE_SCREENSHOTS/<test name>
// when it is set, else to the test's artifact directory (kept with `go test
// -artifacts`).

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

// screenshots is where a test writes its screenshots.
func screenshots(t *testing.T) string {
	t.Helper()
	if d := os.Getenv(EnvScreenshots); d != "" {
		d = filepath.Join(d, t.Name())
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
	shot(t, ctx, dir, "overview")

	// The queue, and the resolve form.
	rowA := `tr[data-fingerprint="` + fpA + `"]`
	rowB := `tr[data-fingerprint="` + fpB + `"]`
	do(t, ctx, "queue", chromedp.Navigate(f.base+"/indeterminate"), chromedp.WaitVisible(chromedp.CSS(rowA)), chromedp.WaitVisible(chromedp.CSS(rowB)))
	shot(t, ctx, dir, "indeterminate")
	do(t, ctx, "resolve A",
		chromedp.Click(chromedp.CSS(rowA+` input[value="absent"]`)),
		chromedp.SendKeys(chromedp.CSS(rowA+` input[name="evidence"]`), "ticket:OPS-42"),
		chromedp.Click(chromedp.CSS(rowA+` button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(".flash")),
	)
	if s := text(t, ctx, ".flash"); !strings.Contains(s, "Resolved by "+testenv.OperatorName) || !strings.Contains(s, "REJECTED") {
		t.Errorf("flash %q", s)
	}
	last := text(t, ctx, "#timeline li:last-child")
	if !strings.Contains(last, "REJECTED") || !strings.Contains(last, "resolved by operator "+testenv.OperatorName) {
		t.Errorf("the timeline ends with %q", last)
	}
	shot(t, ctx, dir, "timeline")
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
	shot(t, ctx, dir, "csrf-refused")
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
	shot(t, ctx, dir, "approvals")
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
	shot(t, ctx, dir, "search")
	t.Logf("screenshots in %s", dir)
}
