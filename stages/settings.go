package stages

import (
	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/schema"
)

// settings.go: what the stages decide with that comes from the
// configuration — whom to trust, how grants are judged — as small
// interfaces of public types. The engine satisfies them from its
// configuration (schema/trust.Policy, stages/policy.Rules), in one
// place; tests build the same values.

// Trust is whom the stages believe (SPEC §2.7): the configured hosts,
// their keys and the tenants each may speak for, and each tenant's
// security domains.
type Trust interface {
	// Authenticate checks that body, published on host h's subject with
	// header hdr, came from h: signed by h's key, or unsigned where that
	// is allowed (signed is false then). Its error says, value-free,
	// which check failed.
	Authenticate(h string, body []byte, hdr nats.Header) (signed bool, err error)
	// Speaks reports whether host h may speak for tenant, a configured
	// tenant.
	Speaks(h, tenant string) bool
	// Permits reports whether host h may speak for tenant in security
	// domain: the tenant is one of h's, and the domain one of the
	// tenant's.
	Permits(h, tenant, domain string) bool
}

// Grants judge grants and apply the managed policies (SPEC §2.2, §2.3).
type Grants interface {
	// JudgeGrant checks grant g (nil: none, APPROVAL_REQUIRED) against
	// the proposal of env at nowMs, then every managed policy that
	// applies: code is "" when every layer permits; evaluations are the
	// layers' verdicts, in order.
	JudgeGrant(g *schema.Grant, env *schema.Envelope, nowMs int64) (code schema.Code, evaluations []schema.PolicyEvaluation)
	// ScreenProposal applies the managed policies that need no grant.
	ScreenProposal(env *schema.Envelope) (code schema.Code, evaluations []schema.PolicyEvaluation)
}
