package schema

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// PeekProposalID reads "proposal_id" from a body that failed strict decoding,
// so that a malformed proposal can still get an outcome. It succeeds only
// when the answer is unambiguous: the body is one syntactically valid JSON
// object (valid UTF-8, duplicate names elsewhere are tolerated, nothing
// after it but white space), it has exactly one top-level "proposal_id"
// member, and that member is a valid id string.
//
// It is a small iterative scanner, not a decoder: it reads the id however
// deeply the rest of the body nests (JSON decoders stop at some depth; the
// jsontext decoder this replaces at 10,000 levels, which left the deepest
// bodies without an outcome). Its time is linear in the body and its
// memory one byte per open array or object.
func PeekProposalID(data []byte) (string, bool) {
	s := peeker{b: data}
	s.space()
	if !s.take('{') {
		return "", false
	}
	id, found := "", 0
	s.space()
	if !s.take('}') {
		for {
			isID, ok := s.name("proposal_id")
			if !ok {
				return "", false
			}
			if isID {
				found++
				if id, ok = s.str(true); !ok { // not a string, or not a valid one
					return "", false
				}
			} else if !s.value() {
				return "", false
			}
			s.space()
			if s.take(',') {
				continue
			}
			if s.take('}') {
				break
			}
			return "", false
		}
	}
	s.space()
	if s.i != len(s.b) || found != 1 || !ValidProposalID(id) {
		return "", false
	}
	return id, true
}

// peeker scans JSON text (RFC 8259) from b[i].
type peeker struct {
	b []byte
	i int
}

// space skips JSON white space.
func (s *peeker) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// take consumes c if it is next.
func (s *peeker) take(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// value skips one JSON value of any depth, iteratively: the stack holds
// the closing bracket of every open array and object.
func (s *peeker) value() bool {
	var stack []byte
	for {
		// A value is expected.
		s.space()
		if s.i >= len(s.b) {
			return false
		}
		switch c := s.b[s.i]; {
		case c == '{' || c == '[':
			s.i++
			closer := byte(']')
			if c == '{' {
				closer = '}'
			}
			s.space()
			if s.take(closer) {
				break // empty: a complete value
			}
			stack = append(stack, closer)
			if c == '{' && !s.member() {
				return false
			}
			continue
		case c == '"':
			if _, ok := s.str(false); !ok {
				return false
			}
		case c == 't':
			if !s.literal("true") {
				return false
			}
		case c == 'f':
			if !s.literal("false") {
				return false
			}
		case c == 'n':
			if !s.literal("null") {
				return false
			}
		case c == '-' || ('0' <= c && c <= '9'):
			if !s.number() {
				return false
			}
		default:
			return false
		}
		// A value is complete: close what it completes, or go on to the
		// next element of the innermost open array or object.
		for {
			if len(stack) == 0 {
				return true
			}
			s.space()
			top := stack[len(stack)-1]
			if s.take(top) {
				stack = stack[:len(stack)-1]
				continue
			}
			if !s.take(',') {
				return false
			}
			if top == '}' && !s.member() {
				return false
			}
			break
		}
	}
}

// member skips an object member's name and its colon.
func (s *peeker) member() bool {
	s.space()
	if _, ok := s.str(false); !ok {
		return false
	}
	s.space()
	return s.take(':')
}

func (s *peeker) literal(lit string) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// number skips -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *peeker) number() bool {
	s.take('-')
	switch {
	case s.take('0'):
	case s.i < len(s.b) && '1' <= s.b[s.i] && s.b[s.i] <= '9':
		s.digits()
	default:
		return false
	}
	if s.take('.') && s.digits() == 0 {
		return false
	}
	if s.take('e') || s.take('E') {
		if !s.take('+') {
			s.take('-')
		}
		if s.digits() == 0 {
			return false
		}
	}
	return true
}

func (s *peeker) digits() int {
	n := 0
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

// str reads a string: valid UTF-8, no raw control characters, valid
// escapes (a \u surrogate only as half of a valid pair). With decode it
// returns the string's value.
func (s *peeker) str(decode bool) (string, bool) {
	if !s.take('"') {
		return "", false
	}
	var buf []byte
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			if decode {
				buf = append(buf, s.b[start:s.i]...)
			}
			s.i++
			return string(buf), true
		case c == '\\':
			if decode {
				buf = append(buf, s.b[start:s.i]...)
			}
			r, ok := s.escape()
			if !ok {
				return "", false
			}
			if decode {
				buf = utf8.AppendRune(buf, r)
			}
			start = s.i
		case c < ' ':
			return "", false
		case c < utf8.RuneSelf:
			s.i++
		default:
			r, n := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && n == 1 {
				return "", false
			}
			s.i += n
		}
	}
	return "", false // unterminated
}

// escape reads the escape sequence at b[i] (a backslash).
func (s *peeker) escape() (rune, bool) {
	if s.i+1 >= len(s.b) {
		return 0, false
	}
	c := s.b[s.i+1]
	s.i += 2
	switch c {
	case '"', '\\', '/':
		return rune(c), true
	case 'b':
		return '\b', true
	case 'f':
		return '\f', true
	case 'n':
		return '\n', true
	case 'r':
		return '\r', true
	case 't':
		return '\t', true
	case 'u':
		r1, ok := s.hex4()
		if !ok {
			return 0, false
		}
		if !utf16.IsSurrogate(r1) {
			return r1, true
		}
		// Only a high half followed by an escaped low half is valid.
		if !s.take('\\') || !s.take('u') {
			return 0, false
		}
		r2, ok := s.hex4()
		if !ok {
			return 0, false
		}
		if r := utf16.DecodeRune(r1, r2); r != utf8.RuneError {
			return r, true
		}
	}
	return 0, false
}

// hex4 reads four hexadecimal digits.
func (s *peeker) hex4() (rune, bool) {
	if len(s.b)-s.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s.b[s.i : s.i+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	s.i += 4
	return r, true
}

// PeekString reads the string member at path (object member names, from
// the top) of the JSON document data without decoding the rest: routing
// decisions made before a handler validates its input (the stages'
// bulkheads). ok is false when data is not such a document as far as it
// was read, or the member is absent or not a string; the first member of a
// name counts, and duplicate names are not looked for. It is the scanner
// PeekProposalID uses: what it passes over is checked (syntax, UTF-8,
// escapes) but not decoded, iteratively at any depth.
func PeekString(data []byte, path ...string) (string, bool) {
	if len(path) == 0 {
		return "", false
	}
	s := peeker{b: data}
	for i, want := range path {
		s.space()
		if !s.take('{') {
			return "", false
		}
		s.space()
		if s.take('}') {
			return "", false // absent
		}
		for {
			match, ok := s.name(want)
			if !ok {
				return "", false
			}
			if match {
				if i < len(path)-1 {
					break // descend
				}
				return s.str(true)
			}
			if !s.value() {
				return "", false
			}
			s.space()
			if !s.take(',') {
				return "", false // '}' (absent) or malformed
			}
		}
	}
	return "", false
}

// name reads an object member's name and its colon, and the white space
// around them, and reports whether the name is want.
func (s *peeker) name(want string) (match, ok bool) {
	s.space()
	if match, ok = s.strIs(want); !ok {
		return false, false
	}
	s.space()
	if !s.take(':') {
		return false, false
	}
	s.space()
	return match, true
}

// strIs reads a string as str does and reports whether its value is want,
// without making a string of it unless it has escapes.
func (s *peeker) strIs(want string) (match, ok bool) {
	start := s.i
	if _, ok := s.str(false); !ok {
		return false, false
	}
	raw := s.b[start+1 : s.i-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == want, true
	}
	end := s.i
	s.i = start
	v, _ := s.str(true)
	s.i = end
	return v == want, true
}
