package schema

import "strings"

// FingerprintPrefix starts every intent fingerprint (SPEC §2.3).
const FingerprintPrefix = "sha256:"

// ValidFingerprint reports whether s is an intent fingerprint:
// FingerprintPrefix and 64 lowercase hex digits.
func ValidFingerprint(s string) bool {
	k, ok := strings.CutPrefix(s, FingerprintPrefix)
	return ok && ValidFingerprintKey(k)
}

// ValidFingerprintKey reports whether k is a fingerprint's 64 lowercase hex
// digits: the idempotency key providers see, and the key of the activity
// record and of stage subjects.
func ValidFingerprintKey(k string) bool { return lowerHex(k, 64) }

// ValidReceiptID reports whether id is a receipt id as the processor makes
// them: "rcpt_" and 32 lowercase hex digits.
func ValidReceiptID(id string) bool {
	h, ok := strings.CutPrefix(id, "rcpt_")
	return ok && lowerHex(h, 32)
}

// lowerHex reports whether s is n lowercase hex digits.
func lowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// FingerprintKey is a fingerprint's 64 hex digits (fingerprint without its
// prefix).
func FingerprintKey(fingerprint string) string {
	return strings.TrimPrefix(fingerprint, FingerprintPrefix)
}

// FingerprintOfKey is the fingerprint whose key is k.
func FingerprintOfKey(k string) string { return FingerprintPrefix + k }
