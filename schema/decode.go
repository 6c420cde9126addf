package schema

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// ErrMalformed is returned (wrapped) for input that fails strict decoding.
// Its message never includes input values: callers may still not log it,
// since member names of hostile input can be anything.
var ErrMalformed = errors.New("schema: malformed input")

// ErrTooLarge is returned for input over the configured size limit.
var ErrTooLarge = errors.New("schema: input too large")

// MaxDepth is the deepest JSON nesting any input may have (SPEC §2): a
// deeper value is malformed before anything decodes or re-encodes it.
const MaxDepth = 64

// MaxMessageBytes is the largest message on the wire: the NATS server's
// default max_payload (1 MiB). admission.max_payload_bytes may be at most
// this, and input larger than the configured limit is still read for ids up
// to this size.
const MaxMessageBytes = 1 << 20

// WithinDepth reports whether no array or object in data nests deeper than
// max. It scans bytes only (strings skipped, escapes honoured), so its cost
// is linear and it allocates nothing; malformed JSON is left to the decoder.
func WithinDepth(data []byte, max int) bool { return tooDeepAt(data, max) < 0 }

// tooDeepAt is the offset of the first bracket that opens level max+1, or
// -1 when there is none. Most of a body is inside strings: it skips each
// one with bytes.IndexByte to its next quote (a quote after an odd run of
// backslashes is escaped: search on), rather than byte by byte. Each
// backslash is counted once, so the scan stays linear.
func tooDeepAt(data []byte, max int) int {
	depth := 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '"':
			for {
				q := bytes.IndexByte(data[i+1:], '"')
				if q < 0 {
					return -1 // unterminated: the decoder's to refuse
				}
				i += 1 + q
				run := 0
				for data[i-1-run] == '\\' {
					run++
				}
				if run%2 == 0 {
					break
				}
			}
		case '{', '[':
			depth++
			if depth > max {
				return i
			}
		case '}', ']':
			depth--
		}
	}
	return -1
}

// Decode strictly decodes one JSON value into v: UTF-8 only, no duplicate
// member names at any depth (also inside raw values such as attributes), no
// unknown members, exact (case-sensitive) member names, no trailing data and
// Go-typed values (an integer field refuses 1.5 and "1").
func Decode(data []byte, v any) error {
	return decode(data, v, MaxDepth)
}

// EnvelopeDepth is the deepest nesting of a stage hand-off: an envelope
// holds its proposal one level deeper than the proposal's own body, so a
// proposal admitted at MaxDepth is still readable by every later stage.
const EnvelopeDepth = MaxDepth + 1

// DecodeEnvelope strictly decodes a stage hand-off in either of its forms:
// the binary one every stage writes (EncodeEnvelope; its first byte is a
// version, never '{'), or JSON, as an earlier version wrote it (still in
// the stage, parked and held streams at an upgrade), as Decode does but
// with EnvelopeDepth as its nesting limit. Either way a failure is a
// value-free *ValidationError wrapping ErrMalformed.
func DecodeEnvelope(data []byte, env *Envelope) error {
	if IsBinaryEnvelope(data) {
		return decodeEnvelopeBinary(data, env)
	}
	return decode(data, env, EnvelopeDepth)
}

// decode returns a *ValidationError (wrapping ErrMalformed) with the one
// problem that stopped it, value-free: the decoder's own message can quote
// the input, so only its kind and a safe path are kept.
func decode(data []byte, v any, maxDepth int) error {
	if at := tooDeepAt(data, maxDepth); at >= 0 {
		rule := RuleTooDeep
		if maxDepth != MaxDepth {
			rule = Rule(fmt.Sprintf("nesting deeper than %d levels", maxDepth))
		}
		return invalid(ErrMalformed, "", Problem{Rule: rule, Offset: int64(at)})
	}
	if err := json.Unmarshal(data, v, json.RejectUnknownMembers(true)); err != nil {
		return invalid(ErrMalformed, "", decodeProblem(err, reflect.TypeOf(v)))
	}
	return nil
}

// Marshal encodes v deterministically (struct field order, sorted map keys).
func Marshal(v any) ([]byte, error) {
	return json.Marshal(v, json.Deterministic(true))
}

// MustMarshal encodes a value that cannot fail to encode (our own types).
func MustMarshal(v any) []byte {
	b, err := Marshal(v)
	if err != nil {
		panic("schema: marshal: " + err.Error())
	}
	return b
}

// DecodeProposal strictly decodes and normalizes a proposal body. It returns
// a *ValidationError wrapping ErrTooLarge or ErrMalformed, with the problem
// that stopped it (code ADMISSION_MALFORMED); format checks beyond decoding
// are Proposal.Check's.
func DecodeProposal(data []byte, maxBytes int) (*Proposal, error) {
	if maxBytes > 0 && len(data) > maxBytes {
		return nil, invalid(ErrTooLarge, CodeAdmissionMalformed, Problem{Rule: RuleTooLarge, Offset: -1})
	}
	var p Proposal
	if err := Decode(data, &p); err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			for i := range ve.Problems {
				ve.Problems[i].Code = CodeAdmissionMalformed
			}
		}
		return nil, err
	}
	p.fillNulls()
	p.Intent.Normalize()
	return &p, nil
}

// CheckProposal is every check admission makes of a body on its own, in
// admission's terms: DecodeProposal, then Check. It returns the decoded
// proposal whenever it decoded (also when it breaks rules), and nil or a
// *ValidationError listing every problem; its Code is the outcome code
// admission gives (ADMISSION_MALFORMED before ADMISSION_CONTEXT_INCOMPLETE).
func CheckProposal(data []byte, maxBytes int) (*Proposal, error) {
	p, err := DecodeProposal(data, maxBytes)
	if err != nil {
		return nil, err
	}
	if err := p.Check(); err != nil {
		return p, err
	}
	return p, nil
}

// fillNulls makes absent raw values explicit JSON nulls, so that a missing
// payload and an explicit null are fingerprinted and encoded alike.
func (p *Proposal) fillNulls() {
	if len(p.Intent.Payload) == 0 {
		p.Intent.Payload = jsontext.Value("null")
	}
	if len(p.Grounding.Subject) == 0 {
		p.Grounding.Subject = jsontext.Value("null")
	}
	for i := range p.Grounding.Candidates {
		if len(p.Grounding.Candidates[i].Attributes) == 0 {
			p.Grounding.Candidates[i].Attributes = jsontext.Value("null")
		}
	}
}

// DecodeGrant strictly decodes a grant body.
func DecodeGrant(data []byte, maxBytes int) (*Grant, error) {
	if maxBytes > 0 && len(data) > maxBytes {
		return nil, invalid(ErrTooLarge, "", Problem{Rule: RuleTooLarge, Offset: -1})
	}
	var g Grant
	if err := Decode(data, &g); err != nil {
		return nil, err
	}
	return &g, nil
}
