package authorization

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/activity"
	"github.com/portcullis/portcullis/internal/approvals"
	"github.com/portcullis/portcullis/internal/trust"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// Stage is the authorization stage. As a stages.Handler it consumes the
// authorization stream: grounded proposals (kind proposal) and approval
// expiries fired by the scheduler (kind timer). Grants returns the handler
// of the grants stream.
//
// Every decision is recorded in the approvals store (approvals.Record,
// durably) before its results are published, under a per-proposal lock
// shared by both consumers, so that a grant and the expiry timer cannot both win, and a
// redelivered input republishes what was decided instead of deciding again
// at another time.
type Stage struct {
	Policy    Policy
	Approvals approvals.Store
	Activity  *activity.Store // nil: no activity snapshots
	Subjects  subjects.Subjects
	Clock     stages.Clock
	// JS reads parked envelopes back from the authorization stream.
	JS  jetstream.JetStream
	Log *slog.Logger
}

var _ stages.Handler = (*Stage)(nil)

// errEnvelopeGone: a parked proposal's envelope can no longer be read from
// the authorization stream (purged, or not what the record says).
var errEnvelopeGone = errors.New("authorization: parked envelope unavailable")

func (s *Stage) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

func inputID(in *stages.Input) string     { return in.Stream + "/" + strconv.FormatUint(in.StreamSeq, 10) }
func token(ref schema.ProposalRef) string { return subjects.ProposalToken(ref.Host, ref.ProposalID) }

// Handle decides a grounded proposal or an approval expiry.
func (s *Stage) Handle(ctx context.Context, in *stages.Input) (stages.Result, error) {
	ref, kind, ok := s.parseSubject(in.Subject)
	if !ok {
		return stages.Result{}, fmt.Errorf("%w: unexpected subject", stages.ErrPermanent)
	}
	switch kind {
	case subjects.KindProposal:
		return s.handleProposal(ctx, in, ref)
	case subjects.KindTimer:
		return s.handleTimer(ctx, in, ref)
	}
	return stages.Result{}, fmt.Errorf("%w: unexpected message kind", stages.ErrPermanent)
}

// parseSubject reads `<prefix>.stage.authorization.<kind>.<h>.<proposal_id>`.
func (s *Stage) parseSubject(subject string) (schema.ProposalRef, string, bool) {
	stage, kind, tok, ok := s.Subjects.ParseStage(subject)
	h, id, okTok := subjects.ParseProposalToken(tok)
	if !ok || !okTok || stage != subjects.StageAuthorization || !schema.ValidProposalID(id) {
		return schema.ProposalRef{}, "", false
	}
	return schema.ProposalRef{Host: h, ProposalID: id}, kind, true
}

// decodeEnvelope strictly decodes a grounded envelope for ref.
func decodeEnvelope(data []byte, ref schema.ProposalRef) (*schema.Envelope, error) {
	var env schema.Envelope
	if err := schema.DecodeEnvelope(data, &env); err != nil {
		return nil, err
	}
	if env.Grounded == nil || !schema.ValidFingerprint(env.Grounded.Fingerprint) || env.Ref() != ref {
		return nil, fmt.Errorf("%w: envelope not grounded or not for its subject", schema.ErrMalformed)
	}
	return &env, nil
}

func (s *Stage) handleProposal(ctx context.Context, in *stages.Input, ref schema.ProposalRef) (stages.Result, error) {
	env, err := decodeEnvelope(in.Data, ref)
	if err != nil {
		return stages.Result{}, fmt.Errorf("%w: %w", stages.ErrPermanent, err)
	}
	unlock := s.Approvals.Lock(ref)
	defer unlock()
	a, found, err := s.Approvals.Load(ref)
	if err != nil {
		return stages.Result{}, fmt.Errorf("authorization: read approval: %w", err)
	}
	if found {
		switch {
		case a.Seq != in.StreamSeq:
			// The same proposal handed on twice: the first one decides.
			s.log().Debug("duplicate hand-off ignored", "host", ref.Host, "proposal_id", ref.ProposalID)
			return stages.Result{}, nil
		case a.State == approvals.StateParked:
			return s.result(a, recorded(a, nil), env), nil
		case a.DecidedBy == inputID(in):
			// Decided on arrival; publishing or the ack did not complete.
			return s.result(a, recorded(a, env.Proposal.Grant), env), nil
		default:
			// Decided since by a grant or the timer: nothing to repeat.
			return stages.Result{}, nil
		}
	}
	now := stages.NowMs(s.Clock)
	v := DecideProposal(s.Policy, env, now)
	a = approvals.Record{
		Host: ref.Host, ProposalID: ref.ProposalID, Fingerprint: env.Grounded.Fingerprint, Referent: env.Grounded.Referent,
		Seq: in.StreamSeq, ArrivedAtMs: now, Evaluations: v.Evaluations,
	}
	w := approvals.Writes{Record: &a}
	if v.Decision == Park {
		a.State, a.ExpiresAtMs = approvals.StateParked, now+s.Policy.ApprovalTTL.Milliseconds()
		t := s.expiryTimer(ref, a.ExpiresAtMs, approvals.TimerID(ref))
		w.Timer = &t
	} else {
		decide(&a, v, inputID(in), now)
	}
	if err := s.Approvals.Commit(ref, w); err != nil {
		return stages.Result{}, fmt.Errorf("authorization: record decision: %w", err)
	}
	return s.result(a, v, env), nil
}

// expiryTimer fires a parked proposal's expiry on the authorization
// stream. msgID dedupes the scheduler's republishing after a crash.
func (s *Stage) expiryTimer(ref schema.ProposalRef, dueMs int64, msgID string) kv.Timer {
	return approvals.ExpiryTimer(s.Subjects.Stage(subjects.StageAuthorization, subjects.KindTimer, token(ref)), ref, dueMs, msgID)
}

// decide records verdict v, reached at nowMs by input by, in a.
func decide(a *approvals.Record, v Verdict, by string, nowMs int64) {
	a.State = approvals.StateDenied
	if v.Decision == Permit {
		a.State = approvals.StatePermitted
	}
	a.DecidedBy, a.DecidedAtMs, a.Evaluations = by, nowMs, v.Evaluations
	a.Code = ""
	if v.Decision == Deny {
		a.Code = v.Code
	}
}

// recorded is the verdict a record holds, for republishing it. g is the
// grant that was judged (it is not stored in Pebble: its input has it).
func recorded(a approvals.Record, g *schema.Grant) Verdict {
	switch a.State {
	case approvals.StateParked:
		return Verdict{Decision: Park, Code: schema.CodeApprovalRequired, Evaluations: a.Evaluations}
	case approvals.StatePermitted:
		return Verdict{Decision: Permit, Evaluations: a.Evaluations, Grant: g}
	}
	return Verdict{Decision: Deny, Code: a.Code, Evaluations: a.Evaluations, Grant: g}
}

// result turns a recorded verdict into what the runner publishes: the
// hand-off to dispatch, or the outcome; then the activity snapshot. env is
// nil when the proposal's envelope is not at hand (an expiry).
func (s *Stage) result(a approvals.Record, v Verdict, env *schema.Envelope) stages.Result {
	var res stages.Result
	at := a.DecidedAtMs
	if v.Decision == Park {
		at = a.ArrivedAtMs
	}
	switch {
	case v.Decision == Permit && env != nil && v.Grant != nil:
		out := HandOff(env, v, at)
		res.Next = []stages.Message{{
			Subject: s.Subjects.Stage(subjects.StageDispatch, subjects.KindProposal, token(a.Ref())),
			Data:    schema.MustMarshal(out),
		}}
	case v.Decision == Permit:
		// Only a replay whose parked envelope vanished from the stream
		// since gets here: the hand-off went out before, and nothing may
		// contradict it.
		s.log().Error("cannot republish a permitted hand-off", "host", a.Host, "proposal_id", a.ProposalID)
		return res
	default:
		var approval *schema.Approval
		if v.Decision == Park {
			approval = ApprovalRequest(env, a.ExpiresAtMs)
		}
		res.Outcomes = []schema.Outcome{Outcome(a.Ref(), a.Fingerprint, a.Referent, v, at, approval)}
	}
	if s.Activity != nil {
		edit := ActivityEdit(a.Ref(), env, v, at, a.ExpiresAtMs)
		res.Done = func(ctx context.Context) error { return s.Activity.Update(ctx, a.Fingerprint, edit) }
	}
	return res
}

func (s *Stage) handleTimer(ctx context.Context, in *stages.Input, ref schema.ProposalRef) (stages.Result, error) {
	unlock := s.Approvals.Lock(ref)
	defer unlock()
	a, found, err := s.Approvals.Load(ref)
	if err != nil {
		return stages.Result{}, fmt.Errorf("authorization: read approval: %w", err)
	}
	switch {
	case !found:
		return stages.Result{}, nil
	case a.State == approvals.StateParked:
	case a.DecidedBy == inputID(in):
		return s.result(a, recorded(a, nil), nil), nil
	default:
		return stages.Result{}, nil // a grant decided first
	}
	now := stages.NowMs(s.Clock)
	if now < a.ExpiresAtMs {
		// Fired early by another processor's clock: wait for our own,
		// under a message id the stream has not seen.
		t := s.expiryTimer(ref, a.ExpiresAtMs, approvals.TimerID(ref)+"/rearmed/"+inputID(in))
		return stages.Result{}, s.Approvals.Commit(ref, approvals.Writes{From: approvals.StateParked, Timer: &t})
	}
	v := TimedOut()
	decide(&a, v, inputID(in), now)
	if err := s.Approvals.Commit(ref, approvals.Writes{From: approvals.StateParked, Record: &a}); err != nil {
		return stages.Result{}, fmt.Errorf("authorization: record expiry: %w", err)
	}
	return s.result(a, v, nil), nil
}

// parkedEnvelope re-reads a parked proposal's envelope from the
// authorization stream (Pebble does not hold it).
func (s *Stage) parkedEnvelope(ctx context.Context, a approvals.Record) (*schema.Envelope, error) {
	stream, err := s.JS.Stream(ctx, s.Subjects.StageStream(subjects.StageAuthorization))
	if err != nil {
		return nil, fmt.Errorf("authorization: stream: %w", err)
	}
	m, err := stream.GetMsg(ctx, a.Seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, errEnvelopeGone
	}
	if err != nil {
		return nil, fmt.Errorf("authorization: read parked envelope: %w", err)
	}
	env, err := decodeEnvelope(m.Data, a.Ref())
	if err != nil || env.Grounded.Fingerprint != a.Fingerprint {
		return nil, errEnvelopeGone
	}
	return env, nil
}

// Grants returns the handler of the grants stream.
func (s *Stage) Grants() stages.Handler { return grants{s} }

type grants struct{ s *Stage }

func event(inc schema.Incident) stages.Result {
	return stages.Result{Events: []schema.Incident{inc}}
}

func unmatched() stages.Result {
	return event(schema.NewIncident(schema.PhaseAuthorization, schema.CodeGrantUnmatched))
}

// Handle resumes or declines the parked proposal a standalone grant or
// decline on `<prefix>.grants.<h>` names. Only host h's own parked
// proposals can be reached; a message that is not authenticated for h, or
// that names none of them (unknown, not parked yet, or decided already),
// changes nothing and gets only an incident event.
func (g grants) Handle(ctx context.Context, in *stages.Input) (stages.Result, error) {
	s := g.s
	h, _ := s.Subjects.IngressHost(in.Subject)
	m, inc, authErr := ReadStandalone(s.Policy, h, in.Data, in.Header)
	if inc != nil {
		s.log().Info("authorization: unauthenticated grant refused", "seq", in.StreamSeq, "check", trust.Reason(authErr))
		return event(*inc), nil
	}
	if m.ProposalID == "" {
		return unmatched(), nil
	}
	ref := schema.ProposalRef{Host: m.Host.Name, ProposalID: m.ProposalID}
	unlock := s.Approvals.Lock(ref)
	defer unlock()
	a, found, err := s.Approvals.Load(ref)
	if err != nil {
		return stages.Result{}, fmt.Errorf("authorization: read approval: %w", err)
	}
	replay := found && a.DecidedBy == inputID(in)
	if !replay && (!found || a.State != approvals.StateParked) {
		s.log().Debug("grant matches no parked proposal", "host", ref.Host, "proposal_id", ref.ProposalID)
		return unmatched(), nil
	}
	env, err := s.parkedEnvelope(ctx, a)
	if err != nil && !errors.Is(err, errEnvelopeGone) {
		return stages.Result{}, err
	}
	if replay {
		return s.result(a, recorded(a, m.Grant), env), nil
	}
	now := stages.NowMs(s.Clock)
	var v Verdict
	if env == nil {
		s.log().Error("parked envelope unavailable; proposal ended", "host", ref.Host, "proposal_id", ref.ProposalID)
		v = Verdict{Decision: Deny, Code: schema.CodeProcessingFailed}
	} else {
		v = DecideStandalone(s.Policy, m, env, a.Fingerprint, a.ExpiresAtMs, now)
	}
	if v.Decision == Keep {
		return event(*v.Event), nil
	}
	decide(&a, v, inputID(in), now)
	if err := s.Approvals.Commit(ref, approvals.Writes{From: approvals.StateParked, Record: &a, CancelTimer: true}); err != nil {
		return stages.Result{}, fmt.Errorf("authorization: record grant decision: %w", err)
	}
	return s.result(a, v, env), nil
}

// GiveUp ends a grant that could not be processed with an event: the
// proposal it names stays parked until another grant or its expiry. If the
// grant had decided already, that decision is republished instead.
func (g grants) GiveUp(ctx context.Context, in *stages.Input, cause error) (stages.Result, error) {
	s := g.s
	h, _ := s.Subjects.IngressHost(in.Subject)
	if m, inc, _ := ReadStandalone(s.Policy, h, in.Data, in.Header); inc == nil && m.ProposalID != "" {
		ref := schema.ProposalRef{Host: m.Host.Name, ProposalID: m.ProposalID}
		if a, found, err := s.Approvals.Load(ref); err == nil && found && a.DecidedBy == inputID(in) {
			env, err := s.parkedEnvelope(ctx, a)
			if err == nil || errors.Is(err, errEnvelopeGone) {
				return s.result(a, recorded(a, m.Grant), env), nil
			}
		}
	}
	return event(schema.NewIncident(schema.PhaseAuthorization, schema.CodeProcessingFailed)), nil
}

// GiveUp ends a proposal or an expiry that could not be processed with
// PROCESSING_FAILED, unparking the proposal, unless it was decided already
// (then that decision stands and is republished if this input made it).
func (s *Stage) GiveUp(ctx context.Context, in *stages.Input, cause error) (stages.Result, error) {
	failed := schema.NewIncident(schema.PhaseAuthorization, schema.CodeProcessingFailed)
	ref, kind, ok := s.parseSubject(in.Subject)
	if !ok {
		return stages.Result{Events: []schema.Incident{failed}}, nil
	}
	now := stages.NowMs(s.Clock)
	unlock := s.Approvals.Lock(ref)
	defer unlock()
	a, found, err := s.Approvals.Load(ref)
	if err != nil {
		// The store is failing, which is likely why we give up: end the
		// proposal without a record rather than leave it silent.
		s.log().Error("giving up without the approval record", "host", ref.Host, "proposal_id", ref.ProposalID, "err", err)
		return stages.Result{Outcomes: []schema.Outcome{schema.FailureOutcome(ref, failed, now)}}, nil
	}
	switch {
	case found && a.DecidedBy == inputID(in):
		var env *schema.Envelope
		if kind == subjects.KindProposal {
			env, _ = decodeEnvelope(in.Data, ref)
		}
		var gr *schema.Grant
		if env != nil {
			gr = env.Proposal.Grant
		}
		return s.result(a, recorded(a, gr), env), nil
	case found && a.State == approvals.StateParked && (kind == subjects.KindTimer || a.Seq == in.StreamSeq):
		v := Verdict{Decision: Deny, Code: schema.CodeProcessingFailed}
		decide(&a, v, inputID(in), now)
		if err := s.Approvals.Commit(ref, approvals.Writes{From: approvals.StateParked, Record: &a, CancelTimer: true}); err != nil {
			return stages.Result{}, fmt.Errorf("authorization: record give-up: %w", err)
		}
		return s.result(a, v, nil), nil
	case found || kind == subjects.KindTimer:
		return stages.Result{}, nil // decided by another input, or a stray timer
	}
	o := schema.FailureOutcome(ref, failed, now)
	if env, err := decodeEnvelope(in.Data, ref); err == nil {
		o.Fingerprint = schema.StringPtr(env.Grounded.Fingerprint)
		o.Referent = schema.StringPtr(env.Grounded.Referent)
	}
	return stages.Result{Outcomes: []schema.Outcome{o}}, nil
}
