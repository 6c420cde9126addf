package client

import (
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/schema/trust"
)

// Headers that carry a host's signature (SPEC §2.7).
const (
	HeaderHostKey   = trust.HeaderHostKey
	HeaderSignature = trust.HeaderSignature
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
	return trust.Sign(kp, body)
}
