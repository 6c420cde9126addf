package client

import (
	"context"
	"fmt"
	"time"

	"github.com/portcullis/portcullis/schema"
)

// GrantOptions are the approver's inputs to a grant (SPEC §2.2). The rest
// comes from the NEEDS_APPROVAL outcome.
type GrantOptions struct {
	// AuthorizedBy names who approved, e.g. the actor's ref. Required: one
	// line, at most 512 bytes.
	AuthorizedBy string

	// Method is the authorization method: manual (the default), policy,
	// adversarial_auto, managed_policy or test_fixture. Managed policies
	// may refuse the automatic ones; test_fixture never authorizes live.
	Method string

	// Assurance is how strongly the approver was authenticated: none,
	// session, biometric or managed. Required. Managed policies may demand a
	// minimum, and a disclosure that requires reauthentication needs
	// biometric or managed from the resolver.
	Assurance string

	// Lifetime is how long the grant is valid from now. Zero means
	// DefaultGrantLifetime.
	Lifetime time.Duration

	// MaxExternalSpend is the spend ceiling. Nil means exactly the spend the
	// approval shows (approval.external_spend; none when it shows none).
	MaxExternalSpend *schema.Spend

	// ExpectFingerprint, when set, is the fingerprint the host computed
	// itself (Fingerprint) for the proposal and the referent it expects:
	// Grant refuses (ErrFingerprintMismatch) an approval for anything else
	// and sends nothing. Set it: never approve an intent you did not
	// compute.
	ExpectFingerprint string
}

// Grant approves a parked proposal: parked must be the NEEDS_APPROVAL
// outcome of one of this host's proposals (from a Tracker, or Last). Grant
// builds the grant from parked's approval block and opts (issued now, valid
// for opts.Lifetime), checks it, and publishes it signed on
// `<prefix>.grants.<h>`, returning what it sent once the grants stream
// stored it. The processor then dispatches the proposal or denies it with
// the grant's code; await the result on the proposal's Tracker.
//
// A grant that names no parked proposal (decided already, timed out) or is
// not authenticated changes nothing and gets no outcome, only an incident
// event (GRANT_UNMATCHED, ADMISSION_UNAUTHENTICATED).
func (h *Host) Grant(ctx context.Context, parked schema.Outcome, opts GrantOptions) (schema.Grant, error) {
	if err := h.checkParked(&parked, opts.ExpectFingerprint); err != nil {
		return schema.Grant{}, err
	}
	method := opts.Method
	if method == "" {
		method = schema.MethodManual
	}
	lifetime := opts.Lifetime
	if lifetime <= 0 {
		lifetime = DefaultGrantLifetime
	}
	spend := opts.MaxExternalSpend
	if spend == nil && parked.Approval.ExternalSpend != nil {
		s := *parked.Approval.ExternalSpend
		spend = &s
	}
	now := time.Now()
	g := schema.Grant{
		Schema:                  schema.SchemaGrant,
		ProposalID:              parked.ProposalID,
		IntentFingerprint:       parked.Approval.Fingerprint,
		AuthorizedBy:            opts.AuthorizedBy,
		AuthorizationMethod:     method,
		AuthenticationAssurance: opts.Assurance,
		IssuedAtMs:              now.UnixMilli(),
		ExpiresAtMs:             now.Add(lifetime).UnixMilli(),
		MaxExternalSpend:        spend,
	}
	if !g.Valid() {
		return schema.Grant{}, fmt.Errorf("%w: grant: authorized_by, method, assurance or spend ceiling breaks its format", ErrInvalid)
	}
	if _, err := h.publish(ctx, h.subj.Grant(h.name), []string{h.subj.HostGrantsStream(h.name), h.subj.GrantsStream()}, schema.MustMarshal(g)); err != nil {
		return schema.Grant{}, err
	}
	return g, nil
}

// Decline tells the processor that the user declined a parked proposal: it
// publishes, signed on `<prefix>.grants.<h>`, a decline bound to parked's
// proposal and approval fingerprint. The proposal then ends
// DENIED/APPROVAL_DECLINED. declinedBy names who declined (one line, at
// most 512 bytes).
func (h *Host) Decline(ctx context.Context, parked schema.Outcome, declinedBy string) (schema.Decline, error) {
	if err := h.checkParked(&parked, ""); err != nil {
		return schema.Decline{}, err
	}
	d := schema.Decline{
		Schema:            schema.SchemaDecline,
		ProposalID:        parked.ProposalID,
		IntentFingerprint: parked.Approval.Fingerprint,
		DeclinedBy:        declinedBy,
	}
	if !d.Valid() {
		return schema.Decline{}, fmt.Errorf("%w: decline: declined_by breaks its format", ErrInvalid)
	}
	if _, err := h.publish(ctx, h.subj.Grant(h.name), []string{h.subj.HostGrantsStream(h.name), h.subj.GrantsStream()}, schema.MustMarshal(d)); err != nil {
		return schema.Decline{}, err
	}
	return d, nil
}

func (h *Host) checkParked(o *schema.Outcome, expect string) error {
	switch {
	case o.Kind != schema.KindNeedsApproval || o.Approval == nil:
		return fmt.Errorf("%w: outcome is %s, not NEEDS_APPROVAL with an approval", ErrNotParked, o.Kind)
	case o.Host != "" && o.Host != h.name:
		return fmt.Errorf("%w: outcome of host %q, not %q", ErrNotParked, o.Host, h.name)
	case !schema.ValidProposalID(o.ProposalID) || !schema.ValidFingerprint(o.Approval.Fingerprint):
		return fmt.Errorf("%w: outcome without a valid proposal_id and fingerprint", ErrNotParked)
	case expect != "" && expect != o.Approval.Fingerprint:
		return fmt.Errorf("%w: approval for %s, expected %s", ErrFingerprintMismatch, o.Approval.Fingerprint, expect)
	}
	return nil
}
