package client_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/client"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// timeout bounds every wait of a test.
const timeout = 20 * time.Second

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// connect logs in to env's server as kp (nil: anonymously) with
// client.Connect; the connection closes when the test ends.
func connect(t *testing.T, env *testenv.Env, kp nkeys.KeyPair) *client.Conn {
	t.Helper()
	nc, err := client.Connect(env.Server.ClientURL(), kp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// newHost is the default host (frontdesk), logged in and signing with
// env.Host.
func newHost(t *testing.T, env *testenv.Env, cfg client.HostConfig) *client.Host {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = testenv.HostName
	}
	h, err := client.NewHost(connect(t, env, env.Host), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// proposal decodes a fixture as the value a host would build.
func proposal(t *testing.T, fixture map[string]any) *schema.Proposal {
	t.Helper()
	p, err := schema.DecodeProposal(testenv.Body(t, fixture), 0)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// inventory is the lumber proposal for the nats provider "inventory",
// without a grant: it parks for approval.
func inventory(id string) map[string]any {
	p := testenv.Lumber(id)
	testenv.Set(p, "intent.provider", "inventory")
	testenv.Set(p, "intent.payload", map[string]any{"quantity": 20, "request_id": id})
	return p
}

// provider is a ProviderHandler of functions that records what it got.
type provider struct {
	mu         sync.Mutex
	dispatches []schema.DispatchRequest
	reconciles []schema.ReconcileRequest
	dispatch   func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error)
	reconcile  func(context.Context, schema.ReconcileRequest) (schema.AdapterReply, error)
}

func (p *provider) Dispatch(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
	p.mu.Lock()
	p.dispatches = append(p.dispatches, req)
	p.mu.Unlock()
	if p.dispatch != nil {
		return p.dispatch(ctx, req)
	}
	return schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "inv-" + req.IdempotencyKey[:8],
		EvidenceRefs: []string{"inventory:" + req.IdempotencyKey[:8]}}, nil
}

func (p *provider) Reconcile(ctx context.Context, req schema.ReconcileRequest) (schema.AdapterReply, error) {
	p.mu.Lock()
	p.reconciles = append(p.reconciles, req)
	p.mu.Unlock()
	if p.reconcile != nil {
		return p.reconcile(ctx, req)
	}
	return schema.AdapterReply{Outcome: schema.ReplyIndeterminate}, nil
}

func (p *provider) counts() (dispatches, reconciles int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.dispatches), len(p.reconciles)
}

// serveInventory serves provider "inventory" as the configured connector,
// through its own login, until the test ends.
func serveInventory(t *testing.T, env *testenv.Env, h client.ProviderHandler) *client.Connector {
	t.Helper()
	c, err := client.ServeConnector(connect(t, env, env.Connector).Conn, client.ConnectorConfig{Providers: []string{"inventory"}}, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

func hasIncident(o schema.Outcome, phase schema.Phase, code schema.Code) bool {
	for _, i := range o.Incidents {
		if i.Phase == phase && i.Code == code {
			return true
		}
	}
	return false
}

func kinds(outs []schema.Outcome) string {
	k := make([]string, len(outs))
	for i, o := range outs {
		k[i] = string(o.Kind)
	}
	return strings.Join(k, ",")
}
