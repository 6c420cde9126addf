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
