package admin

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/schema/trust"
)

// Headers that carry an operator's signature. The signature header is the
// one hosts use (SPEC §2.7); the key header names an operator's key.
const (
	HeaderOperatorKey = "Actions-Operator-Key"
	HeaderSignature   = trust.HeaderSignature
)

// MaxRequestSkew is how far requested_at_ms may lie before or after the
// processor's clock (SPEC §2.8: "older than 60s … refused"). A nonce is
// remembered for as long as its request could be accepted.
const MaxRequestSkew = 60 * time.Second

// Nonce limits: NewStamp makes nonceBytes random bytes, base64url.
const (
	MinNonceLen = 22 // 16 random bytes
	MaxNonceLen = 128
	nonceBytes  = 18
)

var noncePattern = regexp.MustCompile(fmt.Sprintf(`^[A-Za-z0-9_-]{%d,%d}$`, MinNonceLen, MaxNonceLen))

// ValidNonce reports whether s has a nonce's form.
func ValidNonce(s string) bool { return noncePattern.MatchString(s) }

// NewStamp stamps a request made at now with a fresh random nonce.
func NewStamp(now time.Time) (Stamp, error) {
	b := make([]byte, nonceBytes)
	if _, err := rand.Read(b); err != nil {
		return Stamp{}, fmt.Errorf("admin: nonce: %w", err)
	}
	return Stamp{RequestedAtMs: now.UnixMilli(), Nonce: base64.RawURLEncoding.EncodeToString(b)}, nil
}

// Sign signs body as the operator kp (an operator's user nkey pair): it
// returns the two headers to send with it.
func Sign(kp nkeys.KeyPair, body []byte) (nats.Header, error) {
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("admin: operator key: %w", err)
	}
	sig, err := kp.Sign(body)
	if err != nil {
		return nil, fmt.Errorf("admin: sign: %w", err)
	}
	h := nats.Header{}
	h.Set(HeaderOperatorKey, pub)
	h.Set(HeaderSignature, base64.RawURLEncoding.EncodeToString(sig))
	return h, nil
}

// Value-free reasons an authentication failed, for the reply and the log.
const (
	reasonUnsigned     = "no signature"
	reasonUnknownKey   = "not the key of a configured operator"
	reasonBadSignature = "bad signature"
)

// header returns the values of a header whatever the case of its name
// (NATS header names are case-sensitive; a client that changes the case
// still means to sign).
func header(hdr nats.Header, name string) []string {
	var out []string
	for k, v := range hdr {
		if strings.EqualFold(k, name) {
			out = append(out, v...)
		}
	}
	return out
}

// authenticate checks a request's signature headers against the configured
// operators. It returns the operator's configured name and signed true for
// a valid signature; "", false for a request with neither header when
// allowUnsigned; otherwise a reason. A request with either header, in any
// case, is signed and checked in full, whatever allowUnsigned says; each
// header must appear once.
func authenticate(operators []config.Role, allowUnsigned bool, hdr nats.Header, body []byte) (operator string, signed bool, reason string) {
	keys, sigs := header(hdr, HeaderOperatorKey), header(hdr, HeaderSignature)
	if len(keys) == 0 && len(sigs) == 0 {
		if allowUnsigned {
			return "", false, ""
		}
		return "", false, reasonUnsigned
	}
	if len(keys) != 1 {
		return "", true, reasonUnknownKey
	}
	if len(sigs) != 1 {
		return "", true, reasonBadSignature
	}
	key, sig := keys[0], sigs[0]
	i := slices.IndexFunc(operators, func(o config.Role) bool { return o.PublicKey == key })
	if i < 0 || key == "" {
		return "", true, reasonUnknownKey
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(sig, "="))
	if err != nil || sig == "" {
		return "", true, reasonBadSignature
	}
	pub, err := nkeys.FromPublicKey(key)
	if err != nil {
		return "", true, reasonUnknownKey
	}
	if err := pub.Verify(body, raw); err != nil {
		return "", true, reasonBadSignature
	}
	return operators[i].Name, true, ""
}
