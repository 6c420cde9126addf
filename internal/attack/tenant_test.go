package attack_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/policy"
	"github.com/portcullis/portcullis/subjects"
)

// TestFingerprintsIncludeTheTenant (finding 4): the fingerprint did not
// include the tenant, so B proposing A's exact intent got A's fingerprint,
// and with it A's receipt (or poisoned A's intent). Now B's copy of A's
// intent in B's own tenant is another fingerprint and its own dispatch; and
// B cannot name A's tenant or A's security domain at all.
func TestFingerprintsIncludeTheTenant(t *testing.T) {
	env := testenv.New(t)
	fake := env.Fakes["demo"]
	now := time.Now()
	a := grantedA(t, "same-a", 7, now)
	b := grantedB(t, "same-b", 7, now) // A's payload, referent and actor
	fpA, fpB := testenv.FingerprintOf(t, a, "sku-1001"), testenv.FingerprintOf(t, b, "sku-1001")
	if fpA == fpB {
		t.Fatalf("A's and B's copies of one intent share the fingerprint %s", fpA)
	}
	env.PublishSigned(t, a, env.Host)
	receiptA := confirmed(t, env.Recorder.Wait(t, "same-a", testenv.Terminal), fpA)
	env.PublishSigned(t, b, env.OtherHost)
	receiptB := confirmed(t, env.Recorder.Wait(t, refB("same-b"), testenv.Terminal), fpB)
	if receiptA == receiptB {
		t.Fatalf("B got A's receipt %s", receiptA)
	}
	if fake.Dispatches() != 2 || fake.DispatchesFor(keyOf(t, a)) != 1 || fake.DispatchesFor(keyOf(t, b)) != 1 {
		t.Fatalf("provider calls = %d (A %d, B %d), want one per tenant's intent", fake.Dispatches(), fake.DispatchesFor(keyOf(t, a)), fake.DispatchesFor(keyOf(t, b)))
	}

	// B names what is A's: A's security domain under B's tenant, A's tenant
	// and domain (carrying A's own grant, for A's fingerprint), A's tenant
	// with B's domain.
	aDomain := testenv.Granted(t, testenv.Set(testenv.Set(testenv.AsOtherTenant(intentOf("as-a-domain", 7)),
		"context.tenant.security_domain_ref", testenv.SecurityDomain), "grounding.scope", testenv.SecurityDomain), "sku-1001", now)
	aTenant := intentOf("as-a-tenant", 7)
	aTenant["grant"] = a["grant"]
	mixed := testenv.Granted(t, testenv.Set(testenv.AsOtherTenant(intentOf("as-a-tenant-b-domain", 7)),
		"context.tenant.tenant_ref", testenv.Tenant), "sku-1001", now)
	refused := []string{"as-a-domain", "as-a-tenant", "as-a-tenant-b-domain"}
	for _, p := range []map[string]any{aDomain, aTenant, mixed} {
		env.PublishSigned(t, p, env.OtherHost)
	}
	for _, id := range refused {
		o := env.Recorder.Wait(t, refB(id), testenv.Terminal)
		checkOutcome(t, o, schema.KindDenied, tenantNotPermitted)
		if o.Fingerprint != nil || o.Receipt != nil {
			t.Errorf("%s: a refused proposal carries a binding: %+v", id, o)
		}
	}

	h := settled(t, env)
	h.wantCodes(t, map[[2]string]int{tenantNotPermitted: 3})
	if h.total() != 5 {
		t.Errorf("%d outcome messages, want 5", h.total())
	}
	if n := fake.Dispatches(); n != 2 {
		t.Errorf("provider calls = %d, want 2", n)
	}
	if ids := testenv.ProposalIDs(env.StageEnvelopes(t, subjects.StageGrounding, 2)); len(ids) != 2 {
		t.Errorf("grounding received %v, want only same-a and same-b", ids)
	}
	if outs := h.on(env, hostA, "same-a"); len(outs) != 1 {
		t.Errorf("A's subject holds %d outcomes, want its own one", len(outs))
	}
}

// TestManagedPolicyCannotBeEscaped (finding 6): a managed policy matched on
// the security domain the proposal named, so B escaped its policy by
// naming a domain no policy covers. Now admission refuses any domain that
// is not B's tenant's before any policy is consulted, and B's real domain
// gets the policy's own code. Nothing reaches the provider.
func TestManagedPolicyCannotBeEscaped(t *testing.T) {
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) {
		c.Policies = []policy.ManagedPolicy{{
			Name:                 "guard-other",
			SecurityDomains:      []string{testenv.OtherSecurityDomain},
			LiveActionsForbidden: true,
			AllowedProviders:     []string{"inventory"},
		}}
	}))
	now := time.Now()
	proposal := func(id, domain, environment string, grant bool) map[string]any {
		p := testenv.AsOtherTenant(intentOf(id, 8))
		testenv.Set(p, "context.tenant.security_domain_ref", domain)
		testenv.Set(p, "grounding.scope", domain)
		testenv.Set(p, "intent.environment", environment)
		if grant {
			testenv.Granted(t, p, "sku-1001", now)
		}
		return p
	}
	const escape = "security-domain:not-other"
	cases := []struct {
		p     map[string]any
		kind  schema.Kind
		code  [2]string
		bound bool // the outcome carries the fingerprint
	}{
		{proposal("escape-live", escape, "live", true), schema.KindDenied, tenantNotPermitted, false},
		{proposal("escape-test", escape, "test", true), schema.KindDenied, tenantNotPermitted, false},
		{proposal("escape-parked", escape, "test", false), schema.KindDenied, tenantNotPermitted, false},
		{proposal("real-live", testenv.OtherSecurityDomain, "live", true), schema.KindDenied, pc(schema.PhaseAuthorization, schema.CodeLiveActionsForbidden), true},
		{proposal("real-test", testenv.OtherSecurityDomain, "test", true), schema.KindDenied, pc(schema.PhaseAuthorization, schema.CodeProviderNotAllowed), true},
		{proposal("real-parked", testenv.OtherSecurityDomain, "test", false), schema.KindDenied, pc(schema.PhaseAuthorization, schema.CodeProviderNotAllowed), true},
	}
	for _, c := range cases {
		env.PublishSigned(t, c.p, env.OtherHost)
	}
	want := map[[2]string]int{}
	for _, c := range cases {
		id := c.p["proposal_id"].(string)
		o := env.Recorder.Wait(t, refB(id), testenv.Terminal)
		checkOutcome(t, o, c.kind, c.code)
		if fp := testenv.FingerprintOf(t, c.p, "sku-1001"); c.bound && (o.Fingerprint == nil || *o.Fingerprint != fp) {
			t.Errorf("%s: outcome not bound to its fingerprint: %+v", id, o)
		}
		want[c.code]++
	}
	h := settled(t, env)
	h.wantCodes(t, want)
	if h.total() != len(cases) {
		t.Errorf("%d outcome messages, want %d", h.total(), len(cases))
	}
	if n := env.Fakes["demo"].Dispatches(); n != 0 {
		t.Errorf("provider calls = %d, want 0", n)
	}
	if got := env.StageEnvelopes(t, subjects.StageDispatch, 0); len(got) != 0 {
		t.Errorf("dispatch received %v", testenv.ProposalIDs(got))
	}
	if got := testenv.ProposalIDs(env.StageEnvelopes(t, subjects.StageGrounding, 0)); len(got) != 3 {
		t.Errorf("grounding received %v, want the three in B's real domain", got)
	}
}

// TestSignerMustBeTheSubjectsHost: a proposal signed by A but published on
// B's subject (and B's on A's) is not authenticated for that host: it gets
// only the ADMISSION_UNAUTHENTICATED event, no outcome on either host's
// subjects, and a log line saying which check failed. The same bodies sent
// correctly are new proposals.
func TestSignerMustBeTheSubjectsHost(t *testing.T) {
	env := testenv.New(t)
	now := time.Now()
	a, b := grantedA(t, "cross-a", 9, now), grantedB(t, "cross-b", 9, now)
	bodyA, bodyB := testenv.Body(t, a), testenv.Body(t, b)
	env.PublishWith(t, env.Subjects.Proposal(hostB), bodyA, testenv.Sign(t, env.Host, bodyA))
	env.PublishWith(t, env.Subjects.Proposal(hostA), bodyB, testenv.Sign(t, env.OtherHost, bodyB))
	waitEvents(t, env, unauthenticated, 2)
	h := settled(t, env)
	h.wantCodes(t, map[[2]string]int{unauthenticated: 2})
	if h.total() != 0 {
		t.Fatalf("cross-signed proposals got outcomes: %v", h.outcomes)
	}
	if n := bytes.Count(env.Logs.Bytes(), []byte(`"check":"key of another host"`)); n != 2 {
		t.Errorf("%d log lines say the key is another host's, want 2:\n%s", n, env.Logs.Bytes())
	}
	if ids := testenv.ProposalIDs(env.StageEnvelopes(t, subjects.StageGrounding, 0)); len(ids) != 0 {
		t.Errorf("grounding received %v", ids)
	}

	env.PublishSigned(t, a, env.Host)
	env.PublishSigned(t, b, env.OtherHost)
	confirmed(t, env.Recorder.Wait(t, "cross-a", testenv.Terminal), testenv.FingerprintOf(t, a, "sku-1001"))
	confirmed(t, env.Recorder.Wait(t, refB("cross-b"), testenv.Terminal), testenv.FingerprintOf(t, b, "sku-1001"))
	if n := env.Fakes["demo"].Dispatches(); n != 2 {
		t.Errorf("provider calls = %d, want 2", n)
	}
}
