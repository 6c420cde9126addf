package natsauth

import (
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/schema/trust"
)

// identity is a role's key pair in tests.
type identity struct {
	kp  nkeys.KeyPair
	pub string
}

func newIdentity(t testing.TB) identity {
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

// roles is the test configuration's identities: hosts A and B, connector
// cp (provider p) and cq (provider q), resolver r, sources s and s2,
// operator o, and the processor.
type roles struct {
	proc, hostA, hostB, cp, cq, resolver, source, source2, operator identity
}

func newRoles(t testing.TB) (*config.Config, roles) {
	t.Helper()
	r := roles{
		proc: newIdentity(t), hostA: newIdentity(t), hostB: newIdentity(t),
		cp: newIdentity(t), cq: newIdentity(t), resolver: newIdentity(t),
		source: newIdentity(t), source2: newIdentity(t), operator: newIdentity(t),
	}
	cfg := config.Defaults()
	cfg.Tenants = []trust.Tenant{{Ref: "t", SecurityDomains: []string{"d"}}}
	cfg.Hosts = []trust.Host{
		{Name: "A", PublicKey: r.hostA.pub, Tenants: []string{"t"}},
		{Name: "B", PublicKey: r.hostB.pub, Tenants: []string{"t"}},
	}
	for _, p := range []string{"p", "q"} {
		cfg.Providers = append(cfg.Providers, config.Provider{Name: p, Adapter: adapters.KindNATS,
			Timeout: config.DefaultProviderTimeout, UnavailableRetry: config.DefaultUnavailableRetry, MaxInFlight: 1})
	}
	cfg.Connectors = []config.Connector{
		{Name: "cp", PublicKey: r.cp.pub, Providers: []string{"p"}},
		{Name: "cq", PublicKey: r.cq.pub, Providers: []string{"q"}},
	}
	cfg.Resolvers = []config.Role{{Name: "r", PublicKey: r.resolver.pub}}
	cfg.Sources = []config.Role{{Name: "s", PublicKey: r.source.pub}, {Name: "s2", PublicKey: r.source2.pub}}
	cfg.Operators = []config.Role{{Name: "o", PublicKey: r.operator.pub}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg, r
}
