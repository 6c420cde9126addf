package admission

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/trust"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/fault"
	"github.com/portcullis/portcullis/subjects"
)

// Stage is the admission stage's handler.
type Stage struct {
	Policy Policy
	// Records remember the ids hosts have used (kv/pebble's or
	// kv/jetstream's Admissions).
	Records kv.Admissions
	// Route: the hosts' proposals stream in, the next stage out.
	Route stages.Route
	Clock stages.Clock
	Log   *slog.Logger
}

var _ stages.Handler = (*Stage)(nil)

func (s *Stage) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// Handle admits or refuses one proposal.
func (s *Stage) Handle(ctx context.Context, in *stages.Input) (stages.Result, error) {
	now := stages.NowMs(s.Clock)
	h, _ := s.Route.Subjects.IngressHost(in.Subject)
	v := Decide(s.Policy, h, in.Data, in.Header)
	if !v.Authenticated() {
		// Nothing proves who sent it: an event and a log line saying which
		// check failed, and no durable trace (SPEC §2.7). The subject token
		// is not logged: before authentication it is anyone's choice.
		s.log().Warn("admission: unauthenticated message refused", "code", v.Incident.Code, "seq", in.StreamSeq, "check", trust.Reason(v.AuthError))
		return stages.Result{Events: []schema.Incident{*v.Incident}}, nil
	}
	if !v.Dedupe && v.ProposalID == "" {
		s.logRefusal(v, in, v.Incident.Code)
		return stages.Result{Events: []schema.Incident{*v.Incident}}, nil
	}
	res, _, err := s.dedupe(v, in, false, now)
	return res, err
}

// dedupe is the shell around Step: it locks the message's ids, reads their
// records, steps, claims the ids if asked and steps again, then answers.
// handle reports a given-up message that took its ids meanwhile: Handle
// decides it, once the locks are released.
func (s *Stage) dedupe(v Screening, in *stages.Input, givingUp bool, now int64) (res stages.Result, handle bool, err error) {
	rs := s.records()
	ref := v.Ref()
	f := Facts{Ref: ref, Seq: in.StreamSeq, Now: now, TakesIDs: v.Dedupe, Refused: v.Incident != nil, GivingUp: givingUp}
	if v.Dedupe {
		f.DeliveryID, f.Digest = v.Proposal.Context.Delivery.DeliveryID, Digest(v.Proposal)
		unlock := rs.Lock(kv.ProposalLockKey(ref))
		defer unlock()
		unlockDelivery := rs.Lock(kv.DeliveryLockKey(ref.Host, f.DeliveryID))
		defer unlockDelivery()
		d, found, err := rs.Delivery(ref.Host, f.DeliveryID)
		if err != nil {
			return stages.Result{}, false, fmt.Errorf("admission: read delivery: %w", err)
		}
		if found {
			f.Delivery = &d
		}
	}
	a, found, err := rs.Admitted(ref)
	if err != nil {
		return stages.Result{}, false, fmt.Errorf("admission: read proposal: %w", err)
	}
	if found {
		f.Admitted = &a
	}
	for {
		d := Step(f)
		if d.Admit != nil {
			c, err := rs.Admit(ref, d.Admit.Admitted, f.DeliveryID, d.Admit.Delivery)
			if err != nil {
				return stages.Result{}, false, fmt.Errorf("admission: record proposal: %w", err)
			}
			f.Claimed, f.Claim = true, c
			continue
		}
		if d.Repeat != nil {
			if err := rs.Repeat(ref.Host, f.DeliveryID, *d.Repeat); err != nil {
				return stages.Result{}, false, fmt.Errorf("admission: record delivery: %w", err)
			}
		}
		if d.Note != "" {
			s.log().Debug(d.Note, "host", d.Replay.Host, "proposal_id", d.Replay.ProposalID, "seq", in.StreamSeq)
		}
		if d.Answer == AnswerHandle {
			return stages.Result{}, true, nil
		}
		res, err := s.answer(v, in, d, givingUp, now)
		return res, false, err
	}
}

// answer carries out a step's answer.
func (s *Stage) answer(v Screening, in *stages.Input, d Decision, givingUp bool, now int64) (stages.Result, error) {
	ref := v.Ref()
	switch d.Answer {
	case AnswerReplay:
		return s.replay(d.Replay)
	case AnswerReused:
		if givingUp {
			return reused(), nil
		}
		return s.reused(v, in), nil
	case AnswerRefuseUnrecorded:
		s.logRefusal(v, in, v.Incident.Code)
		return stages.Result{
			Outcomes:   []schema.Outcome{schema.FailureOutcome(ref, *v.Incident, now)},
			Unrecorded: true,
		}, nil
	case AnswerRefuse:
		fault.Hit(fault.AdmissionAfterRecord)
		s.logRefusal(v, in, v.Incident.Code)
		return stages.Result{Outcomes: []schema.Outcome{schema.FailureOutcome(ref, *v.Incident, now)}}, nil
	case AnswerFailed:
		// Recorded, so that a repeat hears it.
		inc := schema.NewIncident(schema.PhaseAdmission, schema.CodeProcessingFailed)
		return stages.Result{Outcomes: []schema.Outcome{schema.FailureOutcome(ref, inc, now)}}, nil
	case AnswerHandOff:
		fault.Hit(fault.AdmissionAfterRecord)
		return s.handOff(v, *d.Forward, now)
	}
	return stages.Result{}, nil
}

// handOff hands an admitted proposal on to grounding; once the hand-off is
// acknowledged, its record says so (forwarded). If that write is lost, a
// redelivery hands off again under the same message id, inside the
// stream's duplicate window.
func (s *Stage) handOff(v Screening, forwarded kv.Admitted, now int64) (stages.Result, error) {
	ref := v.Ref()
	env := schema.Envelope{Schema: schema.SchemaEnvelope, Proposal: *v.Proposal, Host: ref.Host, AdmittedAtMs: now}
	data := schema.EncodeEnvelope(&env)
	rs := s.records()
	return stages.Result{
		Next: []stages.Message{{
			Subject: s.Route.HandOff(subjects.ProposalToken(ref.Host, ref.ProposalID)),
			Data:    data,
		}},
		Done: func(context.Context) error { return rs.Forwarded(ref, forwarded) },
	}, nil
}

// records are the stage's Records.
func (s *Stage) records() kv.Admissions { return s.Records }

// replay republishes a proposal's recorded outcome; a proposal still in
// flight has none yet, and its outcome comes on its own.
func (s *Stage) replay(ref schema.ProposalRef) (stages.Result, error) {
	o, ok, err := s.records().LastOutcome(ref)
	if err != nil {
		return stages.Result{}, fmt.Errorf("admission: read outcome: %w", err)
	}
	if !ok {
		return stages.Result{}, nil
	}
	return stages.Result{Replayed: []schema.Outcome{o}}, nil
}

func reused() stages.Result {
	return stages.Result{Events: []schema.Incident{schema.NewIncident(schema.PhaseAdmission, schema.CodeAdmissionProposalIDReused)}}
}

// reused refuses a proposal whose id an earlier proposal of its host took
// with another body: only the event, and a log line.
func (s *Stage) reused(v Screening, in *stages.Input) stages.Result {
	v.Problems = []schema.Problem{{Path: "/proposal_id", Rule: RuleIDTaken, Code: schema.CodeAdmissionProposalIDReused, Offset: -1}}
	s.logRefusal(v, in, schema.CodeAdmissionProposalIDReused)
	return reused()
}

// logRefusal logs the refusal of an authenticated proposal, value-free:
// the code, the host (a configured name) and the proposal id (an outcome
// subject token) when readable, the stream sequence, and the first
// problem's field path and rule with the number of problems. Never a
// value: no tenant, actor, payload, attribute or member name of the input.
// A refusal that points at trust (tenant or domain not permitted, an id
// reused) is a warning; the others are integration errors, logged at info.
func (s *Stage) logRefusal(v Screening, in *stages.Input, code schema.Code) {
	args := []any{"code", code, "host", v.Host}
	if v.ProposalID != "" {
		args = append(args, "proposal_id", v.ProposalID)
	}
	args = append(args, "seq", in.StreamSeq)
	if len(v.Problems) > 0 {
		args = append(args, "path", v.Problems[0].Path, "rule", string(v.Problems[0].Rule))
		if len(v.Problems) > 1 {
			args = append(args, "problems", len(v.Problems))
		}
	}
	level := slog.LevelInfo
	switch code {
	case schema.CodeAdmissionTenantNotPermitted, schema.CodeAdmissionProposalIDReused:
		level = slog.LevelWarn
	}
	s.log().Log(context.Background(), level, "admission: proposal refused", args...)
}

// GiveUp ends a proposal admission could not process: with an outcome
// only when the message is authenticated and its id readable, and never
// once the message took its id — its hand-off may have been stored then,
// so it is handed off again (Handle republishes what it decided, under the
// same message id). A message that has not taken its id takes it now, for
// its PROCESSING_FAILED outcome (kv.Admitted.Failed): a repeat hears that
// outcome, and a processor still handling the same message answers with
// it instead of handing it off.
func (s *Stage) GiveUp(ctx context.Context, in *stages.Input, _ error) (stages.Result, error) {
	inc := schema.NewIncident(schema.PhaseAdmission, schema.CodeProcessingFailed)
	h, _ := s.Route.Subjects.IngressHost(in.Subject)
	if _, err := s.Policy.trust().Authenticate(h, in.Data, in.Header); err != nil {
		return stages.Result{Events: []schema.Incident{inc}}, nil
	}
	id, ok := schema.PeekProposalID(in.Data)
	if !ok {
		return stages.Result{Events: []schema.Incident{inc}}, nil
	}
	ref := schema.ProposalRef{Host: h, ProposalID: id}
	now := stages.NowMs(s.Clock)
	rs := s.records()
	a, taken, err := rs.Admitted(ref)
	switch {
	case err != nil:
		return stages.Result{}, fmt.Errorf("admission: read proposal: %w", err)
	case taken && a.Seq != in.StreamSeq:
		return reused(), nil // the subject belongs to another message's proposal
	case taken:
		return s.Handle(ctx, in)
	}
	v := Decide(s.Policy, h, in.Data, in.Header)
	if !v.Dedupe || v.Ref() != ref {
		// It cannot take ids: nothing of it was, or will be, handed off.
		return stages.Result{Outcomes: []schema.Outcome{schema.FailureOutcome(ref, inc, now)}, Unrecorded: true}, nil
	}
	res, handle, err := s.dedupe(v, in, true, now)
	if handle {
		return s.Handle(ctx, in) // this message took the id meanwhile, elsewhere
	}
	return res, err
}
