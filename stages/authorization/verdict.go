package authorization

import (
	"errors"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/trust"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/policy"
)

// Policy is what the stage decides with.
type Policy struct {
	// Rules judge grants: managed policies, clock skew, grant lifetime
	// (policy.Rules). nil: policy.Rules{}.
	Rules stages.Grants
	// ApprovalTTL is how long a proposal without a grant waits for one.
	ApprovalTTL time.Duration
	// MaxGrantBytes bounds a standalone grant's body (admission.max_payload_bytes).
	MaxGrantBytes int
	// Trust authenticates standalone grants and declines, which hosts
	// sign for their own proposals (unsigned ones only under
	// admission.allow_unsigned, development only), and says which tenants
	// and security domains each host may speak for (trust.Policy). nil:
	// nothing is authenticated.
	Trust stages.Trust
}

// grants are p.Rules, policy.Rules{} when unset.
func (p Policy) grants() stages.Grants {
	if p.Rules == nil {
		return policy.Rules{}
	}
	return p.Rules
}

// trust is p.Trust, trust.Policy{} (no host) when unset.
func (p Policy) trust() stages.Trust {
	if p.Trust == nil {
		return trust.Policy{}
	}
	return p.Trust
}

// Decisions.
const (
	Park   = "park"   // no grant yet: NEEDS_APPROVAL, wait for one
	Permit = "permit" // hand the proposal to dispatch
	Deny   = "deny"   // DENIED with Code
	// Keep leaves a parked proposal parked: a standalone message that
	// changes nothing gets only the incident event Event.
	Keep = "keep"
)

// Ruling is the authorization decision about one proposal: park, permit,
// deny, or keep it parked.
type Ruling struct {
	Decision string
	// Code is the denial's closed code; APPROVAL_REQUIRED when parked.
	Code schema.Code
	// Evaluations are the policy layers' verdicts, in order (for the
	// permit's hand-off and the activity record).
	Evaluations []schema.PolicyEvaluation
	// Grant is the grant judged, once it decoded; nil otherwise.
	Grant *schema.Grant
	// Bound: a Permit without a grant, because the intent is dispatched
	// already (see schema.AuthorizationRecord.Bound).
	Bound bool
	// Event is the incident event of a Keep.
	Event *schema.Incident
}

func keep(phase schema.Phase, code schema.Code) Ruling {
	inc := schema.NewIncident(phase, code)
	return Ruling{Decision: Keep, Code: code, Event: &inc}
}

func fromDecision(code schema.Code, evaluations []schema.PolicyEvaluation, g *schema.Grant) Ruling {
	v := Ruling{Decision: Permit, Code: code, Evaluations: evaluations, Grant: g}
	if code != "" {
		v.Decision = Deny
	}
	return v
}

func denyGrant(code schema.Code, g *schema.Grant) Ruling {
	return Ruling{
		Decision:    Deny,
		Code:        code,
		Evaluations: []schema.PolicyEvaluation{{Layer: policy.LayerGrant, Outcome: schema.EvalDeny, ReasonCode: code}},
		Grant:       g,
	}
}

// TimedOut is the verdict on a parked proposal whose approval.ttl passed.
func TimedOut() Ruling { return denyGrant(schema.CodeApprovalTimedOut, nil) }

// DecideProposal judges a grounded envelope as it arrives. With an inline
// grant (authenticated by the proposal's own signature at admission) it
// decides now. Without one, the managed-policy rules that do not need a
// grant are applied first, so that nobody is asked to approve what policy
// refuses anyway; what they allow is parked.
func DecideProposal(p Policy, env *schema.Envelope, nowMs int64) Ruling {
	if g := env.Proposal.Grant; g != nil {
		code, evals := p.grants().JudgeGrant(g, env, nowMs)
		return fromDecision(code, evals, g)
	}
	code, evals := p.grants().ScreenProposal(env)
	if code != "" {
		return Ruling{Decision: Deny, Code: code, Evaluations: evals}
	}
	return Ruling{Decision: Park, Code: schema.CodeApprovalRequired, Evaluations: evals}
}

// Standalone is a message read from host h's grants subject: a grant or a
// decline, authenticated for h.
type Standalone struct {
	// Host is h, the host the message is authenticated for.
	Host   string
	Signed bool
	// ProposalID names the parked proposal; "" when it cannot be read.
	ProposalID string
	// Decline is set for a decline (schema actions.decline.v1), valid or not.
	Decline *schema.Decline
	// Grant is the strictly decoded grant; nil for a decline or a grant that
	// does not decode (then Malformed).
	Grant     *schema.Grant
	Malformed bool
	// Problems say, value-free, why a grant did not decode.
	Problems []schema.Problem
}

// ReadStandalone authenticates and decodes a message that arrived on host
// h's grants subject. A message nothing proves came from h gets the event
// ADMISSION_UNAUTHENTICATED and changes nothing (SPEC §2.2); its error says
// which check failed, for the log.
func ReadStandalone(p Policy, h string, body []byte, hdr nats.Header) (Standalone, *schema.Incident, error) {
	signed, err := p.trust().Authenticate(h, body, hdr)
	if err != nil {
		inc := schema.NewIncident(schema.PhaseAdmission, schema.CodeAdmissionUnauthenticated)
		return Standalone{}, &inc, err
	}
	m := Standalone{Host: h, Signed: signed}
	if len(body) <= schema.MaxMessageBytes {
		m.ProposalID, _ = schema.PeekProposalID(body)
	}
	if peekSchema(body) == schema.SchemaDecline {
		var d schema.Decline
		if schema.Decode(body, &d) != nil || !d.Valid() {
			d = schema.Decline{Schema: schema.SchemaDecline} // changes nothing: see DecideStandalone
		}
		m.Decline = &d
		return m, nil, nil
	}
	g, err := schema.DecodeGrant(body, p.MaxGrantBytes)
	if err != nil {
		m.Malformed = true
		var ve *schema.ValidationError
		if errors.As(err, &ve) {
			m.Problems = ve.Problems
		}
		return m, nil, nil
	}
	m.Grant = g
	if g.ProposalID != "" {
		m.ProposalID = g.ProposalID
	}
	return m, nil, nil
}

// peekSchema reads a body's top-level "schema" string, leniently.
func peekSchema(body []byte) string {
	var v struct {
		Schema string `json:"schema"`
	}
	if len(body) > schema.MaxMessageBytes || !schema.WithinDepth(body, schema.MaxDepth) || json.Unmarshal(body, &v) != nil {
		return ""
	}
	return v.Schema
}

// DecideStandalone judges an authenticated grant or decline for the
// proposal parked with envelope env and fingerprint fp until expiresAtMs
// (env may be nil when the envelope could not be read; the caller handles
// that). A host that may not speak for the parked proposal's tenant and
// domain changes nothing (ADMISSION_UNAUTHENTICATED); neither does a
// decline that is malformed or names another fingerprint (GRANT_UNMATCHED),
// nor a grant that is not yet valid (GRANT_NOT_YET_VALID: a valid grant can
// still come). A matching decline ends the proposal APPROVAL_DECLINED; a
// grant ends it like an inline one (SPEC §2.2).
func DecideStandalone(p Policy, m Standalone, env *schema.Envelope, fp string, expiresAtMs, nowMs int64) Ruling {
	tenant := &env.Proposal.Context.Tenant
	if m.Signed && !p.trust().Permits(m.Host, tenant.TenantRef, tenant.SecurityDomainRef) {
		return keep(schema.PhaseAdmission, schema.CodeAdmissionUnauthenticated)
	}
	if d := m.Decline; d != nil {
		if d.IntentFingerprint == "" || d.IntentFingerprint != fp {
			return keep(schema.PhaseAuthorization, schema.CodeGrantUnmatched)
		}
		return denyGrant(schema.CodeApprovalDeclined, nil)
	}
	if nowMs >= expiresAtMs {
		return TimedOut()
	}
	if m.Malformed {
		return denyGrant(schema.CodeGrantMalformed, nil)
	}
	code, evals := p.grants().JudgeGrant(m.Grant, env, nowMs)
	v := fromDecision(code, evals, m.Grant)
	if v.Code == schema.CodeGrantNotYetValid {
		return keep(schema.PhaseAuthorization, schema.CodeGrantNotYetValid)
	}
	return v
}

// Outcome is the outcome of a verdict that parks or denies proposal to,
// bound to fingerprint and referent. A parked proposal's
// outcome tells the frontend what to ask (summary, spend) and until when.
func Outcome(to schema.ProposalRef, fingerprint, referent string, v Ruling, atMs int64, approval *schema.Approval) schema.Outcome {
	o := schema.FailureOutcome(to, schema.NewIncident(schema.PhaseAuthorization, v.Code), atMs)
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
func HandOff(env *schema.Envelope, v Ruling, atMs int64) schema.Envelope {
	out := *env
	out.Authorization = &schema.AuthorizationRecord{Evaluations: v.Evaluations, DecidedAtMs: atMs, Bound: v.Bound}
	if v.Grant != nil {
		out.Authorization.Grant = *v.Grant
	}
	return out
}

// stale reports whether a decision recorded in the snapshot is newer than
// v, decided at atMs: snapshots are written after publishing, outside the
// per-proposal lock, so a parked proposal's write can land after the write
// of the grant that resumed it. At the same millisecond, a final decision
// is newer than a pending one.
func stale(recorded *schema.ActivityDecision, v Ruling, atMs int64) bool {
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

// ActivityChange records a ruling in the intent's activity snapshot (see
// Apply). It is data, not a closure: a step's Decision carries it, and the
// shell applies it once the outcomes are acknowledged.
type ActivityChange struct {
	Ref schema.ProposalRef
	// Env may be nil (an approval that timed out is decided from the
	// record alone); then only the decision changes.
	Env                 *schema.Envelope
	Ruling              Ruling
	AtMs                int64
	ApprovalExpiresAtMs int64
}

// ActivityEdit is the change that records ruling v of the proposal ref at
// atMs.
func ActivityEdit(ref schema.ProposalRef, env *schema.Envelope, v Ruling, atMs, approvalExpiresAtMs int64) *ActivityChange {
	return &ActivityChange{Ref: ref, Env: env, Ruling: v, AtMs: atMs, ApprovalExpiresAtMs: approvalExpiresAtMs}
}

// HandedOffActivity is the activity edit authorization made when it
// handed env on to dispatch (a permit), rebuilt from env alone; nil for
// an envelope without an authorization record. Authorization's own write
// of it waits to share dispatch's (kv.Activity.UpdateFollowed) and is
// lost should its process die first: dispatch applies this before its
// own edit, so that the snapshot holds the permit all the same (applied
// twice it changes nothing).
func HandedOffActivity(env *schema.Envelope) func(a *schema.Activity) {
	r := env.Authorization
	if r == nil {
		return nil
	}
	v := Ruling{Decision: Permit, Evaluations: r.Evaluations, Bound: r.Bound}
	if !r.Bound {
		g := r.Grant
		v.Grant = &g
	}
	ref := schema.ProposalRef{Host: env.Host, ProposalID: env.Proposal.ProposalID}
	return ActivityEdit(ref, env, v, r.DecidedAtMs, 0).Apply
}

// Apply records the ruling in the snapshot a: the authorization section
// (never the grant's author or signature, the payload, or tenant and actor
// ids).
//
// The snapshot is per intent, and several proposals can carry one intent.
// Once one of them was authorized, or a receipt exists, the snapshot
// describes that one: a later proposal of the same intent is only listed,
// whatever its own decision (its outcome tells its proposer).
func (c *ActivityChange) Apply(a *schema.Activity) {
	a.AddProposal(c.Ref)
	if a.Receipt != nil || (a.Status == schema.ActivityAuthorized && c.Ruling.Decision != Permit) || stale(a.Decision, c.Ruling, c.AtMs) {
		return
	}
	if env := c.Env; env != nil {
		in := &env.Proposal.Intent
		a.Provider, a.Capability, a.Operation, a.Environment = in.Provider, in.Capability, in.Operation, in.Environment
		a.Referent = env.Grounded.Referent
		a.Summary = in.Display.Summary
		a.ExternalSpend = in.ExternalSpend
		a.Requester = env.Proposal.Requester
	}
	a.Status = activityStatus[c.Ruling.Decision]
	a.PolicyEvaluations = append([]schema.PolicyEvaluation{}, c.Ruling.Evaluations...)
	reason := c.Ruling.Code
	if c.Ruling.Decision == Permit {
		reason = ""
	}
	a.Decision = &schema.ActivityDecision{Outcome: decisionOutcome[c.Ruling.Decision], ReasonCode: reason, DecidedAtMs: c.AtMs}
	auth := &schema.ActivityAuthorization{ApprovalExpiresAtMs: c.ApprovalExpiresAtMs}
	if a.Authorization != nil && c.ApprovalExpiresAtMs == 0 {
		auth.ApprovalExpiresAtMs = a.Authorization.ApprovalExpiresAtMs
	}
	// Only a well-formed grant's fields are recorded: a malformed one's
	// method could be any string.
	if g := c.Ruling.Grant; g != nil && g.Valid() {
		auth.Method, auth.Assurance = g.AuthorizationMethod, g.AuthenticationAssurance
		auth.IssuedAtMs, auth.ExpiresAtMs = g.IssuedAtMs, g.ExpiresAtMs
	}
	a.Authorization = auth
}
