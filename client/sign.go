package client

import (
	"encoding/base64"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Headers that carry a host's signature (SPEC §2.7).
const (
	HeaderHostKey   = "Actions-Host-Key"
	HeaderSignature = "Actions-Signature"
)

// Sign signs body as host kp: it returns the headers Actions-Host-Key (the
// public key, "U…") and Actions-Signature (the unpadded base64url ed25519
// signature of exactly body). Send body byte for byte as signed: any change,
// a re-encoding or a dropped trailing newline, makes the signature fail and
// the message gets no outcome at all.
func Sign(kp nkeys.KeyPair, body []byte) (nats.Header, error) {
	if kp == nil {
		return nil, errors.New("client: sign: no key")
	}
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
