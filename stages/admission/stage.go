package admission

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/portcullis/portcullis/internal/fault"
	"github.com/portcullis/portcullis/internal/trust"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// Stage is the admission stage's handler.
type Stage struct {
	Policy Policy
	// Records remember the ids hosts have used. nil: Pebble on Store.
	Records Records
	Store   *pebble.Store
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
	if !v.Dedupe {
		return s.refuse(v, in, now)
	}
	p := v.Proposal
	ref := v.Ref()
	digest := Digest(p)
	rs := s.records()
	unlock := rs.Lock(kv.ProposalLockKey(ref))
	defer unlock()
	delivery := p.Context.Delivery.DeliveryID
	unlockDelivery := rs.Lock("delivery/" + ref.Host + "\x00" + delivery)
	defer unlockDelivery()

	d, found, err := rs.Delivery(ref.Host, delivery)
	if err != nil {
		return stages.Result{}, fmt.Errorf("admission: read delivery: %w", err)
	}
	if found && d.Seq != in.StreamSeq {
		return s.repeatedDelivery(ref.Host, d, in)
	}
	a, found, err := rs.Admitted(ref)
	if err != nil {
		return stages.Result{}, fmt.Errorf("admission: read proposal: %w", err)
	}
	if !found {
		a = kv.Admitted{Digest: digest, Seq: in.StreamSeq, AtMs: now}
		c, err := rs.Admit(ref, a, delivery, kv.Delivery{ProposalID: ref.ProposalID, Seq: in.StreamSeq, AtMs: now})
		if err != nil {
			return stages.Result{}, fmt.Errorf("admission: record proposal: %w", err)
		}
		switch {
		case c.Delivery != nil:
			// Another processor took the delivery id first.
			return s.repeatedDelivery(ref.Host, *c.Delivery, in)
		case c.Admitted != nil:
			// Another processor took the proposal id first (or this
			// message did, before).
			a, found = *c.Admitted, true
		}
	}
	switch {
	case found && a.Seq != in.StreamSeq && a.Digest == digest:
		// The same proposal under a new delivery id: a repeat.
		if err := rs.Repeat(ref.Host, delivery, kv.Delivery{ProposalID: ref.ProposalID, Seq: in.StreamSeq, AtMs: now}); err != nil {
			return stages.Result{}, fmt.Errorf("admission: record delivery: %w", err)
		}
		s.log().Debug("admission: repeated proposal; the recorded outcome is republished", "host", ref.Host, "proposal_id", ref.ProposalID, "seq", in.StreamSeq)
		return s.replay(ref)
	case found && a.Seq != in.StreamSeq:
		// Another body under a taken id: its outcome subject belongs to the
		// first proposal.
		return s.reused(v, in), nil
	case found && a.Failed:
		return s.replay(ref) // admission gave up on this very message
	case found && a.Forwarded:
		return stages.Result{}, nil // this very message was handed off already
	}
	fault.Hit(fault.AdmissionAfterRecord)
	if v.Incident != nil {
		s.logRefusal(v, in, v.Incident.Code)
		return stages.Result{Outcomes: []schema.Outcome{schema.FailureOutcome(ref, *v.Incident, now)}}, nil
	}
	env := schema.Envelope{Schema: schema.SchemaEnvelope, Proposal: *p, Host: ref.Host, AdmittedAtMs: now}
	data, err := schema.Marshal(env)
	if err != nil {
		return stages.Result{}, fmt.Errorf("admission: encode envelope: %w", err)
	}
	return stages.Result{
		Next: []stages.Message{{
			Subject: s.Route.HandOff(subjects.ProposalToken(ref.Host, ref.ProposalID)),
			Data:    data,
		}},
		Done: func(context.Context) error {
			a.Forwarded = true
			// If lost, a redelivery hands off again under the same message
			// id, inside the stream's duplicate window.
			return rs.Forwarded(ref, a)
		},
	}, nil
}

// repeatedDelivery answers a repeated delivery: republish what was
// recorded, do nothing else.
func (s *Stage) repeatedDelivery(host string, d kv.Delivery, in *stages.Input) (stages.Result, error) {
	s.log().Debug("admission: repeated delivery; the recorded outcome is republished", "host", host, "proposal_id", d.ProposalID, "seq", in.StreamSeq)
	return s.replay(schema.ProposalRef{Host: host, ProposalID: d.ProposalID})
}

// records are the stage's Records: Pebble on Store unless set.
func (s *Stage) records() Records {
	if s.Records != nil {
		return s.Records
	}
	return Pebble{Store: s.Store}
}

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
func (s *Stage) reused(v Verdict, in *stages.Input) stages.Result {
	v.Problems = []schema.Problem{{Path: "/proposal_id", Rule: RuleIDTaken, Code: schema.CodeAdmissionProposalIDReused, Offset: -1}}
	s.logRefusal(v, in, schema.CodeAdmissionProposalIDReused)
	return reused()
}

// refuse answers an authenticated proposal refused before it could take its
// ids (malformed, incomplete context, tenant or domain not permitted). It
// gets an outcome when its id is readable and not taken, and leaves no
// record: there is nothing to deduplicate it by, and junk must not grow
// the store.
func (s *Stage) refuse(v Verdict, in *stages.Input, now int64) (stages.Result, error) {
	if v.ProposalID == "" {
		s.logRefusal(v, in, v.Incident.Code)
		return stages.Result{Events: []schema.Incident{*v.Incident}}, nil
	}
	if _, taken, err := s.records().Admitted(v.Ref()); err != nil {
		return stages.Result{}, fmt.Errorf("admission: read proposal: %w", err)
	} else if taken {
		// Its outcome subject belongs to the proposal that took the id.
		return s.reused(v, in), nil
	}
	s.logRefusal(v, in, v.Incident.Code)
	return stages.Result{
		Outcomes:   []schema.Outcome{schema.FailureOutcome(v.Ref(), *v.Incident, now)},
		Unrecorded: true,
	}, nil
}

// logRefusal logs the refusal of an authenticated proposal, value-free:
// the code, the host (a configured name) and the proposal id (an outcome
// subject token) when readable, the stream sequence, and the first
// problem's field path and rule with the number of problems. Never a
// value: no tenant, actor, payload, attribute or member name of the input.
// A refusal that points at trust (tenant or domain not permitted, an id
// reused) is a warning; the others are integration errors, logged at info.
func (s *Stage) logRefusal(v Verdict, in *stages.Input, code schema.Code) {
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
	if _, _, err := (trust.Verifier{Hosts: s.Policy.Hosts, AllowUnsigned: s.Policy.AllowUnsigned}).Authenticate(h, in.Data, in.Header); err != nil {
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
	res, handle, err := s.takeFailed(ref, v, in, now)
	if handle {
		return s.Handle(ctx, in) // this message took the id meanwhile, elsewhere
	}
	return res, err
}

// takeFailed takes ref's id for in with its PROCESSING_FAILED outcome,
// under the locks Handle takes, unless the id or the delivery id is taken:
// then it answers as Handle would, or asks for Handle (this very message
// took the id since).
func (s *Stage) takeFailed(ref schema.ProposalRef, v Verdict, in *stages.Input, now int64) (stages.Result, bool, error) {
	rs := s.records()
	unlock := rs.Lock(kv.ProposalLockKey(ref))
	defer unlock()
	delivery := v.Proposal.Context.Delivery.DeliveryID
	unlockDelivery := rs.Lock("delivery/" + ref.Host + "\x00" + delivery)
	defer unlockDelivery()
	if d, found, err := rs.Delivery(ref.Host, delivery); err != nil {
		return stages.Result{}, false, fmt.Errorf("admission: read delivery: %w", err)
	} else if found && d.Seq != in.StreamSeq {
		res, err := s.repeatedDelivery(ref.Host, d, in)
		return res, false, err
	}
	if a, taken, err := rs.Admitted(ref); err != nil {
		return stages.Result{}, false, fmt.Errorf("admission: read proposal: %w", err)
	} else if taken && a.Seq != in.StreamSeq {
		return reused(), false, nil
	} else if taken && a.Failed {
		res, err := s.replay(ref) // given up on before, here or elsewhere
		return res, false, err
	} else if taken {
		return stages.Result{}, true, nil
	}
	c, err := rs.Admit(ref, kv.Admitted{Digest: Digest(v.Proposal), Seq: in.StreamSeq, AtMs: now, Failed: true},
		delivery, kv.Delivery{ProposalID: ref.ProposalID, Seq: in.StreamSeq, AtMs: now})
	switch {
	case err != nil:
		return stages.Result{}, false, fmt.Errorf("admission: record proposal: %w", err)
	case c.Delivery != nil:
		res, err := s.repeatedDelivery(ref.Host, *c.Delivery, in)
		return res, false, err
	case c.Admitted != nil && c.Admitted.Seq != in.StreamSeq:
		return reused(), false, nil
	case c.Admitted != nil && !c.Admitted.Failed:
		return stages.Result{}, true, nil
	case c.Admitted != nil:
		res, err := s.replay(ref)
		return res, false, err
	}
	// Recorded, so that a repeat hears it.
	inc := schema.NewIncident(schema.PhaseAdmission, schema.CodeProcessingFailed)
	return stages.Result{Outcomes: []schema.Outcome{schema.FailureOutcome(ref, inc, now)}}, false, nil
}
