package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/natsauth"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/trust"
	"github.com/portcullis/portcullis/subjects"
)

// identity is a role's key pair.
type identity struct {
	kp  nkeys.KeyPair
	pub string
}

func newIdentity(t *testing.T) identity {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return identity{kp, pub}
}

// connectAs logs in to the processor's embedded server with a role's nkey
// and its own inbox prefix, as SPEC §2.8 tells clients to.
func connectAs(t *testing.T, url string, id identity) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.Nkey(id.pub, id.kp.Sign), nats.CustomInboxPrefix(subjects.Inbox(id.pub)), nats.NoReconnect())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// deployment is a processor's configuration with one host and the
// connector of one nats provider.
func deployment(t *testing.T, host, connector identity) *config.Config {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Defaults()
	cfg.NATS.Listen = "127.0.0.1:0"
	cfg.NATS.StoreDir = filepath.Join(dir, "nats")
	cfg.Store.Dir = filepath.Join(dir, "store")
	cfg.Metrics.Listen = ""
	cfg.Tenants = []trust.Tenant{{Ref: testenv.Tenant, SecurityDomains: []string{testenv.SecurityDomain}}}
	cfg.Hosts = []trust.Host{{Name: testenv.HostName, PublicKey: host.pub, Tenants: []string{testenv.Tenant}}}
	cfg.Providers = []config.Provider{{Name: "inventory", Adapter: adapters.KindNATS,
		Timeout: 5 * time.Second, UnavailableRetry: 5 * time.Second, MaxInFlight: 4}}
	cfg.Connectors = []config.Connector{{Name: "inventory-connector", PublicKey: connector.pub, Providers: []string{"inventory"}}}
	if !cfg.NATS.Auth || !cfg.NATS.Embedded {
		t.Fatalf("defaults: %+v", cfg.NATS)
	}
	return cfg
}

func start(t *testing.T, cfg *config.Config) *engine.Processor {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := engine.Start(ctx, engine.Options{Config: cfg, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	return p
}

// TestSignedProposalThroughTheAccounts runs a real processor with its
// embedded server and authentication on (every role in its own account):
// a host publishes a signed proposal with an inline grant through its
// account and gets its PubAck, the connector of a nats provider answers the
// dispatch from its account, and the host receives CONFIRMED live on its
// outcome subject and reads it back by direct get. After a restart (a new
// processor identity, the same store) the streams are back in the
// processor's account.
func TestSignedProposalThroughTheAccounts(t *testing.T) {
	host, connector := newIdentity(t), newIdentity(t)
	cfg := deployment(t, host, connector)
	p := start(t, cfg)
	defer func() {
		if p != nil {
			_ = p.Close()
		}
	}()
	// Anonymous clients are refused.
	if nc, err := nats.Connect(p.NATSURL(), nats.NoReconnect()); !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf("anonymous connect: %v, want %v", err, nats.ErrAuthorization)
	}
	confirmed := proposeAndConfirm(t, p.NATSURL(), p.Subjects(), host, connector)

	if err := p.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	p = start(t, cfg)
	s := p.Subjects()
	hc := connectAs(t, p.NATSURL(), host)
	m, err := hc.Request(subjects.DirectGetLast(s.OutcomesStream(), s.Outcome(testenv.HostName, "prop-1")), nil, 5*time.Second)
	if err != nil || string(m.Data) != string(confirmed) {
		t.Errorf("direct get after a restart: %q %v", msgData(m), err)
	}
	hc.Close()
	if err := p.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	p = nil
}

// TestSignedProposalThroughAnExternalServer: the same flow with an
// external nats-server configured by the text `processor nats-permissions`
// prints (natsauth.AccountsBlock) and the processor logging in with its
// nkey seed file (nats.credentials).
func TestSignedProposalThroughAnExternalServer(t *testing.T) {
	host, connector, proc := newIdentity(t), newIdentity(t), newIdentity(t)
	cfg := deployment(t, host, connector)
	dir := t.TempDir()
	seed, err := proc.kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	cfg.NATS.Credentials = filepath.Join(dir, "processor.nk")
	if err := os.WriteFile(cfg.NATS.Credentials, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	block, err := natsauth.AccountsBlock(cfg, subjects.Default(), proc.pub)
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "server.conf")
	text := fmt.Sprintf("host: \"127.0.0.1\"\nport: -1\njetstream {\n  store_dir: %q\n  max_file_store: 1099511627776\n}\n%s", filepath.Join(dir, "js"), block)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	cfg.NATS.Embedded, cfg.NATS.URL = false, srv.ClientURL()
	p := start(t, cfg)
	defer func() {
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	proposeAndConfirm(t, srv.ClientURL(), p.Subjects(), host, connector)
	acc, err := srv.LookupAccount(natsauth.ProcessorAccount)
	if err != nil {
		t.Fatal(err)
	}
	if n := acc.JetStreamUsage().Streams; n != len(engine.StreamConfigs(p.Subjects(), cfg, nil))+1 {
		t.Errorf("%d streams in %s", n, natsauth.ProcessorAccount)
	}
}

// proposeAndConfirm: the connector serves the dispatch; the host publishes
// a signed proposal with an inline grant, gets its PubAck, receives
// CONFIRMED live and reads it by direct get. It returns the outcome.
func proposeAndConfirm(t *testing.T, url string, s subjects.Subjects, host, connector identity) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var dispatches []schema.DispatchRequest
	cn := connectAs(t, url, connector)
	defer cn.Close()
	if _, err := cn.QueueSubscribe(s.ProviderDispatch("inventory"), "inventory", func(m *nats.Msg) {
		var req schema.DispatchRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("dispatch request: %v", err)
			return
		}
		mu.Lock()
		dispatches = append(dispatches, req)
		mu.Unlock()
		_ = m.Respond([]byte(`{"outcome":"confirmed","provider_action_id":"inv-1","evidence_refs":["inventory:ledger#1"]}`))
	}); err != nil {
		t.Fatal(err)
	}
	if err := cn.Flush(); err != nil {
		t.Fatal(err)
	}

	hc := connectAs(t, url, host)
	defer hc.Close()
	live, err := hc.SubscribeSync(s.HostOutcomes(testenv.HostName))
	if err != nil {
		t.Fatal(err)
	}
	if err := hc.Flush(); err != nil {
		t.Fatal(err)
	}
	proposal := testenv.Lumber("prop-1")
	testenv.Set(proposal, "intent.provider", "inventory")
	testenv.Granted(t, proposal, "sku-1001", time.Now())
	body := testenv.Body(t, proposal)
	msg := nats.NewMsg(s.Proposal(testenv.HostName))
	msg.Data = body
	msg.Header = testenv.Sign(t, host.kp, body)
	js, err := jetstream.New(hc)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.PublishMsg(ctx, msg) // the PubAck comes back through the host's import
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if ack.Stream != s.HostProposalsStream(testenv.HostName) || ack.Sequence != 1 {
		t.Errorf("PubAck %+v", ack)
	}

	subject := s.Outcome(testenv.HostName, "prop-1")
	var confirmed *nats.Msg
	var kinds []schema.Kind
	for confirmed == nil {
		m, err := live.NextMsg(testenv.WaitTimeout)
		if err != nil {
			t.Fatalf("live outcomes %q, then: %v", kinds, err)
		}
		var o schema.Outcome
		if err := json.Unmarshal(m.Data, &o); err != nil || m.Subject != subject || o.ProposalID != "prop-1" {
			t.Fatalf("live outcome on %s: %q (%v)", m.Subject, m.Data, err)
		}
		kinds = append(kinds, o.Kind)
		switch {
		case o.Kind == schema.KindConfirmed:
			confirmed = m
			if o.Receipt == nil || o.Receipt.ProviderActionID != "inv-1" || o.Receipt.Provider != "inventory" {
				t.Errorf("receipt %+v", o.Receipt)
			}
		case o.Terminal:
			t.Fatalf("terminal outcome %s: %s", o.Kind, m.Data)
		}
	}

	// The last outcome of the proposal, by direct get through the import.
	// A live subscriber can hear a message before the stream has stored it:
	// wait for the stream to have it.
	var m *nats.Msg
	testenv.WaitFor(t, "the CONFIRMED outcome stored", func() bool {
		m, err = hc.Request(subjects.DirectGetLast(s.OutcomesStream(), subject), nil, 5*time.Second)
		return err == nil && string(m.Data) == string(confirmed.Data)
	})
	if m.Header.Get(jetstream.SubjectHeader) != subject {
		t.Errorf("direct get %s: %q, want the CONFIRMED outcome", m.Header.Get(jetstream.SubjectHeader), m.Data)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(dispatches) != 1 || dispatches[0].Provider != "inventory" || dispatches[0].Referent != "sku-1001" ||
		dispatches[0].Fingerprint != testenv.FingerprintOf(t, proposal, "sku-1001") {
		t.Errorf("the connector received %+v", dispatches)
	}
	return confirmed.Data
}

func msgData(m *nats.Msg) []byte {
	if m == nil {
		return nil
	}
	return m.Data
}
