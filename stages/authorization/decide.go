// Package authorization is the stage between grounding and dispatch (SPEC
// §2.2, §2.7, §3 Authorization): it authorizes exactly the grounded
// operation with the proposal's inline grant, or parks the proposal
// durably until a standalone grant for it arrives on `<prefix>.grants.>` or
// approval.ttl passes. Managed policies restrict every grant; they never
// grant.
//
// decide.go is the pure part: what to do with a proposal or a grant, and
// the messages and activity that follow. stage.go gathers the state from
// Pebble and the authorization stream, records decisions and hands results
// to the runner.
package authorization

import (
	"time"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/policy"
	"github.com/portcullis/portcullis/internal/trust"
	"github.com/portcullis/portcullis/schema"
)

// Policy is what the stage decides with.
type Policy struct {
	// Managed are the configured managed_policy blocks, in config order.
	Managed []config.ManagedPolicy
	// ApprovalTTL is how long a proposal without a grant waits for one.
	ApprovalTTL time.Duration
	// AllowUnsigned accepts standalone grants without a host signature
	// (admission.allow_unsigned; development only).
	AllowUnsigned bool
	// MaxGrantBytes bounds a standalone grant's body (admission.max_payload_bytes).
	MaxGrantBytes int
	// Hosts may sign standalone grants for their tenants.
	Hosts []config.Host
}

// Decisions.
const (
	Park   = "park"   // no grant yet: NEEDS_APPROVAL, wait for one
	Permit = "permit" // hand the proposal to dispatch
	Deny   = "deny"   // DENIED with Code
)

// Verdict is the stage's decision about one proposal.
type Verdict struct {
	Decision string
	// Code is the denial's closed code; APPROVAL_REQUIRED when parked.
	Code string
	// Evaluations are the policy layers' verdicts, in order (for the
	// permit's hand-off and the activity record).
	Evaluations []schema.PolicyEvaluation
	// Grant is the grant judged, once it decoded; nil otherwise.
	Grant *schema.Grant
}

func fromDecision(d policy.Decision, g *schema.Grant) Verdict {
	v := Verdict{Decision: Permit, Code: d.Code, Evaluations: d.Evaluations, Grant: g}
	if !d.Permitted() {
		v.Decision = Deny
	}
	return v
}

func denyGrant(code string, g *schema.Grant) Verdict {
	return Verdict{
		Decision:    Deny,
		Code:        code,
		Evaluations: []schema.PolicyEvaluation{{Layer: policy.LayerGrant, Outcome: schema.EvalDeny, ReasonCode: code}},
		Grant:       g,
	}
}

// TimedOut is the verdict on a parked proposal whose approval.ttl passed.
func TimedOut() Verdict { return denyGrant(schema.CodeApprovalTimedOut, nil) }

// DecideProposal judges a grounded envelope as it arrives. With an inline
// grant (authenticated by the proposal's own signature at admission) it
// decides now. Without one, the managed-policy rules that do not need a
// grant are applied first, so that nobody is asked to approve what policy
// refuses anyway; what they allow is parked.
func DecideProposal(p Policy, env *schema.Envelope, nowMs int64) Verdict {
	t := policy.TargetOf(env)
	if g := env.Proposal.Grant; g != nil {
		return fromDecision(policy.Authorize(g, t, p.Managed, nowMs), g)
	}
	s := policy.Screen(p.Managed, t)
	if !s.Permitted() {
		return Verdict{Decision: Deny, Code: s.Code, Evaluations: s.Evaluations}
	}
	return Verdict{Decision: Park, Code: schema.CodeApprovalRequired, Evaluations: s.Evaluations}
}

// DecideGrant judges a standalone grant (body and headers as received) for
// the proposal parked with envelope env until expiresAtMs. In order: the
// approval must still be open (APPROVAL_TIMED_OUT); the grant must be
// signed by a configured host that may speak for the proposal's tenant, or
// be unsigned where that is allowed (GRANT_INTEGRITY_MISMATCH); it must
// decode strictly and name its proposal (GRANT_MALFORMED); then the grant
// checks and managed policies of policy.Authorize.
func DecideGrant(p Policy, env *schema.Envelope, expiresAtMs int64, body []byte, hdr nats.Header, nowMs int64) Verdict {
	if nowMs >= expiresAtMs {
		return TimedOut()
	}
	host, signed, err := trust.Authenticate(p.Hosts, body, hdr)
	if err != nil || (!signed && !p.AllowUnsigned) || (signed && !host.Speaks(env.Proposal.Context.Tenant.TenantRef)) {
		return denyGrant(schema.CodeGrantIntegrityMismatch, nil)
	}
	g, err := schema.DecodeGrant(body, p.MaxGrantBytes)
	if err != nil {
		return denyGrant(schema.CodeGrantMalformed, nil)
	}
	if g.ProposalID == "" {
		// Only an inline grant may leave its proposal implicit.
		return denyGrant(schema.CodeGrantMalformed, g)
	}
	return fromDecision(policy.Authorize(g, policy.TargetOf(env), p.Managed, nowMs), g)
}

// Outcome is the outcome of a verdict that parks or denies proposal
// proposalID, bound to fingerprint and referent. A parked proposal's
// outcome tells the frontend what to ask (summary, spend) and until when.
func Outcome(proposalID, fingerprint, referent string, v Verdict, atMs int64, approval *schema.Approval) schema.Outcome {
	o := schema.FailureOutcome(proposalID, schema.NewIncident(schema.PhaseAuthorization, v.Code), atMs)
	if fingerprint != "" {
		o.Fingerprint = schema.StringPtr(fingerprint)
	}
	if referent != "" {
		o.Referent = schema.StringPtr(referent)
	}
	if v.Decision == Park {
		o.Approval = approval
	}
	return o
}

// ApprovalRequest is what a frontend shows its user for a parked proposal.
func ApprovalRequest(env *schema.Envelope, expiresAtMs int64) *schema.Approval {
	return &schema.Approval{
		Fingerprint:   env.Grounded.Fingerprint,
		Summary:       env.Proposal.Intent.Display.Summary,
		ExternalSpend: env.Proposal.Intent.ExternalSpend,
		ExpiresAtMs:   expiresAtMs,
	}
}

// HandOff is the envelope a permitted proposal carries to dispatch: the
// grant that authorized it and every evaluation on the way.
func HandOff(env *schema.Envelope, v Verdict, atMs int64) schema.Envelope {
	out := *env
	out.Authorization = &schema.AuthorizationRecord{Grant: *v.Grant, Evaluations: v.Evaluations, DecidedAtMs: atMs}
	return out
}

// stale reports whether a decision recorded in the snapshot is newer than
// v, decided at atMs: snapshots are written after publishing, outside the
// per-proposal lock, so a parked proposal's write can land after the write
// of the grant that resumed it. At the same millisecond, a final decision
// is newer than a pending one.
func stale(recorded *schema.ActivityDecision, v Verdict, atMs int64) bool {
	if recorded == nil {
		return false
	}
	if recorded.DecidedAtMs != atMs {
		return recorded.DecidedAtMs > atMs
	}
	return v.Decision == Park && recorded.Outcome != decisionOutcome[Park]
}

// Activity statuses and decision outcomes of each decision.
var (
	activityStatus  = map[string]string{Park: schema.ActivityAwaitingApproval, Permit: schema.ActivityAuthorized, Deny: schema.ActivityDenied}
	decisionOutcome = map[string]string{Park: "pending", Permit: "permit", Deny: "deny"}
)

// ActivityEdit records a verdict in the intent's activity snapshot: the
// authorization section (never the grant's author or signature, the
// payload, or tenant and actor ids). env may be nil (an approval that
// timed out is decided from the Pebble record alone); then only the
// decision changes.
//
// The snapshot is per intent, and several proposals can carry one intent.
// Once one of them was authorized, or a receipt exists, the snapshot
// describes that one: a later proposal of the same intent is only listed,
// whatever its own decision (its outcome tells its proposer).
func ActivityEdit(proposalID string, env *schema.Envelope, v Verdict, atMs, approvalExpiresAtMs int64) func(a *schema.Activity) {
	return func(a *schema.Activity) {
		a.AddProposal(proposalID)
		if a.Receipt != nil || (a.Status == schema.ActivityAuthorized && v.Decision != Permit) || stale(a.Decision, v, atMs) {
			return
		}
		if env != nil {
			in := &env.Proposal.Intent
			a.Provider, a.Capability, a.Operation, a.Environment = in.Provider, in.Capability, in.Operation, in.Environment
			a.Referent = env.Grounded.Referent
			a.Summary = in.Display.Summary
			a.ExternalSpend = in.ExternalSpend
			a.Requester = env.Proposal.Requester
		}
		a.Status = activityStatus[v.Decision]
		a.PolicyEvaluations = append([]schema.PolicyEvaluation{}, v.Evaluations...)
		reason := v.Code
		if v.Decision == Permit {
			reason = ""
		}
		a.Decision = &schema.ActivityDecision{Outcome: decisionOutcome[v.Decision], ReasonCode: reason, DecidedAtMs: atMs}
		auth := &schema.ActivityAuthorization{ApprovalExpiresAtMs: approvalExpiresAtMs}
		if a.Authorization != nil && approvalExpiresAtMs == 0 {
			auth.ApprovalExpiresAtMs = a.Authorization.ApprovalExpiresAtMs
		}
		// Only a well-formed grant's fields are recorded: a malformed one's
		// method could be any string.
		if g := v.Grant; g != nil && g.Valid() {
			auth.Method, auth.Assurance = g.AuthorizationMethod, g.AuthenticationAssurance
			auth.IssuedAtMs, auth.ExpiresAtMs = g.IssuedAtMs, g.ExpiresAtMs
		}
		a.Authorization = auth
	}
}
