package fingerprint

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// ErrInexactNumber is returned (wrapped) for a JSON number whose canonical
// form denotes a different value than its text: an integer beyond 2^53 that
// is not a double, a fraction with more precision than a double holds, or a
// magnitude a double cannot reach (1e400, 1e-400).
// It wraps ErrNotCanonical.
var ErrInexactNumber = fmt.Errorf("%w: number not exactly representable as an IEEE-754 double", ErrNotCanonical)

// maxExponent bounds the exponents compared; a double's decimal exponent is
// within ±400, so anything beyond is inexact anyway.
const maxExponent = 100000

// CheckNumbers walks a JSON value and refuses (ErrInexactNumber) any number
// whose decimal value differs from the value of its JCS form. It accepts
// 0.1 (its JCS form is "0.1"), 1.0 and 1e21 (forms "1" and "1e+21"), and
// refuses 9007199254740993 (form "9007199254740992"). Invalid JSON is
// ErrNotCanonical.
func CheckNumbers(v jsontext.Value) error {
	if !v.IsValid() { // exactly one value, no duplicate names
		return fmt.Errorf("%w: invalid JSON", ErrNotCanonical)
	}
	dec := jsontext.NewDecoder(bytes.NewReader(v))
	for {
		if dec.PeekKind() == '0' {
			num, err := dec.ReadValue()
			if err != nil {
				return fmt.Errorf("%w: invalid JSON", ErrNotCanonical)
			}
			if !exactNumber(num) {
				return ErrInexactNumber
			}
			continue
		}
		if _, err := dec.ReadToken(); err != nil {
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("%w: invalid JSON", ErrNotCanonical)
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
