package authorization

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/trust"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// Stage is the authorization stage. As a stages.Handler it consumes the
// authorization stream: grounded proposals (kind proposal) and approval
// expiries (kind timer: fired by the processor's scheduler on a single
// node, by nats-server message schedules in this stream with replicated
// approvals — once, whichever processor parked the proposal). Grants
// returns the handler of the grants stream.
//
// Both lock the proposal, load its approval record, step, commit the
// step's writes (durably, before anything is published), read the parked
// envelope back from the authorization stream when the step asks, step
// again and hand the result to the runner (Step says what and why).
type Stage struct {
	Policy    Policy
	Approvals kv.Approvals
	// Intents reads the dispatch journal: a new proposal without a grant
	// whose intent is dispatched already is answered from it. nil: never.
	Intents  Intents
	Activity kv.Activity // nil: no activity snapshots
	// Route: the stage's own stream (proposals and approval timers) in,
	// the next stage out — for the grants consumer's decisions too.
	Route stages.Route
	Clock stages.Clock
	// Parked keeps each parked proposal's envelope, in its host's budget,
	// until it is decided.
	Parked kv.Envelopes
	// InStage reads back the envelope of a proposal an earlier version
	// parked in the authorization stream itself (by sequence); nil: none
	// is read.
	InStage kv.StreamMessages
	Log     *slog.Logger
}

var _ stages.Handler = (*Stage)(nil)

var (
	// errEnvelopeGone: a parked proposal's envelope can no longer be read
	// from the authorization stream (purged, or not what the record says).
	errEnvelopeGone = errors.New("authorization: parked envelope unavailable")
	// errUnreadable: the approvals store could not load the record.
	errUnreadable = errors.New("approval record unreadable")
)

func (s *Stage) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

func (s *Stage) rules() Rules {
	return Rules{
		Policy:       s.Policy,
		TimerSubject: s.Route.Timer,
	}
}

func inputID(in *stages.Input) string { return in.Stream + "/" + strconv.FormatUint(in.StreamSeq, 10) }

// Intents is what authorization reads of the dispatch journal
// (kv.Journal has it).
type Intents interface {
	Load(fingerprint string) (rec kv.Intent, found bool, err error)
}

// intentBound reads whether env's intent is dispatched already: a
// receipt, or an in-flight record, binds its fingerprint.
func (s *Stage) intentBound(env *schema.Envelope) (bool, error) {
	if s.Intents == nil {
		return false, nil
	}
	rec, found, err := s.Intents.Load(env.Grounded.Fingerprint)
	if err != nil {
		return false, fmt.Errorf("authorization: read the intent: %w", err)
	}
	return found && (rec.Receipt != nil || rec.State == kv.StateInFlight), nil
}

// Handle decides a grounded proposal or an approval expiry.
func (s *Stage) Handle(ctx context.Context, in *stages.Input) (stages.Result, error) {
	ref, kind, ok := s.Route.ProposalRef(in.Subject)
	if !ok {
		return stages.Result{}, fmt.Errorf("%w: unexpected subject", stages.ErrPermanent)
	}
	f := Facts{Ref: ref, ID: inputID(in), Seq: in.StreamSeq}
	switch kind {
	case subjects.KindProposal:
		env, err := s.Route.Envelope(in, stages.Grounded)
		if err != nil {
			return stages.Result{}, fmt.Errorf("%w: %w", stages.ErrPermanent, err)
		}
		f.Input, f.Env = FromProposal, env
	case subjects.KindTimer:
		f.Input = FromTimer
	default:
		return stages.Result{}, fmt.Errorf("%w: unexpected message kind", stages.ErrPermanent)
	}
	return s.run(ctx, f)
}

// GiveUp ends a proposal or an expiry that could not be processed with
// PROCESSING_FAILED, unparking the proposal, unless it was decided already
// (then that decision stands and is republished if this input made it).
func (s *Stage) GiveUp(ctx context.Context, in *stages.Input, cause error) (stages.Result, error) {
	failed := schema.NewIncident(schema.PhaseAuthorization, schema.CodeProcessingFailed)
	ref, kind, ok := s.Route.ProposalRef(in.Subject)
	if !ok {
		return stages.Result{Events: []schema.Incident{failed}}, nil
	}
	f := Facts{Input: FromProposal, Ref: ref, ID: inputID(in), Seq: in.StreamSeq, GivingUp: true}
	if kind == subjects.KindTimer {
		f.Input = FromTimer
	} else {
		f.Env, _ = s.Route.Envelope(in, stages.Grounded)
	}
	res, err := s.run(ctx, f)
	if errors.Is(err, errUnreadable) {
		// The store is failing, which is likely why we give up: end the
		// proposal without a record rather than leave it silent.
		s.log().Error("giving up without the approval record", "host", ref.Host, "proposal_id", ref.ProposalID, "err", err)
		return stages.Result{Outcomes: []schema.Outcome{schema.FailureOutcome(ref, failed, stages.NowMs(s.Clock))}}, nil
	}
	return res, err
}

// run is the shell around Step: under the proposal's lock, load, step,
// commit, read the parked envelope if asked and step again.
func (s *Stage) run(ctx context.Context, f Facts) (stages.Result, error) {
	unlock := s.Approvals.Lock(f.Ref)
	defer unlock()
	rec, found, err := s.Approvals.Load(f.Ref)
	if err != nil {
		return stages.Result{}, fmt.Errorf("authorization: %w: %w", errUnreadable, err)
	}
	f.Record, f.Found = rec, found
	if f.Input == FromProposal && !found && f.Env != nil && f.Env.Proposal.Grant == nil && !f.GivingUp {
		if f.IntentBound, err = s.intentBound(f.Env); err != nil {
			return stages.Result{}, err
		}
	}
	r := s.rules()
	for {
		f.Now = stages.NowMs(s.Clock)
		d := Step(f, r)
		parking := d.Writes.Record != nil && d.Writes.Record.Parked() && d.Writes.From == kv.StateNone
		if parking {
			// The envelope first: a parked record always finds it.
			err := s.park(ctx, f.Ref, f.Env)
			if errors.Is(err, kv.ErrBudget) && !f.ParkRefused {
				f.ParkRefused = true
				continue
			}
			if err != nil {
				return stages.Result{}, err
			}
		}
		if err := s.Approvals.Commit(f.Ref, d.Writes); err != nil {
			// Nothing was written (a conflict: another input decided
			// first); a redelivery loads what won.
			return stages.Result{}, fmt.Errorf("authorization: record decision: %w", err)
		}
		if !d.ReadEnvelope {
			res := s.result(f.Ref, d)
			// A decided proposal's envelope goes only once what the decision
			// publishes is stored: a redelivery before then (a crash, an
			// unanswered publish) reads it again to republish the hand-off.
			decided := d.Writes.From == kv.StateParked && d.Writes.Record != nil && !d.Writes.Record.Parked()
			if decided || (f.Read && f.Env != nil && f.Found && !f.Record.Parked()) {
				res.Done = s.thenUnpark(res.Done, f.Ref)
			}
			return res, nil
		}
		env, err := s.parkedEnvelope(ctx, f.Record)
		switch {
		case errors.Is(err, errEnvelopeGone):
		case err != nil && !f.GivingUp:
			return stages.Result{}, err
		case err != nil:
			f.ReadFailed = true
		}
		f.Env, f.Read = env, true
	}
}

// result turns a publishing decision into what the runner does.
func (s *Stage) result(ref schema.ProposalRef, d Decision) stages.Result {
	if d.Note != "" {
		level := slog.LevelDebug
		if d.Alarm {
			level = slog.LevelError
		}
		s.log().Log(context.Background(), level, "authorization: "+d.Note, "host", ref.Host, "proposal_id", ref.ProposalID)
	}
	res := stages.Result{Events: d.Events}
	if d.HandOff != nil {
		res.Next = []stages.Message{{
			Subject: s.Route.HandOff(subjects.ProposalToken(ref.Host, ref.ProposalID)),
			Data:    schema.EncodeEnvelope(d.HandOff),
		}}
	}
	if d.Outcome != nil {
		res.Outcomes = []schema.Outcome{*d.Outcome}
	}
	if d.Activity != nil && s.Activity != nil {
		fp, edit := d.Fingerprint, d.Activity
		res.Done = func(ctx context.Context) error { return s.Activity.Update(ctx, fp, edit.Apply) }
		if d.HandOff != nil {
			// Dispatch's edit, with its result, is expected within
			// moments: the two are written once (kv.Activity).
			res.Done = func(ctx context.Context) error { return s.Activity.UpdateFollowed(ctx, fp, edit.Apply) }
		}
	}
	return res
}

// park keeps a proposal's envelope, under its host's budget, until it is
// decided (the authorization stream holds work, not history: the hand-off
// goes once acked). kv.ErrBudget: the host's budget is spent.
func (s *Stage) park(ctx context.Context, ref schema.ProposalRef, env *schema.Envelope) error {
	// The same id for the same envelope: a retry is a duplicate.
	id := "parked/" + subjects.ProposalToken(ref.Host, ref.ProposalID) + "/" + env.Grounded.Fingerprint
	if err := s.Parked.Keep(ctx, ref.Host, ref.ProposalID, schema.EncodeEnvelope(env), id); err != nil {
		return fmt.Errorf("authorization: park the envelope: %w", err)
	}
	return nil
}

// thenUnpark runs done, then unparks ref's envelope.
func (s *Stage) thenUnpark(done func(context.Context) error, ref schema.ProposalRef) func(context.Context) error {
	return func(ctx context.Context) error {
		if done != nil {
			if err := done(ctx); err != nil {
				return err
			}
		}
		s.unpark(ctx, ref)
		return nil
	}
}

// unpark drops a decided proposal's envelope. A failure only leaves it
// until the stream's max_age: it is logged, never retried.
func (s *Stage) unpark(ctx context.Context, ref schema.ProposalRef) {
	if err := s.Parked.Drop(ctx, ref.Host, ref.ProposalID); err != nil {
		s.log().Warn("authorization: a decided proposal's envelope stays parked until max_age", "host", ref.Host, "proposal_id", ref.ProposalID, "err", err)
	}
}

// parkedEnvelope reads a parked proposal's envelope back: from its host's
// kept envelopes, or — parked by an earlier version — from the
// authorization stream, by sequence.
func (s *Stage) parkedEnvelope(ctx context.Context, a kv.Approval) (*schema.Envelope, error) {
	data, _, err := s.Parked.Get(ctx, a.Host, a.ProposalID)
	switch {
	case errors.Is(err, kv.ErrForged):
		s.log().Error("authorization: a parked envelope without a valid seal; ignored", "host", a.Host, "proposal_id", a.ProposalID)
		return nil, errEnvelopeGone
	case errors.Is(err, kv.ErrNotKept):
		data, err = s.parkedInStage(ctx, a.Seq)
	}
	if err != nil {
		return nil, fmt.Errorf("authorization: read parked envelope: %w", err)
	}
	env, err := stages.DecodeEnvelope(data, stages.Grounded)
	if err != nil || env.Ref() != a.Ref() || env.Grounded.Fingerprint != a.Fingerprint {
		return nil, errEnvelopeGone
	}
	return env, nil
}

// parkedInStage reads the envelope an earlier version parked in the
// authorization stream itself, by its sequence there.
func (s *Stage) parkedInStage(ctx context.Context, seq uint64) ([]byte, error) {
	if s.InStage == nil {
		return nil, errEnvelopeGone
	}
	data, err := s.InStage.Message(ctx, seq)
	if errors.Is(err, kv.ErrNotKept) {
		return nil, errEnvelopeGone
	}
	return data, err
}

// Grants returns the handler of the grants stream.
func (s *Stage) Grants() stages.Handler { return grants{s} }

type grants struct{ s *Stage }

func eventOnly(code schema.Code) stages.Result {
	return stages.Result{Events: []schema.Incident{schema.NewIncident(schema.PhaseAuthorization, code)}}
}

// Handle resumes or declines the parked proposal a standalone grant or
// decline on `<prefix>.grants.<h>` names. Only host h's own parked
// proposals can be reached; a message that is not authenticated for h, or
// that names none of them (unknown, not parked yet, or decided already),
// changes nothing and gets only an incident event.
func (g grants) Handle(ctx context.Context, in *stages.Input) (stages.Result, error) {
	s := g.s
	h, _ := s.Route.Subjects.IngressHost(in.Subject)
	m, inc, authErr := ReadStandalone(s.Policy, h, in.Data, in.Header)
	if inc != nil {
		s.log().Info("authorization: unauthenticated grant refused", "seq", in.StreamSeq, "check", trust.Reason(authErr))
		return stages.Result{Events: []schema.Incident{*inc}}, nil
	}
	if m.ProposalID == "" {
		res := eventOnly(schema.CodeGrantUnmatched)
		s.logUnused(in, &m, res.Events)
		return res, nil
	}
	ref := schema.ProposalRef{Host: m.Host, ProposalID: m.ProposalID}
	res, err := s.run(ctx, Facts{Input: FromGrant, Ref: ref, ID: inputID(in), Seq: in.StreamSeq, Message: &m})
	if err == nil && len(res.Outcomes) == 0 && len(res.Replayed) == 0 && len(res.Next) == 0 {
		s.logUnused(in, &m, res.Events)
	}
	return res, err
}

// logUnused logs, value-free, a standalone grant or decline that changed
// nothing: its events' codes, the host (a configured name), the proposal id
// when readable (an outcome subject token), the stream sequence, and for a
// grant that did not decode the first problem's field path and rule. At
// info: integration errors (a stale or mistyped grant), not attacks — an
// unauthenticated message is logged as a warning before this.
func (s *Stage) logUnused(in *stages.Input, m *Standalone, events []schema.Incident) {
	codes := make([]string, 0, len(events))
	for _, e := range events {
		codes = append(codes, string(e.Code))
	}
	args := []any{"codes", codes, "host", m.Host}
	if m.ProposalID != "" {
		args = append(args, "proposal_id", m.ProposalID)
	}
	args = append(args, "seq", in.StreamSeq)
	if len(m.Problems) > 0 {
		args = append(args, "path", m.Problems[0].Path, "rule", string(m.Problems[0].Rule))
		if len(m.Problems) > 1 {
			args = append(args, "problems", len(m.Problems))
		}
	}
	s.log().Info("authorization: grant or decline changed nothing", args...)
}

// GiveUp ends a grant that could not be processed with an event: the
// proposal it names stays parked until another grant or its expiry. If the
// grant had decided already, that decision is republished instead.
func (g grants) GiveUp(ctx context.Context, in *stages.Input, cause error) (stages.Result, error) {
	s := g.s
	h, _ := s.Route.Subjects.IngressHost(in.Subject)
	if m, inc, _ := ReadStandalone(s.Policy, h, in.Data, in.Header); inc == nil && m.ProposalID != "" {
		ref := schema.ProposalRef{Host: m.Host, ProposalID: m.ProposalID}
		// Giving up on a grant writes nothing: the only error is a record
		// that cannot be read.
		res, err := s.run(ctx, Facts{Input: FromGrant, Ref: ref, ID: inputID(in), Seq: in.StreamSeq, Message: &m, GivingUp: true})
		if err == nil {
			return res, nil
		}
	}
	return eventOnly(schema.CodeProcessingFailed), nil
}
