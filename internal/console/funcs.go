package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/portcullis/portcullis/schema"
)

// funcs are the templates' helpers. Every value reaches the page through
// html/template's contextual escaping.
var funcs = template.FuncMap{
	"ms":       formatMs,
	"time":     func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"input":    func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05") },
	"since":    since,
	"until":    until,
	"short":    short,
	"refs":     func(refs []schema.ProposalRef) []string { return refStrings(refs) },
	"rate":     func(f float64) string { return fmt.Sprintf("%.1f", f) },
	"spend":    spend,
	"codes":    incidentCodes,
	"contains": strings.Contains,
	"resolving": func(csrf, fingerprint, receipt string) resolveForm {
		return resolveForm{CSRF: csrf, Fingerprint: fingerprint, ReceiptID: receipt}
	},
	"kindclass": func(k schema.Kind) string {
		return "kind-" + strings.ToLower(strings.ReplaceAll(string(k), "_", "-"))
	},
}

func formatMs(ms int64) string {
	if ms <= 0 {
		return "–"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05.000Z")
}

// since is how long ago ms was at now, rounded to the second.
func since(now time.Time, ms int64) string {
	if ms <= 0 {
		return "–"
	}
	d := now.Sub(time.UnixMilli(ms))
	if d < 0 {
		d = 0
	}
	return d.Truncate(time.Second).String()
}

// until is how long from now until ms.
func until(now time.Time, ms int64) string {
	if ms <= 0 {
		return "–"
	}
	d := time.UnixMilli(ms).Sub(now)
	if d <= 0 {
		return "due"
	}
	return "in " + d.Truncate(time.Second).String()
}

// short abbreviates a fingerprint for a table: "sha256:" and 12 hex.
func short(fp string) string {
	if len(fp) > len(schema.FingerprintPrefix)+12 {
		return fp[:len(schema.FingerprintPrefix)+12] + "…"
	}
	return fp
}

func refStrings(refs []schema.ProposalRef) []string {
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		out = append(out, r.String())
	}
	return out
}

func spend(s *schema.Spend) string {
	if s == nil {
		return "–"
	}
	return fmt.Sprintf("%s %d.%02d", s.Currency, s.AmountMinor/100, s.AmountMinor%100)
}

func incidentCodes(in []schema.Incident) string {
	var out []string
	for _, i := range in {
		out = append(out, string(i.Code))
	}
	return strings.Join(out, " + ")
}

// resolveForm is what the "resolve" template (layout.html) needs: the
// queue's rows and an unsettled intent's timeline both show it.
type resolveForm struct {
	CSRF, Fingerprint, ReceiptID string
}
