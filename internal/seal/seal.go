// Package seal authenticates internal messages (SPEC §2.8, defence in
// depth): every hand-off between stages and every timer message carries an
// HMAC-SHA256 over its subject and body, keyed by the processor's internal
// key. NATS permissions keep clients off internal subjects; the seal makes
// a message that got there anyway (a misconfigured external server, a
// leaked credential) harmless: stages terminate it unread.
//
// It imports nothing of Portcullis: the runner, the timers and the tests
// seal and check with it.
package seal

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"

	"github.com/nats-io/nats.go"
)

// Header carries the seal.
const Header = "Actions-Internal-Mac"

// KeySize is the internal key's length in bytes.
const KeySize = 32

// ErrKeySize is returned for a key that is not KeySize bytes.
var ErrKeySize = errors.New("seal: the internal key must be 32 bytes")

// Sealer seals and checks internal messages. The zero value is unusable.
type Sealer struct {
	key []byte
}

// New returns a Sealer for a KeySize-byte key.
func New(key []byte) (*Sealer, error) {
	if len(key) != KeySize {
		return nil, ErrKeySize
	}
	return &Sealer{key: append([]byte(nil), key...)}, nil
}

func (s *Sealer) mac(subject string, body []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(subject))
	m.Write([]byte{0}) // subjects never contain NUL: the split is unambiguous
	m.Write(body)
	return m.Sum(nil)
}

// Seal sets the seal header of a message for its subject and body.
func (s *Sealer) Seal(subject string, body []byte, hdr nats.Header) {
	hdr.Set(Header, base64.RawURLEncoding.EncodeToString(s.mac(subject, body)))
}

// MsgID turns a message id derived from an input's identity (a stage, a
// stream sequence, a timer's name: all predictable) into the
// Nats-Msg-Id the processor publishes under: the same for every processor
// that shares the key, so that republishing is deduplicated as before,
// and unguessable without the key, so that nobody who can publish on a
// stream (anyone, with NATS authentication off) can take the id first and
// make the real message a dropped duplicate.
func (s *Sealer) MsgID(id string) string {
	return base64.RawURLEncoding.EncodeToString(s.mac(msgIDSubject, []byte(id))[:18])
}

// msgIDSubject keeps MsgID's MACs apart from seals: no message is ever
// published on it (a subject cannot start with '$' for a client, and
// the processor publishes nothing there).
const msgIDSubject = "$portcullis.msg-id"

// Check reports whether a message carries a valid seal for its subject and
// body. It compares in constant time.
func (s *Sealer) Check(subject string, body []byte, hdr nats.Header) bool {
	got, err := base64.RawURLEncoding.DecodeString(hdr.Get(Header))
	return err == nil && hmac.Equal(got, s.mac(subject, body))
}
