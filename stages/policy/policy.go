// Package policy decides whether a grant authorizes one exact grounded
// operation, and applies the configured managed policies on top (SPEC §2.2,
// §3 Authorization; seed 003). It is pure: no I/O, no clock of its own. The
// authorization stage uses it when a proposal or a grant arrives, and the
// dispatch stage uses it again just before calling a provider (SPEC §3
// Dispatch step 3), so that a grant that expired or a policy that tightened
// meanwhile still stops the call.
//
// It owns grant checks and managed policies, pure functions over schema
// types: it imports only schema. It sits beside the stages, public,
// because two of them use it and a stage imports no other stage; it is not
// a stage (internal/rules: rules.Shared).
package policy

import (
	"slices"
	"time"

	"github.com/portcullis/portcullis/schema"
)

// Target is the exact grounded operation being authorized: what the
// fingerprint binds plus what managed policies look at.
type Target struct {
	ProposalID     string
	Fingerprint    string
	SecurityDomain string
	Provider       string
	Capability     string
	Environment    string
	ExternalSpend  *schema.Spend
}

// TargetOf is the target of a grounded envelope (env.Grounded must be set).
func TargetOf(env *schema.Envelope) Target {
	p := &env.Proposal
	t := Target{
		ProposalID:     p.ProposalID,
		SecurityDomain: p.Context.Tenant.SecurityDomainRef,
		Provider:       p.Intent.Provider,
		Capability:     p.Intent.Capability,
		Environment:    p.Intent.Environment,
		ExternalSpend:  p.Intent.ExternalSpend,
	}
	if env.Grounded != nil {
		t.Fingerprint = env.Grounded.Fingerprint
	}
	return t
}

// LayerGrant is the evaluation layer of the grant checks.
const LayerGrant = "grant"

// Layer is the evaluation layer of a managed policy.
func Layer(policyName string) string { return "managed_policy:" + policyName }

// Decision is the verdict of one or more layers: the first failing code
// ("" permits) and every layer's evaluation, in order.
type Decision struct {
	Code        schema.Code
	Evaluations []schema.PolicyEvaluation
}

// Permitted reports whether no layer denied.
func (d Decision) Permitted() bool { return d.Code == "" }

func evaluation(layer string, code schema.Code) schema.PolicyEvaluation {
	if code == "" {
		return schema.PolicyEvaluation{Layer: layer, Outcome: schema.EvalPass}
	}
	return schema.PolicyEvaluation{Layer: layer, Outcome: schema.EvalDeny, ReasonCode: code}
}

// Rules are what a grant is judged with: the managed policies and the
// time rules of SPEC §2.2.
type Rules struct {
	// Managed are the configured managed_policy blocks, in config order.
	Managed []ManagedPolicy
	// ClockSkew is how far in the future issued_at_ms may lie (host
	// clocks drift); expiry is strict.
	ClockSkew time.Duration
	// MaxGrantLifetime bounds expires_at_ms − issued_at_ms; 0: unbounded.
	MaxGrantLifetime time.Duration
}

// Authorize checks grant g against target t at nowMs, then every managed
// policy that applies. Without a grant nothing is authorized
// (APPROVAL_REQUIRED): a managed policy never grants.
func (r Rules) Authorize(g *schema.Grant, t Target, nowMs int64) Decision {
	if g == nil {
		return Decision{Code: schema.CodeApprovalRequired}
	}
	code := r.CheckGrant(g, t, nowMs)
	d := Decision{Code: code, Evaluations: []schema.PolicyEvaluation{evaluation(LayerGrant, code)}}
	if code != "" {
		// Managed policies restrict a grant; a grant that failed has
		// nothing left to restrict, and its method and assurance may not
		// even be well formed.
		return d
	}
	m := Managed(r.Managed, g, t)
	d.Code = m.Code
	d.Evaluations = append(d.Evaluations, m.Evaluations...)
	return d
}

// Screen applies the managed-policy rules that do not depend on a grant
// (disabled, live forbidden, allow-lists, spend ceilings) to a proposal that
// has none yet, so that nobody is asked to approve what policy refuses
// anyway. Authorize applies them all again once a grant arrives.
func (r Rules) Screen(t Target) Decision {
	return Managed(r.Managed, nil, t)
}

// JudgeGrant is Authorize on env's target (stages.Grants).
func (r Rules) JudgeGrant(g *schema.Grant, env *schema.Envelope, nowMs int64) (schema.Code, []schema.PolicyEvaluation) {
	d := r.Authorize(g, TargetOf(env), nowMs)
	return d.Code, d.Evaluations
}

// ScreenProposal is Screen on env's target (stages.Grants).
func (r Rules) ScreenProposal(env *schema.Envelope) (schema.Code, []schema.PolicyEvaluation) {
	d := r.Screen(TargetOf(env))
	return d.Code, d.Evaluations
}

// CheckGrant returns the first grant check that fails, in this order, or "":
// well formed (GRANT_MALFORMED); bound to this proposal and fingerprint
// (GRANT_BINDING_MISMATCH); a window no longer than MaxGrantLifetime
// (GRANT_LIFETIME_EXCEEDED); inside it (GRANT_NOT_YET_VALID, GRANT_EXPIRED);
// a test_fixture grant never authorizes live (TEST_GRANT_FOR_LIVE_ACTION);
// a spend needs a same-currency ceiling at least the amount
// (EXTERNAL_SPEND_EXCEEDS_GRANT). Authentication is the caller's: it
// depends on how the grant arrived.
func (r Rules) CheckGrant(g *schema.Grant, t Target, nowMs int64) schema.Code {
	if !g.Valid() {
		return schema.CodeGrantMalformed
	}
	if (g.ProposalID != "" && g.ProposalID != t.ProposalID) || g.IntentFingerprint != t.Fingerprint {
		return schema.CodeGrantBindingMismatch
	}
	if code := r.CheckWindow(g, nowMs); code != "" {
		return code
	}
	if g.AuthorizationMethod == schema.MethodTestFixture && t.Environment == schema.EnvLive {
		return schema.CodeTestGrantForLiveAction
	}
	if s := t.ExternalSpend; s != nil {
		c := g.MaxExternalSpend
		if c == nil || c.Currency != s.Currency || c.AmountMinor < s.AmountMinor {
			return schema.CodeExternalSpendExceedsGrant
		}
	}
	return ""
}

// CheckWindow checks the grant's lifetime, then
// issued_at_ms − ClockSkew ≤ now < expires_at_ms.
func (r Rules) CheckWindow(g *schema.Grant, nowMs int64) schema.Code {
	switch {
	case r.MaxGrantLifetime > 0 && g.ExpiresAtMs-g.IssuedAtMs > r.MaxGrantLifetime.Milliseconds():
		return schema.CodeGrantLifetimeExceeded
	case nowMs < g.IssuedAtMs-r.ClockSkew.Milliseconds():
		return schema.CodeGrantNotYetValid
	case nowMs >= g.ExpiresAtMs:
		return schema.CodeGrantExpired
	}
	return ""
}

// managedOrder is the order in which managed-policy restrictions apply
// (seed 003): across all matching policies, an earlier rule's denial wins
// over a later rule's, whatever the order of the blocks in the config.
var managedOrder = []schema.Code{
	schema.CodeExternalActionsDisabled,
	schema.CodeAutomaticApprovalForbidden,
	schema.CodeLiveActionsForbidden,
	schema.CodeProviderNotAllowed,
	schema.CodeCapabilityNotAllowed,
	schema.CodeEnvironmentNotAllowed,
	schema.CodeAuthenticationTooWeak,
	schema.CodeExternalSpendExceedsPolicy,
}

// Applies reports whether a managed policy applies in a security domain: a
// policy without security_domains applies everywhere.
func Applies(p *ManagedPolicy, securityDomain string) bool {
	return p.SecurityDomains == nil || slices.Contains(p.SecurityDomains, securityDomain)
}

// Managed evaluates every managed policy that applies to t, each on its own
// (one evaluation per policy, in config order), and returns the denial of
// the earliest rule in managedOrder (the first such policy on a tie). With
// g nil, the rules about the grant (automatic approval, assurance) are
// skipped: see Screen.
func Managed(policies []ManagedPolicy, g *schema.Grant, t Target) Decision {
	var d Decision
	best := len(managedOrder)
	for i := range policies {
		p := &policies[i]
		if !Applies(p, t.SecurityDomain) {
			continue
		}
		code := CheckManaged(p, g, t)
		d.Evaluations = append(d.Evaluations, evaluation(Layer(p.Name), code))
		if code == "" {
			continue
		}
		if rank := slices.Index(managedOrder, code); rank < best {
			best, d.Code = rank, code
		}
	}
	return d
}

// CheckManaged returns the first restriction of one managed policy that t
// (with grant g, if any) fails, in managedOrder, or "". An absent key
// restricts nothing; a present list restricts to its members (an empty list
// allows nothing); a spend map allows only the currencies it lists, each up
// to its ceiling.
func CheckManaged(p *ManagedPolicy, g *schema.Grant, t Target) schema.Code {
	switch {
	case p.Disabled:
		return schema.CodeExternalActionsDisabled
	case p.AutomaticApprovalForbidden && g != nil && slices.Contains(schema.AutomaticMethods(), g.AuthorizationMethod):
		return schema.CodeAutomaticApprovalForbidden
	case p.LiveActionsForbidden && t.Environment == schema.EnvLive:
		return schema.CodeLiveActionsForbidden
	case p.AllowedProviders != nil && !slices.Contains(p.AllowedProviders, t.Provider):
		return schema.CodeProviderNotAllowed
	case p.AllowedCapabilities != nil && !slices.Contains(p.AllowedCapabilities, t.Capability):
		return schema.CodeCapabilityNotAllowed
	case p.AllowedEnvironments != nil && !slices.Contains(p.AllowedEnvironments, t.Environment):
		return schema.CodeEnvironmentNotAllowed
	case p.MinimumAuthenticationAssurance != "" && g != nil && !strongEnough(g.AuthenticationAssurance, p.MinimumAuthenticationAssurance):
		return schema.CodeAuthenticationTooWeak
	case p.MaxExternalSpend != nil && t.ExternalSpend != nil && !withinCeiling(p.MaxExternalSpend, t.ExternalSpend):
		return schema.CodeExternalSpendExceedsPolicy
	}
	return ""
}

// strongEnough fails closed: an assurance or minimum outside the closed
// scale (config validation refuses such a minimum) never satisfies.
func strongEnough(have, minimum string) bool {
	h, m := schema.AssuranceRank(have), schema.AssuranceRank(minimum)
	return h >= 0 && m >= 0 && h >= m
}

func withinCeiling(ceilings map[string]int64, s *schema.Spend) bool {
	c, ok := ceilings[s.Currency]
	return ok && s.AmountMinor <= c
}

// ManagedPolicy is an organization's restriction layer (seed 003). Unset
// restrictions do not restrict; a managed policy never grants.
type ManagedPolicy struct {
	Name string
	// SecurityDomains limits the policy to these security_domain_refs; nil: all.
	SecurityDomains []string
	// Disabled refuses every external action (EXTERNAL_ACTIONS_DISABLED).
	Disabled bool
	// AutomaticApprovalForbidden refuses grants whose method is policy,
	// adversarial_auto or managed_policy.
	AutomaticApprovalForbidden bool
	// LiveActionsForbidden refuses environment "live".
	LiveActionsForbidden bool
	// AllowedProviders, AllowedCapabilities, AllowedEnvironments are
	// allow-lists; nil: anything.
	AllowedProviders    []string
	AllowedCapabilities []string
	AllowedEnvironments []string
	// MinimumAuthenticationAssurance is the weakest grant assurance accepted; "" none.
	MinimumAuthenticationAssurance string
	// MaxExternalSpend maps a currency to its ceiling in minor units. nil: no
	// spend restriction; set: a currency without a ceiling is refused.
	MaxExternalSpend map[string]int64
}
