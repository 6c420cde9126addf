package schema

import (
	"bytes"
	"io"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// maxExponent bounds the exponents compared; a double's decimal exponent is
// within ±400, so anything beyond is inexact anyway.
const maxExponent = 100000

// ExactNumbers reports whether every number in v, one valid JSON value,
// denotes the same decimal value as its JCS (RFC 8785) form: JCS reads
// numbers as IEEE-754 doubles, so 9007199254740993, 1.0000000000000001 and
// 1e400 have no exact canonical form and two such amounts could share a
// fingerprint. It accepts 0.1 (its JCS form is "0.1"), 1.0 and 1e21 (forms
// "1" and "1e+21"). Invalid JSON is false. Proposal.Validate applies it to
// the payload (ADMISSION_MALFORMED); package schema wraps it as
// CheckNumbers.
func ExactNumbers(v jsontext.Value) bool {
	if !v.IsValid() { // exactly one value, no duplicate names
		return false
	}
	dec := jsontext.NewDecoder(bytes.NewReader(v))
	for {
		if dec.PeekKind() == '0' {
			num, err := dec.ReadValue()
			if err != nil || !exactNumber(num) {
				return false
			}
			continue
		}
		if _, err := dec.ReadToken(); err != nil {
			return err == io.EOF
		}
	}
}

// exactNumber reports whether a number literal and its JCS form have the
// same decimal value.
func exactNumber(lit []byte) bool {
	c := jsontext.Value(bytes.Clone(lit))
	if err := c.Canonicalize(); err != nil {
		return false
	}
	a, ok := decimalOf(string(lit))
	if !ok {
		return false
	}
	b, ok := decimalOf(string(c))
	return ok && a == b
}

// decimal is a number's exact value as sign · 0.digits · 10^exp, with no
// leading or trailing zeros in digits; zero is the empty digits with exp 0
// and no sign (so -0 equals 0, as JCS has it).
type decimal struct {
	neg    bool
	digits string
	exp    int
}

// decimalOf parses a JSON number literal (RFC 8259 grammar, already
// validated by the decoder) into its exact decimal value.
func decimalOf(s string) (decimal, bool) {
	var d decimal
	if strings.HasPrefix(s, "-") {
		d.neg = true
		s = s[1:]
	}
	mant, expPart, hasExp := strings.Cut(strings.ToLower(s), "e")
	exp := 0
	if hasExp {
		e, err := strconv.Atoi(strings.TrimPrefix(expPart, "+"))
		if err != nil || e > maxExponent || e < -maxExponent {
			return decimal{}, false
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := intPart + frac
	// value = digits · 10^(exp − len(frac)) = 0.digits · 10^(exp − len(frac) + len(digits))
	exp = exp - len(frac) + len(digits)
	trimmed := strings.TrimLeft(digits, "0")
	exp -= len(digits) - len(trimmed)
	trimmed = strings.TrimRight(trimmed, "0")
	if trimmed == "" {
		return decimal{}, true
	}
	d.digits, d.exp = trimmed, exp
	return d, true
}
