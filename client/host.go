package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// Defaults of HostConfig.
const (
	// DefaultTimeout bounds one publish (until its PubAck) or one direct
	// get when the caller's context has no earlier deadline.
	DefaultTimeout = 5 * time.Second
	// DefaultPollInterval is how long Tracker.Await lets the live
	// subscription stay silent before it reads the last stored outcome.
	DefaultPollInterval = 5 * time.Second
	// DefaultGrantLifetime is a grant's validity when GrantOptions.Lifetime
	// is zero. The processor refuses a grant longer than its
	// approval.max_grant_lifetime (default 24h) with GRANT_LIFETIME_EXCEEDED.
	DefaultGrantLifetime = 5 * time.Minute
)

// HostConfig configures a Host.
type HostConfig struct {
	// Name is the host's name: the label of its `host "<h>"` block and the
	// <h> token of its subjects. Required.
	Name string

	// Prefix is the processor's subject prefix (`subjects { prefix }`);
	// empty means "actions".
	Prefix string

	// Timeout bounds each publish and each direct get whose context has no
	// earlier deadline. Zero means DefaultTimeout.
	Timeout time.Duration

	// PollInterval is how long Tracker.Await waits on the live
	// subscription before it reads the last stored outcome by direct get
	// (and how often it reads it again while everything stays silent).
	// Zero means DefaultPollInterval.
	PollInterval time.Duration

	// NoMsgID turns off the Nats-Msg-Id header. By default each message
	// carries one derived from a SHA-256 of its subject and body, which
	// nobody can guess without having the message, so a retried publish
	// of the same bytes is dropped by the stream as a duplicate (within
	// its 10-minute window) instead of stored twice.
	NoMsgID bool
}

// Host proposes actions for one configured host and follows their outcomes
// (SPEC §2.1–2.4). It is safe for concurrent use.
type Host struct {
	nc           *nats.Conn
	refusals     *refusals
	js           jetstream.JetStream
	name         string
	key          nkeys.KeyPair
	pub          string // key's public key
	subj         subjects.Subjects
	timeout      time.Duration
	pollInterval time.Duration
	msgID        bool
}

// NewHost returns a Host that publishes and subscribes on c and signs
// every proposal, grant and decline with the key c logged in with
// (headers Actions-Host-Key and Actions-Signature over the exact body):
// the key of the host block. A Conn without a key (Connect with a nil
// seed) sends unsigned messages, which only a processor with
// admission.allow_unsigned (processor run --dev) admits; any other drops
// them with the incident event ADMISSION_UNAUTHENTICATED and publishes no
// outcome (Tracker.Await then says so when it gives up). A Conn that
// logged in with another identity but has no key to sign with is refused
// (ErrIdentityMismatch).
//
// NewHost makes no request: in particular it never calls the JetStream
// API info endpoint, which hosts may not use.
func NewHost(c *Conn, cfg HostConfig) (*Host, error) {
	if c == nil || c.Conn == nil {
		return nil, errors.New("client: NewHost: no connection")
	}
	if c.key == nil && c.login != "" {
		return nil, fmt.Errorf("client: NewHost: %w: the connection logged in as %s and has no key to sign with; connect with client.Connect(url, seed)", ErrIdentityMismatch, c.login)
	}
	nc := c.Conn
	if !subjects.ValidHost(cfg.Name) {
		return nil, fmt.Errorf("client: NewHost: invalid host name %q (want ^[A-Za-z0-9_-]{1,64}$)", cfg.Name)
	}
	subj, err := subjects.New(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("client: NewHost: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("client: NewHost: %w", err)
	}
	h := &Host{
		nc: nc, refusals: &c.refusals, js: js, name: cfg.Name, key: c.key, pub: c.pub, subj: subj,
		timeout: cfg.Timeout, pollInterval: cfg.PollInterval, msgID: !cfg.NoMsgID,
	}
	if h.timeout <= 0 {
		h.timeout = DefaultTimeout
	}
	if h.pollInterval <= 0 {
		h.pollInterval = DefaultPollInterval
	}
	return h, nil
}

// Name is the host's name, the <h> of its subjects.
func (h *Host) Name() string { return h.name }

// Propose sends a proposal and returns a Tracker of its outcomes.
//
// p is encoded deterministically (so the same value gives the same bytes:
// retrying after ErrTimeout is safe) and checked first as admission checks
// it: strict shape, formats, complete trusted context, payload numbers a
// double holds exactly. A proposal that fails is not sent (ErrInvalid,
// wrapping a *schema.ValidationError whose Problems name each field and the
// rule it breaks).
// Tenant, provider and grounding are judged by the processor, and answered
// with an outcome.
//
// Propose subscribes to the proposal's outcome subject before it publishes,
// so no outcome can slip past; then it publishes with JetStream on
// `<prefix>.proposals.<h>`, signed, and returns once the PubAck proves the
// proposals stream stored it. On an error nothing stays subscribed.
func (h *Host) Propose(ctx context.Context, p *schema.Proposal) (*Tracker, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: nil proposal", ErrInvalid)
	}
	body, err := schema.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("%w: proposal does not encode", ErrInvalid)
	}
	if err := checkProposal(body); err != nil {
		return nil, err
	}
	return h.propose(ctx, p.ProposalID, body)
}

// checkProposal applies admission's own checks of a body on its own
// (schema.CheckProposal: formats, exact payload numbers, complete trusted
// context). Its error wraps a *schema.ValidationError that names each
// field and the rule it breaks, never a value.
func checkProposal(body []byte) error {
	if _, err := schema.CheckProposal(body, 0); err != nil {
		return fmt.Errorf("%w: proposal: %w", ErrInvalid, err)
	}
	return nil
}

// ProposeRaw sends body, a proposal's JSON, exactly as given: it is signed
// and published byte for byte, so hosts that build proposals elsewhere (or
// test admission) control every byte. Only its proposal_id is read (as
// admission reads it: one valid top-level "proposal_id"), to subscribe to
// its outcome subject; without one, ProposeRaw sends nothing (ErrInvalid),
// since no outcome could ever be addressed to it. Everything else is for
// the processor to judge. See Propose for the order of subscribe and
// publish.
func (h *Host) ProposeRaw(ctx context.Context, body []byte) (*Tracker, error) {
	id, ok := schema.PeekProposalID(body)
	if !ok || !schema.ValidProposalID(id) {
		return nil, fmt.Errorf("%w: no readable, valid proposal_id", ErrInvalid)
	}
	return h.propose(ctx, id, body)
}

func (h *Host) propose(ctx context.Context, id string, body []byte) (*Tracker, error) {
	t, err := h.track(ctx, id)
	if err != nil {
		return nil, err
	}
	ack, err := h.publish(ctx, h.subj.Proposal(h.name), []string{h.subj.HostProposalsStream(h.name), h.subj.ProposalsStream()}, body)
	if err != nil {
		_ = t.Stop()
		return nil, err
	}
	t.ack = ack
	t.nextPoll = time.Now().Add(h.pollInterval)
	return t, nil
}

// Track returns a Tracker of an earlier proposal's outcomes, for a host
// that restarted or a process other than the proposer. Its first Await or
// Next reads the last stored outcome at once, since the outcomes it missed
// are only in the outcome stream.
func (h *Host) Track(ctx context.Context, proposalID string) (*Tracker, error) {
	if !schema.ValidProposalID(proposalID) {
		return nil, fmt.Errorf("%w: invalid proposal_id", ErrInvalid)
	}
	return h.track(ctx, proposalID)
}

// track subscribes to the outcome subject and flushes, so that the server
// has the subscription before anything is published.
func (h *Host) track(ctx context.Context, id string) (*Tracker, error) {
	t := &Tracker{host: h, id: id, ch: make(chan *nats.Msg, trackerBuffer), seen: map[string]bool{}}
	before := h.nc.LastError()
	sub, err := h.nc.ChanSubscribe(h.subj.Outcome(h.name, id), t.ch)
	if err != nil {
		return nil, fmt.Errorf("client: subscribe to outcomes: %w", err)
	}
	t.sub = sub
	fctx, cancel := h.bounded(ctx)
	defer cancel()
	if err := h.nc.FlushWithContext(fctx); err != nil {
		_ = sub.Unsubscribe()
		if ctx.Err() != nil || fctx.Err() != nil {
			return nil, ctxError(fctx, "subscribe to outcomes")
		}
		return nil, fmt.Errorf("client: subscribe to outcomes: %w", err)
	}
	// The server answers a forbidden SUB with an error before the flush's
	// PONG, so it is known now: a login that is not this host's.
	if v := h.violation(before, sub.Subject); v != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("client: subscribe to %s: %w: %w (is this connection logged in as host %q?)", sub.Subject, ErrPublishRefused, v, h.name)
	}
	return t, nil
}

// violation returns the connection's last error if it is newer than
// before and a permissions violation on subject.
func (h *Host) violation(before error, subject string) error {
	last := h.nc.LastError()
	if last != nil && last != before && errors.Is(last, nats.ErrPermissionViolation) &&
		strings.Contains(last.Error(), strconv.Quote(subject)) {
		return last
	}
	return nil
}

// bounded returns ctx limited to the host's timeout.
func (h *Host) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, h.timeout)
}

// publish signs body (unless unsigned) and publishes it with JetStream,
// waiting for the PubAck of stream.
// The processor stores a host's messages in the host's own stream (or,
// with unsigned input allowed, in one every host shares): streams lists
// both.
func (h *Host) publish(ctx context.Context, subject string, streams []string, body []byte) (PubAck, error) {
	m := nats.NewMsg(subject)
	m.Data = body
	if h.key != nil {
		hdr, err := Sign(h.key, body)
		if err != nil {
			return PubAck{}, fmt.Errorf("client: sign: %w", err)
		}
		for k, v := range hdr {
			m.Header[k] = v
		}
	}
	if h.msgID {
		m.Header.Set(jetstream.MsgIDHeader, msgID(subject, body))
	}
	before := h.nc.LastError()
	pctx, cancel := h.bounded(ctx)
	defer cancel()
	// A forbidden publish is dropped by the server, which says so only
	// asynchronously: the watch ends the wait for a PubAck at once.
	pctx, stop := h.refusals.watch(pctx, subject)
	defer stop()
	ack, err := h.js.PublishMsg(pctx, m)
	if err != nil {
		return PubAck{}, h.publishError(ctx, pctx, subject, before, err)
	}
	if !slices.Contains(streams, ack.Stream) {
		// Stored, but not where the processor reads: another stream
		// captures the subject, or the prefix is wrong.
		return PubAck{}, fmt.Errorf("client: publish on %s: stored in stream %q, not %q", subject, ack.Stream, streams[0])
	}
	return PubAck{Stream: ack.Stream, Sequence: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// publishError classifies a failed publish. Only what proves that nothing
// was stored becomes ErrPublishRefused; a timeout stays unknown.
func (h *Host) publishError(ctx, pctx context.Context, subject string, before, err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr):
		return fmt.Errorf("client: publish on %s: %w: %w", subject, ErrPublishRefused, apiErr)
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("client: publish on %s: %w: no stream captures the subject (is the processor running, with this prefix?)", subject, ErrPublishRefused)
	}
	// A forbidden publish is dropped by the server, which says so only
	// asynchronously: the watch (a Conn's error handler), or nc.LastError
	// once the request ran to its deadline.
	v := refusedCause(pctx)
	if v == nil {
		v = h.violation(before, subject)
	}
	if v != nil {
		return fmt.Errorf("client: publish on %s: %w: %w (is this connection logged in as host %q?)", subject, ErrPublishRefused, v, h.name)
	}
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("client: publish on %s: outcome unknown: %w", subject, context.Cause(ctx))
	}
	if pctx.Err() != nil || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("client: publish on %s: no PubAck, the message may have been stored: %w: %w", subject, ErrTimeout, context.DeadlineExceeded)
	}
	return fmt.Errorf("client: publish on %s: outcome unknown: %w", subject, err)
}

// msgID is the Nats-Msg-Id a Host sends with body on subject: the
// lowercase hex SHA-256 of the subject, a newline and the body.
func msgID(subject string, body []byte) string {
	s := sha256.New()
	s.Write([]byte(subject))
	s.Write([]byte{'\n'})
	s.Write(body)
	return hex.EncodeToString(s.Sum(nil))
}

// Last returns the last outcome stored for one of this host's proposals,
// read from the outcome stream by a direct get (an empty request to
// $JS.API.DIRECT.GET.<outcome stream>.<outcome subject>, the only JetStream
// request besides publishing that a host may make). ErrNoOutcome when the
// stream holds none. The stream keeps outcomes streams.max_age (default 7
// days) and drops the oldest when full; a host can read only the last one
// of each proposal. An outcome is delivered to subscribers a moment before
// the stream has stored it: right after a Tracker returned an outcome, Last
// may still return the one before.
func (h *Host) Last(ctx context.Context, proposalID string) (schema.Outcome, error) {
	if !schema.ValidProposalID(proposalID) {
		return schema.Outcome{}, fmt.Errorf("%w: invalid proposal_id", ErrInvalid)
	}
	subject := h.subj.Outcome(h.name, proposalID)
	rctx, cancel := h.bounded(ctx)
	defer cancel()
	get := subjects.DirectGetLast(h.subj.OutcomesStream(), subject)
	rctx, stop := h.refusals.watch(rctx, get)
	defer stop()
	m, err := h.nc.RequestWithContext(rctx, get, nil)
	switch {
	case err == nil:
	case refusedCause(rctx) != nil:
		return schema.Outcome{}, fmt.Errorf("client: direct get of %s: %w: %w (is this connection logged in as host %q?)", subject, ErrPublishRefused, refusedCause(rctx), h.name)
	case ctx.Err() != nil:
		return schema.Outcome{}, ctxError(ctx, "direct get")
	case rctx.Err() != nil || errors.Is(err, nats.ErrTimeout):
		return schema.Outcome{}, fmt.Errorf("client: direct get of %s: %w", subject, ErrTimeout)
	case errors.Is(err, nats.ErrNoResponders):
		return schema.Outcome{}, fmt.Errorf("client: direct get of %s: outcome stream %s not reachable: %w", subject, h.subj.OutcomesStream(), err)
	default:
		return schema.Outcome{}, fmt.Errorf("client: direct get of %s: %w", subject, err)
	}
	if status := m.Header.Get("Status"); status != "" && len(m.Data) == 0 {
		if status == "404" {
			return schema.Outcome{}, fmt.Errorf("client: %s: %w", subject, ErrNoOutcome)
		}
		return schema.Outcome{}, fmt.Errorf("client: direct get of %s: status %s %s", subject, status, m.Header.Get("Description"))
	}
	if got := m.Header.Get(jetstream.SubjectHeader); got != subject {
		return schema.Outcome{}, fmt.Errorf("client: direct get of %s: answered for another subject", subject)
	}
	o, err := decodeOutcome(m.Data, h.name, proposalID)
	if err != nil {
		return schema.Outcome{}, fmt.Errorf("client: direct get of %s: %w", subject, err)
	}
	return o, nil
}

// decodeOutcome decodes an outcome addressed to host h's proposal id.
// Unknown members are ignored (a newer processor may add some); duplicate
// names, wrong types, another schema, another proposal or an unknown kind
// are errors.
func decodeOutcome(data []byte, h, id string) (schema.Outcome, error) {
	var o schema.Outcome
	if !schema.WithinDepth(data, schema.MaxDepth) || json.Unmarshal(data, &o) != nil {
		return schema.Outcome{}, errors.New("outcome does not decode")
	}
	if o.Schema != schema.SchemaOutcome || o.ProposalID != id || !o.Kind.Valid() {
		return schema.Outcome{}, errors.New("not an outcome of this proposal")
	}
	o.Host = h
	return o, nil
}

// Fingerprint returns the intent fingerprint ("sha256:" + 64 hex digits,
// SPEC §2.3) of p grounded to referent: what a NEEDS_APPROVAL outcome's
// approval.fingerprint must equal before a host approves it, and what an
// inline grant binds. Compute referent yourself from the candidate you
// expect grounding to pick.
func Fingerprint(p *schema.Proposal, referent string) (string, error) {
	if p == nil {
		return "", fmt.Errorf("%w: nil proposal", ErrInvalid)
	}
	r, err := fingerprint.Of(p, referent)
	if err != nil {
		return "", err
	}
	return r.Fingerprint, nil
}
