package testenv

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/natsauth"
	"github.com/portcullis/portcullis/schema/keyfile"
	"github.com/portcullis/portcullis/subjects"
)

// serverAuth is what WithAuth gives the server: the accounts and users of
// the configuration's roles and the processor's own identity, whose seed is
// the processor's nats.credentials file.
type serverAuth struct {
	cfg       *config.Config
	subj      subjects.Subjects
	processor nkeys.KeyPair
	seedFile  string
}

func newServerAuth(t testing.TB, cfg *config.Config, subj subjects.Subjects, seedFile string) *serverAuth {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	if err := keyfile.WriteSeed(seedFile, kp); err != nil {
		t.Fatal(err)
	}
	return &serverAuth{cfg: cfg, subj: subj, processor: kp, seedFile: seedFile}
}

// apply sets the server's accounts and users; each start builds them anew
// (an account belongs to one server).
func (a *serverAuth) apply(t testing.TB, opts *server.Options) {
	t.Helper()
	pub, _ := a.processor.PublicKey()
	accounts, users, err := natsauth.ServerAuth(a.cfg, a.subj, pub)
	if err != nil {
		t.Fatal(err)
	}
	opts.Accounts, opts.Nkeys = accounts, users
}

// processorKey is the processor's identity; nil without auth.
func (a *serverAuth) processorKey() nkeys.KeyPair {
	if a == nil {
		return nil
	}
	return a.processor
}

// ConnectAs connects to Env's server as the identity of kp (nil: no
// login), with replies under its own inbox prefix, reconnecting forever;
// one connection per key, closed when the test ends.
func (e *Env) ConnectAs(t testing.TB, kp nkeys.KeyPair) *nats.Conn {
	t.Helper()
	key := ""
	opts := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}
	if e.url != "" { // OnServers
		opts = append(opts, nats.PingInterval(time.Second), nats.MaxPingsOutstanding(3))
		if e.dialer != nil {
			opts = append(opts, nats.SetCustomDialer(e.dialer))
		}
	}
	if kp != nil && e.Auth {
		pub, err := kp.PublicKey()
		if err != nil {
			t.Fatal(err)
		}
		key = pub
		opts = append(opts, nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(subjects.Inbox(pub)))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if nc, ok := e.conns[key]; ok {
		return nc
	}
	nc, err := nats.Connect(e.natsURL(), opts...)
	if err != nil {
		t.Fatalf("testenv: connect as %s: %v", key, err)
	}
	t.Cleanup(nc.Close)
	e.conns[key] = nc
	return nc
}

// jsAs is JetStream over ConnectAs(kp).
func (e *Env) jsAs(t testing.TB, kp nkeys.KeyPair) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(e.ConnectAs(t, kp))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// keyOf returns the Env key pair with this public key.
func (e *Env) keyOf(t testing.TB, pub string) nkeys.KeyPair {
	t.Helper()
	for _, kp := range []nkeys.KeyPair{e.Host, e.OtherHost, e.Operator, e.Connector, e.Resolver, e.auth.processorKey()} {
		if kp == nil {
			continue
		}
		if k, _ := kp.PublicKey(); k == pub {
			return kp
		}
	}
	t.Fatalf("testenv: no key for %s", pub)
	return nil
}
