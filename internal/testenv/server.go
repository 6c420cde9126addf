// Package testenv is Portcullis's own test harness: an embedded
// nats-server with JetStream (or a three-server cluster), processors in
// process or as binaries to SIGKILL, signing hosts, proposal fixtures, a
// recorder of every outcome and incident event, and hooks into the
// processor's internals (its configuration, engine, sealer, operator
// client). Its exported API names internal types, so it lives under
// internal/: integration tests of a host or a connector use the public
// package github.com/portcullis/portcullis/testenv, a facade over this one
// with types of its own.
//
//	env := testenv.New(t)
//	env.PublishSigned(t, testenv.Lumber("prop-1"), env.Host)
//	out := env.Recorder.Wait(t, "prop-1", testenv.Terminal)
//
// Wait for what should happen with the Recorder (Wait, WaitAll, WaitEvent);
// to assert that something did not happen, call Env.Quiesce first, never
// time.Sleep: it returns once the pipeline has nothing left to do at the
// clock's current time, so whatever has not happened then will not.
//
// For what one server cannot show, NewCluster starts three servers in
// process, and Clustered runs an Env on them the way processors share a
// cluster (SPEC §6; "SPEC §N" is section N of PROTOCOL.md, the wire
// contract at the repository's root): a replicated journal, more processors with
// AddProcessor (in process) or ProcessorConfig and StartProcess (binaries
// to SIGKILL), servers stopped and started again, stream leaders moved.
//
//	env := testenv.New(t, testenv.Clustered(), testenv.WithAuth())
//	env.AddProcessor(t, "second")
//	env.Cluster.Stop(t, 1)
//	env.StepDownStream(t, "KV_"+env.Subjects.JournalBucket())
//
// It imports what a test needs of every layer; no production package
// imports it.
package testenv

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/natsauth"
)

// StartServer starts an embedded nats-server with JetStream, storing under
// dir ("" for a new t.TempDir()), on a random loopback port. It is shut down
// when the test ends.
func StartServer(t testing.TB, dir string) *server.Server {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	s, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		JetStream: true,
		StoreDir:  dir,
		NoSigs:    true,
		NoLog:     true,
		// As the processor's embedded server: the streams' budgets are
		// reservations, not space used (engine.EmbeddedMaxStore).
		JetStreamMaxStore: engine.EmbeddedMaxStore,
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// RestartServer starts Env's server again, on the same address and
// JetStream store directory (streams and consumers recovered), after the
// test shut it down (e.Server.Shutdown()) to see what an outage does; a
// server still running is shut down first. Clients reconnect by
// themselves. When the test ends the processor is stopped before this
// server, so that it drains against a live server.
func (e *Env) RestartServer(t testing.TB) *server.Server {
	t.Helper()
	if e.Cluster != nil {
		t.Fatal("testenv: a Clustered Env restarts its servers with Cluster.Stop and Cluster.Start")
	}
	e.Server.Shutdown()
	e.Server.WaitForShutdown()
	s := e.startServer(t, e.serverAddr)
	t.Cleanup(func() { e.Stop(t) }) // runs before the server's own cleanup
	e.Server = s
	return s
}

// startServer starts Env's server on addr and its store directory: with
// the accounts and users of SPEC §2.8 when Auth.
func (e *Env) startServer(t testing.TB, addr string) *server.Server {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	if p == 0 {
		p = server.RANDOM_PORT
	}
	opts := &server.Options{Host: host, Port: p, JetStream: true, StoreDir: e.serverDir, NoSigs: true, NoLog: true, JetStreamMaxStore: engine.EmbeddedMaxStore}
	if e.auth != nil {
		e.auth.apply(t, opts)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	if e.auth != nil {
		if err := natsauth.EnableJetStream(s); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Connect connects to s; the connection is closed when the test ends.
func Connect(t testing.TB, s *server.Server, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
