package client_test

import (
	"encoding/json"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// exampleProcessor starts a test deployment with NATS authentication on
// and returns its URL and host "frontdesk"'s seed.
func exampleProcessor() (url string, hostSeed nkeys.KeyPair, stop func()) {
	t, stop := testenv.Standalone() // examples have no *testing.T
	env := testenv.New(t, testenv.WithAuth())
	return env.Server.ClientURL(), env.Host, stop
}

// exampleServer starts a bare NATS server without authentication.
func exampleServer() (url string, stop func()) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true})
	if err != nil {
		panic(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		panic("nats-server did not start")
	}
	return s.ClientURL(), func() { s.Shutdown(); s.WaitForShutdown() }
}

// lumber is the SPEC §2.1 proposal for the fake provider "demo".
func lumber(id string) *schema.Proposal {
	body, err := json.Marshal(testenv.Lumber(id))
	if err != nil {
		panic(err)
	}
	p, err := schema.DecodeProposal(body, 0)
	if err != nil {
		panic(err)
	}
	return p
}
