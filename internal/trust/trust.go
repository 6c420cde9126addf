// Package trust authenticates proposals and grants: each configured host
// signs the exact body with its ed25519 key (NATS nkey form) and may speak
// only for its tenants (SPEC §2.7).
package trust

import (
	"encoding/base64"
	"errors"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/config"
)

// Headers that carry a host's signature.
const (
	HeaderHostKey   = "Actions-Host-Key"
	HeaderSignature = "Actions-Signature"
)

// Authentication errors.
var (
	ErrUnknownHost  = errors.New("admission: unknown host key")
	ErrBadSignature = errors.New("admission: bad signature")
)

// Authenticate checks a body's host signature. Without signature headers it
// returns signed == false and no error; with them, the key must belong to a
// configured host and the signature (base64url, padded or not) must verify
// over the exact body.
func Authenticate(hosts []config.Host, body []byte, hdr nats.Header) (host config.Host, signed bool, err error) {
	key, sig := hdr.Get(HeaderHostKey), hdr.Get(HeaderSignature)
	if key == "" && sig == "" {
		return config.Host{}, false, nil
	}
	i := slices.IndexFunc(hosts, func(h config.Host) bool { return h.PublicKey == key })
	if i < 0 {
		return config.Host{}, true, ErrUnknownHost
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(sig, "="))
	if err != nil {
		return config.Host{}, true, ErrBadSignature
	}
	pub, err := nkeys.FromPublicKey(key)
	if err != nil {
		return config.Host{}, true, ErrUnknownHost
	}
	if err := pub.Verify(body, raw); err != nil {
		return config.Host{}, true, ErrBadSignature
	}
	return hosts[i], true, nil
}

// Sign signs body as a host would: it returns the two headers to send with
// it. kp is the host's user nkey pair (seed).
func Sign(kp nkeys.KeyPair, body []byte) (nats.Header, error) {
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	sig, err := kp.Sign(body)
	if err != nil {
		return nil, err
	}
	h := nats.Header{}
	h.Set(HeaderHostKey, pub)
	h.Set(HeaderSignature, base64.RawURLEncoding.EncodeToString(sig))
	return h, nil
}
