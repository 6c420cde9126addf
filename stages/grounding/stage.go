package grounding

import (
	"context"
	"fmt"
	"strconv"

	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// Stage is the grounding stage's handler. It consumes envelopes on
// `<prefix>.stage.grounding.proposal.<h>.<proposal_id>` and either hands the
// proposal to `<prefix>.stage.authorization.proposal.<h>.<proposal_id>` with
// its Grounded record, or ends it with a grounding outcome.
type Stage struct {
	Route stages.Route
	Clock stages.Clock
	// Checkpoints keep the decisions that asked a candidate source
	// (kv/pebble's Store).
	Checkpoints kv.Groundings
	// Source asks candidate sources.
	Source *Source
	// MaxCandidates is grounding.max_candidates.
	MaxCandidates int
	// SourceMaxInFlight bounds the requests to one candidate source at
	// once (grounding.source_max_in_flight; see Bulkhead). 0: unbounded.
	SourceMaxInFlight int
	// Approvals are the proposals' approval records, where a give-up
	// claims its proposal's end (see GiveUp). nil: not claimed (tests).
	Approvals kv.Approvals
}

var _ stages.Handler = (*Stage)(nil)

// Handle grounds one proposal.
func (s *Stage) Handle(ctx context.Context, in *stages.Input) (stages.Result, error) {
	env, err := s.Route.Envelope(in, stages.Admitted)
	if err != nil {
		return stages.Result{}, fmt.Errorf("grounding: %w: %w", err, stages.ErrPermanent)
	}
	p := &env.Proposal
	now := stages.NowMs(s.Clock)

	v, observation, err := s.decide(ctx, in, p, now)
	if err != nil {
		return stages.Result{}, err
	}
	if !v.Grounded() {
		return stages.Result{Outcomes: []schema.Outcome{schema.FailureOutcome(env.Ref(), *v.Incident, now)}}, nil
	}

	fp, err := fingerprint.Of(p, v.Referent)
	if err != nil {
		// Admission refuses payloads without a canonical form; an envelope
		// holding one was not admitted by this version.
		return stages.Result{}, fmt.Errorf("grounding: fingerprint: %w: %w", err, stages.ErrPermanent)
	}
	out := *env
	// Candidate attributes and evidence go no further than this stage.
	out.Proposal.Grounding.Candidates = nil
	out.Proposal.Grounding.CandidateSource = ""
	out.Grounded = &schema.Grounded{
		Referent:       v.Referent,
		Fingerprint:    fp.Fingerprint,
		IdempotencyKey: fp.IdempotencyKey,
		ObservationRef: observation,
	}
	data := schema.EncodeEnvelope(&out)
	return stages.Result{Next: []stages.Message{{
		Subject: s.Route.HandOff(subjects.ProposalToken(env.Host, p.ProposalID)),
		Data:    data,
	}}}, nil
}

// decide is the shell around Step: it reads the input's checkpoint under
// its lock, asks the candidate source and writes the checkpoint (Sync) as
// the steps ask, and returns the binding.
func (s *Stage) decide(ctx context.Context, in *stages.Input, p *schema.Proposal, now int64) (Binding, string, error) {
	f := Facts{Proposal: p, MaxCandidates: s.MaxCandidates, Now: now}
	var key []byte
	for {
		d := Step(f)
		switch d.Call {
		case ReadCheckpoint:
			key = kv.GroundingKey(in.Stream, in.StreamSeq, in.Data)
			unlock := s.Checkpoints.Lock(string(key))
			defer unlock()
			rec, found, err := s.Checkpoints.Grounding(key)
			if err != nil {
				return Binding{}, "", fmt.Errorf("grounding: read checkpoint: %w", err)
			}
			f.Read = true
			if found {
				c := Checkpoint(rec)
				f.Checkpoint = &c
			}
			continue
		case AskSource:
			reply, err := s.Source.Ask(ctx, p)
			if err != nil && !SourceFault(err) {
				return Binding{}, "", err
			}
			f.Asked, f.Reply, f.SourceFailed = true, reply, err != nil
			continue
		}
		if d.Err != nil {
			return Binding{}, "", fmt.Errorf("grounding: %w: %w: %w", d.Err, kv.ErrCorrupt, stages.ErrPermanent)
		}
		if d.Checkpoint != nil {
			if err := s.Checkpoints.PutGrounding(key, kv.Grounding(*d.Checkpoint)); err != nil {
				return Binding{}, "", fmt.Errorf("grounding: record checkpoint: %w", err)
			}
		}
		return d.Binding, d.ObservationRef, nil
	}
}

// GiveUp ends a proposal grounding could not process (PROCESSING_FAILED),
// naming it by its subject's id token; an unreadable id gets only the
// incident event. Another delivery of the same hand-off may have been
// grounded and handed on (by another processor, or by this one before its
// outputs' acknowledgement was lost): the end is first claimed in the
// proposal's approval record, where authorization looks, and announced
// only if no decision was there — otherwise that decision stands.
func (s *Stage) GiveUp(_ context.Context, in *stages.Input, _ error) (stages.Result, error) {
	inc := schema.NewIncident(schema.PhaseGrounding, schema.CodeProcessingFailed)
	ref, _, ok := s.Route.ProposalRef(in.Subject)
	if !ok {
		return stages.Result{Events: []schema.Incident{inc}}, nil
	}
	now := stages.NowMs(s.Clock)
	if s.Approvals != nil {
		won, err := kv.EndApproval(s.Approvals, ref, schema.CodeProcessingFailed, in.Stream+"/"+strconv.FormatUint(in.StreamSeq, 10), now)
		if err != nil {
			return stages.Result{}, fmt.Errorf("grounding: claim the end: %w", err)
		}
		if !won {
			return stages.Result{}, nil // authorization decided it: that decision is the answer
		}
	}
	return stages.Result{Outcomes: []schema.Outcome{schema.FailureOutcome(ref, inc, now)}}, nil
}
