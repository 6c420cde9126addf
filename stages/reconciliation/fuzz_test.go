package reconciliation_test

import (
	"strings"
	"testing"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/reconciliation"
	"github.com/portcullis/portcullis/subjects"
)

// FuzzDecodeTrigger: whatever arrives on the reconciliation stream, the
// decoder never panics and accepts only a trigger for the subject's own
// fingerprint with a sane attempt number.
func FuzzDecodeTrigger(f *testing.F) {
	hex := fpA[7:]
	subj := subjects.Default()
	good := []string{
		`{"fingerprint":"` + fpA + `","attempt":1}`,
		`{"fingerprint":"` + fpA + `","attempt":0,"announce":true}`,
		`{"fingerprint":"` + fpA + `","attempt":1048576}`,
		`{"fingerprint":"` + fpA + `","attempt":-1}`,
		`{"fingerprint":"` + fpA + `","attempt":1,"attempt":2}`,
		`{"fingerprint":"` + fpA + `","attempt":1.5}`,
		`{"fingerprint":"` + fpA + `","attempt":1,"x":1}`,
		`{"fingerprint":"sha256:` + strings.ToUpper(hex) + `","attempt":1}`,
		`null`, `[]`, ``, `{"Fingerprint":"` + fpA + `","attempt":1}`,
	}
	for _, g := range good {
		f.Add(hex, []byte(g))
		f.Add(hex, []byte(g[:len(g)/2]))
		f.Add(hex, []byte(g[len(g)/2:]))
	}
	f.Add("not-hex", []byte(good[0]))
	f.Add(hex+".x", []byte(good[0]))
	f.Fuzz(func(t *testing.T, id string, data []byte) {
		subject := subj.Stage(subjects.StageReconciliation, subjects.KindTimer, id)
		tr, err := reconciliation.DecodeTrigger(subj, subject, data)
		if err != nil {
			return
		}
		if !schema.ValidFingerprint(tr.Fingerprint) || tr.Fingerprint != "sha256:"+id {
			t.Fatalf("accepted %q for subject id %q", tr.Fingerprint, id)
		}
		if tr.Announce != (tr.Attempt == 0) || tr.Attempt < 0 || tr.Attempt > 1<<20 {
			t.Fatalf("accepted attempt %d announce %v", tr.Attempt, tr.Announce)
		}
	})
}
