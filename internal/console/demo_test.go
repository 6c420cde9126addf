package console_test

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/internal/console"
	"github.com/portcullis/portcullis/internal/demo"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema/keyfile"
	"github.com/portcullis/portcullis/subjects"
)

var (
	consoleLine = regexp.MustCompile(`processor console --url (\S+) --nkey (\S+)`)
	resolveLine = regexp.MustCompile(`processor reconcile resolve (sha256:[0-9a-f]{64})`)
)

// TestBrowserDemo is the console beside `processor demo --keep`, as its
// printed command line starts it (the demo's server has NATS
// authentication on; the console logs in and signs as the demo's
// operator "ops"): the demo's indeterminate payment shows in the browser,
// and resolving it through the form ends it as `processor reconcile
// resolve` does — the demo sees REJECTED, settled by the operator ops. The
// screenshots of this run are the README's (docs/console).
func TestBrowserDemo(t *testing.T) {
	chromium(t)
	if testing.Short() {
		t.Skip("plays the demo")
	}
	t.Setenv("TMPDIR", t.TempDir())
	out := &testenv.LogBuffer{}
	keep, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- demo.Run(demo.Options{Stdout: out, Keep: keep}) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("demo: %v\n%s", err, out.Bytes())
		}
	})
	out.Wait(t, "Waiting for the resolution")
	printed := string(out.Bytes())
	m, r := consoleLine.FindStringSubmatch(printed), resolveLine.FindStringSubmatch(printed)
	if m == nil || r == nil {
		t.Fatalf("the demo printed no console or resolve command line:\n%s", printed)
	}
	url, seed, fp := m[1], m[2], r[1]

	// What `processor console --url URL --nkey SEED` does: log in as the
	// operator, with replies under its own inbox, and sign with its key.
	kp, err := keyfile.LoadSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	nc, err := nats.Connect(url, nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(subjects.Inbox(pub)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close) // after the console's own cleanup
	f := &fixture{}
	f.serve(t, console.Config{Admin: &admin.Client{NC: nc, Subjects: subjects.Default(), Key: kp}, Log: slog.New(slog.DiscardHandler), Open: true})
	base := f.base

	dir := screenshots(t)
	ctx := browser(t)
	do(t, ctx, "overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`#live[data-refreshed]`)))
	if s := text(t, ctx, "#count-indeterminate"); !strings.HasPrefix(s, "1") {
		t.Errorf("overview: %q", s)
	}
	shot(t, ctx, dir, "overview")
	do(t, ctx, "approvals", chromedp.Navigate(base+"/approvals"), chromedp.WaitVisible(chromedp.CSS(`tr[data-proposal="demo-host/restock-approval"]`)))
	shot(t, ctx, dir, "approvals")

	row := `tr[data-fingerprint="` + fp + `"]`
	do(t, ctx, "the demo's indeterminate payment", chromedp.Navigate(base+"/indeterminate"), chromedp.WaitVisible(chromedp.CSS(row)))
	if s := text(t, ctx, row); !strings.Contains(s, "demo-host/pay-invoice-42") || !strings.Contains(s, "exhausted") {
		t.Errorf("the payment's row: %q", s)
	}
	do(t, ctx, "fill the form",
		chromedp.Click(chromedp.CSS(row+` input[value="absent"]`)),
		chromedp.SendKeys(chromedp.CSS(row+` input[name="evidence"]`), "ledger-console:payments?invoice=INV-0042"))
	shot(t, ctx, dir, "indeterminate")
	do(t, ctx, "resolve", chromedp.Click(chromedp.CSS(row+` button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS(".flash")))
	if s := text(t, ctx, "#timeline li:first-child"); !strings.Contains(s, "REJECTED") || !strings.Contains(s, "resolved by operator ops") {
		t.Errorf("the timeline's newest entry is %q", s)
	}
	shot(t, ctx, dir, "timeline")
	out.Wait(t, "settled by the operator ops, evidence ledger-console:payments?invoice=INV-0042. Provider dispatches: 1.")
	if !regexp.MustCompile(`pay-invoice-42\s+→ REJECTED`).Match(out.Bytes()) {
		t.Errorf("the demo's timeline:\n%s", out.Bytes())
	}
	do(t, ctx, "search", chromedp.Navigate(base+"/search?what=outcomes&host=demo-host"+searchWindow()), chromedp.WaitVisible(chromedp.ID("search-count")))
	shot(t, ctx, dir, "search")
	do(t, ctx, "the queue is empty", chromedp.Navigate(base+"/indeterminate"), chromedp.WaitNotPresent(chromedp.CSS(row)))
}
