package schema_test

import (
	"strings"
	"testing"

	"github.com/portcullis/portcullis/schema"
)

func TestFingerprintForms(t *testing.T) {
	key := strings.Repeat("0f", 32)
	for s, ok := range map[string]bool{
		"sha256:" + key:                  true,
		key:                              false,
		"sha256:" + strings.ToUpper(key): false,
		"sha256:" + key[:63]:             false,
		"sha256:" + key + "0":            false,
		"sha256:" + key[:63] + "g":       false,
		"SHA256:" + key:                  false,
		"sha256:" + key[:62] + "\u00e9":  false,
		"":                               false,
		"sha256:":                        false,
	} {
		if schema.ValidFingerprint(s) != ok {
			t.Errorf("ValidFingerprint(%q) = %v", s, !ok)
		}
	}
	fp := schema.FingerprintOfKey(key)
	if !schema.ValidFingerprint(fp) || schema.FingerprintKey(fp) != key || !schema.ValidFingerprintKey(key) || schema.ValidFingerprintKey(fp) {
		t.Errorf("round trip %q", fp)
	}
}

// An outcome names its own fingerprint first, then its approval's, then its
// receipt's; an empty one is no name.
func TestOutcomeNamedFingerprint(t *testing.T) {
	own, apr, rcpt, empty := "sha256:own", "sha256:apr", "sha256:rcpt", ""
	for _, tc := range []struct {
		o    schema.Outcome
		want string
	}{
		{schema.Outcome{}, ""},
		{schema.Outcome{Fingerprint: &own, Approval: &schema.Approval{Fingerprint: apr}, Receipt: &schema.Receipt{Fingerprint: rcpt}}, own},
		{schema.Outcome{Fingerprint: &empty, Approval: &schema.Approval{Fingerprint: apr}, Receipt: &schema.Receipt{Fingerprint: rcpt}}, apr},
		{schema.Outcome{Approval: &schema.Approval{}, Receipt: &schema.Receipt{Fingerprint: rcpt}}, rcpt},
		{schema.Outcome{Fingerprint: &empty, Receipt: &schema.Receipt{}}, ""},
	} {
		if got := tc.o.NamedFingerprint(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.o, got, tc.want)
		}
	}
}

func TestValidReceiptID(t *testing.T) {
	for id, want := range map[string]bool{
		"rcpt_" + strings.Repeat("0a", 16): true,
		"rcpt_" + strings.Repeat("0A", 16): false,
		"rcpt_" + strings.Repeat("0a", 15): false,
		"rcpt_" + strings.Repeat("0a", 17): false,
		"rcp_" + strings.Repeat("0a", 16):  false,
		"opr_" + strings.Repeat("0a", 16):  false,
		"":                                 false,
		"rcpt_" + strings.Repeat("0g", 16): false,
	} {
		if schema.ValidReceiptID(id) != want {
			t.Errorf("ValidReceiptID(%q) = %v", id, !want)
		}
	}
}
