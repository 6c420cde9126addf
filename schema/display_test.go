package schema_test

import (
	"errors"
	"testing"

	"github.com/portcullis/portcullis/schema"
)

// A display summary that would show a person something else than it says
// is refused at admission (ADMISSION_MALFORMED, the rule named, the value
// never quoted): a bidirectional override that turns "prod" around, an
// isolate, a zero-width space, a tag character, a terminal escape. Text
// of right-to-left scripts and the joiners they need pass.
func TestDisplaySummaryInvisible(t *testing.T) {
	for _, c := range []struct {
		name, summary string
		refused       bool
	}{
		{"plain", "Restart payments API — staging (svc:payments-staging)", false},
		{"Hebrew and Arabic", "הפעל מחדש — أعد التشغيل", false},
		{"Persian with a zero-width non-joiner", "می\u200cخواهم", false},
		{"emoji sequence with a zero-width joiner", "👩\u200d💻 restart", false},
		{"tab and line breaks", "Restart\tpayments\r\nreason: r", false},
		{"right-to-left override", "Restart staging \u202eiPA dorp\u202c", true},
		{"left-to-right embedding", "\u202aRestart", true},
		{"first-strong isolate", "Restart \u2068prod\u2069", true},
		{"right-to-left mark", "Restart\u200f", true},
		{"Arabic letter mark", "Restart\u061c", true},
		{"zero-width space", "pay\u200bments", true},
		{"word joiner", "pay\u2060ments", true},
		{"soft hyphen", "pay\u00adments", true},
		{"byte-order mark", "\ufeffRestart", true},
		{"tag characters", "Restart\U000e0041\U000e0042", true},
		{"terminal escape", "Restart \x1b[2Kstaging", true},
		{"C1 control", "Restart \u009b2K", true},
		{"NUL", "Restart\x00", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := schema.CheckProposal(set("intent.display.summary", c.summary), 65536)
			if !c.refused {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ve *schema.ValidationError
			if !errors.As(err, &ve) || ve.Code() != schema.CodeAdmissionMalformed || len(ve.Problems) != 1 ||
				ve.Problems[0].Path != "/intent/display/summary" || ve.Problems[0].Rule != schema.RuleSummaryHidden {
				t.Fatalf("CheckProposal = %v, want ADMISSION_MALFORMED at /intent/display/summary: %s", err, schema.RuleSummaryHidden)
			}
			if v := schema.Visible(c.summary); schema.HasInvisibleFormat(v) {
				t.Errorf("Visible(%q) = %q still hides characters", c.summary, v)
			}
		})
	}
	if got := schema.Visible("a\u202eb"); got != "a<U+202E>b" {
		t.Errorf("Visible: %q", got)
	}
}
