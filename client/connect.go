package client

import (
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/subjects"
)

// Connect connects to NATS at url as the role whose key is seed: it logs in
// with the nkey (challenge–response; the seed never leaves the process) and
// receives every reply (JetStream publish acks, direct gets, request
// replies) under the role's own inbox prefix _INBOX.<public key>, the only
// inbox its permissions allow (SPEC §2.8). Every role (host, connector,
// resolver, source) uses its own key and so its own inbox.
//
// A nil seed connects anonymously with the default inbox prefix, which only
// a server without authentication (processor run --dev) accepts.
//
// opts are applied after these, so they may add a name, TLS, reconnect
// settings or handlers. The caller closes (or drains) the connection.
func Connect(url string, seed nkeys.KeyPair, opts ...nats.Option) (*nats.Conn, error) {
	var all []nats.Option
	if seed != nil {
		pub, err := seed.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("client: connect: %w", err)
		}
		all = append(all, nats.Nkey(pub, seed.Sign), nats.CustomInboxPrefix(subjects.Inbox(pub)))
	}
	all = append(all, opts...)
	nc, err := nats.Connect(url, all...)
	if err != nil {
		return nil, fmt.Errorf("client: connect: %w", err)
	}
	return nc, nil
}
