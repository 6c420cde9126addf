package fingerprint

import (
	"fmt"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/portcullis/portcullis/schema"
)

// ErrInexactNumber is returned (wrapped) for a JSON number whose canonical
// form denotes a different value than its text: an integer beyond 2^53 that
// is not a double, a fraction with more precision than a double holds, or a
// magnitude a double cannot reach (1e400, 1e-400).
// It wraps ErrNotCanonical.
var ErrInexactNumber = fmt.Errorf("%w: number not exactly representable as an IEEE-754 double", ErrNotCanonical)

// CheckNumbers walks a JSON value and refuses (ErrInexactNumber) any number
// whose decimal value differs from the value of its JCS form. It accepts
// 0.1 (its JCS form is "0.1"), 1.0 and 1e21 (forms "1" and "1e+21"), and
// refuses 9007199254740993 (form "9007199254740992"). Invalid JSON is
// ErrNotCanonical. It is schema.ExactNumbers, the rule admission applies to
// every payload, with errors.
func CheckNumbers(v jsontext.Value) error {
	if schema.ExactNumbers(v) { // valid (one value, no duplicate names) and exact
		return nil
	}
	if !v.IsValid() { // only on the way out: ExactNumbers validated it already
		return fmt.Errorf("%w: invalid JSON", ErrNotCanonical)
	}
	return ErrInexactNumber
}
