package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// ErrNoProcessor is returned when nobody answers on the admin subject: no
// processor runs with this prefix on this NATS server.
var ErrNoProcessor = errors.New("admin: no processor answers")

// DefaultTimeout bounds a request. A resolve may wait for a poll in
// progress on the same fingerprint (up to the provider's timeout).
const DefaultTimeout = 30 * time.Second

// Client asks a running processor. Every request is stamped (the time,
// a fresh nonce) and, with Key, signed.
type Client struct {
	NC       *nats.Conn
	Subjects subjects.Subjects
	// Timeout bounds each request; 0: DefaultTimeout.
	Timeout time.Duration
	// Key is the operator's nkey pair (seed) that signs every request. nil:
	// requests go unsigned, and only a processor that accepts unsigned
	// input (`processor run --dev`) answers them with anything but
	// unauthenticated.
	Key nkeys.KeyPair
	// Now is the clock of requested_at_ms; nil: time.Now.
	Now func() time.Time
}

func (c *Client) now() time.Time {
	if c.Now == nil {
		return time.Now()
	}
	return c.Now()
}

func call[T any](ctx context.Context, c *Client, verb string, req stamped) (*T, error) {
	st, err := NewStamp(c.now())
	if err != nil {
		return nil, err
	}
	*req.stamp() = st
	body, err := schema.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("admin: encode request: %w", err)
	}
	msg := &nats.Msg{Data: body}
	if c.Key != nil {
		if msg.Header, err = Sign(c.Key, body); err != nil {
			return nil, err
		}
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	subject := c.Subjects.Admin(verb)
	msg.Subject = subject
	m, err := c.NC.RequestMsgWithContext(ctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("%w on %s", ErrNoProcessor, subject)
	case err != nil && ctx.Err() != nil && !errors.Is(context.Cause(ctx), ctx.Err()):
		// The caller ended the request for a reason of its own (a
		// permissions violation on its connection): that reason.
		return nil, fmt.Errorf("admin: %s: %w", subject, context.Cause(ctx))
	case err != nil:
		return nil, fmt.Errorf("admin: %s: %w", subject, err)
	}
	var r reply[T]
	if err := schema.Decode(m.Data, &r); err != nil {
		return nil, fmt.Errorf("admin: %s: reply: %w", subject, err)
	}
	if r.Error != nil {
		return nil, r.Error
	}
	if r.Result == nil {
		return nil, fmt.Errorf("admin: %s: empty reply", subject)
	}
	return r.Result, nil
}

// Target names an intent: by its fingerprint, or by one of its proposals
// (the processor looks up the fingerprint it was grounded to).
type Target struct {
	Fingerprint string
	Proposal    *schema.ProposalRef
}

// String is the fingerprint, or "<host>/<proposal_id>".
func (t Target) String() string {
	if t.Proposal != nil {
		return t.Proposal.String()
	}
	return t.Fingerprint
}

// Receipts returns a fingerprint's receipt history.
func (c *Client) Receipts(ctx context.Context, fingerprint string) (*Receipts, error) {
	return c.ReceiptsOf(ctx, Target{Fingerprint: fingerprint})
}

// ReceiptsOf returns the receipt history of a fingerprint or of the
// fingerprint a proposal was grounded to.
func (c *Client) ReceiptsOf(ctx context.Context, t Target) (*Receipts, error) {
	return call[Receipts](ctx, c, subjects.AdminReceipt, &ReceiptsRequest{Fingerprint: t.Fingerprint, Proposal: t.Proposal})
}

// List returns the indeterminate queue.
func (c *Client) List(ctx context.Context) (*List, error) {
	return call[List](ctx, c, subjects.AdminReconcileList, &ListRequest{})
}

// Resolve records that an indeterminate effect is present or absent.
func (c *Client) Resolve(ctx context.Context, fingerprint string, present bool, evidenceRef string) (*Resolved, error) {
	return c.ResolveTarget(ctx, Target{Fingerprint: fingerprint}, present, evidenceRef)
}

// ResolveTarget records that the indeterminate effect of a fingerprint, or
// of the fingerprint a proposal was grounded to, is present or absent.
func (c *Client) ResolveTarget(ctx context.Context, t Target, present bool, evidenceRef string) (*Resolved, error) {
	return c.ResolveChecked(ctx, t, present, evidenceRef, ResolveChecks{})
}

// ResolveChecked is ResolveTarget held to what the operator examined
// (ResolveChecks).
func (c *Client) ResolveChecked(ctx context.Context, t Target, present bool, evidenceRef string, checks ResolveChecks) (*Resolved, error) {
	effect := EffectAbsent
	if present {
		effect = EffectPresent
	}
	return call[Resolved](ctx, c, subjects.AdminReconcileSolve, &ResolveRequest{Fingerprint: t.Fingerprint, Proposal: t.Proposal,
		Effect: effect, EvidenceRef: evidenceRef, ResolveChecks: checks})
}

// Approvals lists the proposals parked for approval, the soonest to expire
// first; limit 0: DefaultApprovalsLimit.
func (c *Client) Approvals(ctx context.Context, limit int) (*Approvals, error) {
	return call[Approvals](ctx, c, subjects.AdminApprovalsList, &ApprovalsRequest{Limit: limit})
}

// Proposal returns what the processor knows of one proposal: its outcome
// history, fingerprint, authorization record and latest receipt.
func (c *Client) Proposal(ctx context.Context, ref schema.ProposalRef) (*Proposal, error) {
	return call[Proposal](ctx, c, subjects.AdminProposalGet, &ProposalRequest{Host: ref.Host, ProposalID: ref.ProposalID})
}

// Activity lists activity snapshots, the most recently changed first:
// limit 0 is DefaultActivityLimit; before 0 starts at the newest, else at
// the Next of a previous page.
func (c *Client) Activity(ctx context.Context, limit int, before uint64) (*ActivityList, error) {
	return call[ActivityList](ctx, c, subjects.AdminActivityList, &ActivityListRequest{Limit: limit, Before: before})
}
