package grounding

import (
	"context"
	"fmt"
	"strconv"

	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/internal/approvals"
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
	// Store keeps the decisions that asked a candidate source.
	Store *kv.Store
	// Source asks candidate sources.
	Source *Source
	// MaxCandidates is grounding.max_candidates.
	MaxCandidates int
	// SourceMaxInFlight bounds the requests to one candidate source at
	// once (grounding.source_max_in_flight; see Bulkhead). 0: unbounded.
	SourceMaxInFlight int
	// Approvals are the proposals' approval records, where a give-up
	// claims its proposal's end (see GiveUp). nil: not claimed (tests).
	Approvals approvals.Store
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

	var v Verdict
	observation := p.Grounding.ObservationRef
	if inc := Precheck(p); inc != nil {
		v = Verdict{Incident: inc}
	} else if p.Grounding.CandidateSource != "" {
		var err error
		v, observation, err = s.fromSource(ctx, in, p, now)
		if err != nil {
			return stages.Result{}, err
		}
	} else {
		v = Decide(p, p.Grounding.Candidates, s.MaxCandidates)
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
	data, err := schema.Marshal(out)
	if err != nil {
		return stages.Result{}, fmt.Errorf("grounding: encode envelope: %w", err)
	}
	return stages.Result{Next: []stages.Message{{
		Subject: s.Route.HandOff(subjects.ProposalToken(env.Host, p.ProposalID)),
		Data:    data,
	}}}, nil
}

// fromSource decides with a candidate source's answer. The decision is
// checkpointed before it is published: a source may answer differently
// when asked again, and a redelivered input must not be decided twice.
func (s *Stage) fromSource(ctx context.Context, in *stages.Input, p *schema.Proposal, now int64) (Verdict, string, error) {
	key := kv.GroundingKey(in.Stream, in.StreamSeq, in.Data)
	unlock := s.Store.Lock(string(key))
	defer unlock()
	rec, found, err := s.Store.Grounding(key)
	if err != nil {
		return Verdict{}, "", fmt.Errorf("grounding: read checkpoint: %w", err)
	}
	if found {
		if rec.Code != "" {
			if _, ok := schema.LookupCode(schema.PhaseGrounding, rec.Code); !ok {
				return Verdict{}, "", fmt.Errorf("grounding: checkpoint: %w: %w", kv.ErrCorrupt, stages.ErrPermanent)
			}
			return fail(rec.Code), "", nil
		}
		return Verdict{Referent: rec.Referent}, rec.ObservationRef, nil
	}
	var v Verdict
	observation := ""
	reply, err := s.Source.Ask(ctx, p)
	switch {
	case SourceFault(err):
		v = fail(schema.CodeGroundingSourceUnavailable)
	case err != nil:
		return Verdict{}, "", err
	default:
		v = Decide(p, reply.Candidates, s.MaxCandidates)
		observation = reply.ObservationRef
	}
	rec = kv.Grounding{AtMs: now}
	if v.Grounded() {
		rec.Referent, rec.ObservationRef = v.Referent, observation
	} else {
		rec.Code = v.Incident.Code
	}
	b := s.Store.NewBatch()
	b.PutGrounding(key, rec)
	if err := b.Commit(kv.Sync); err != nil {
		return Verdict{}, "", fmt.Errorf("grounding: record checkpoint: %w", err)
	}
	return v, observation, nil
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
		won, err := approvals.End(s.Approvals, ref, schema.CodeProcessingFailed, in.Stream+"/"+strconv.FormatUint(in.StreamSeq, 10), now)
		if err != nil {
			return stages.Result{}, fmt.Errorf("grounding: claim the end: %w", err)
		}
		if !won {
			return stages.Result{}, nil // authorization decided it: that decision is the answer
		}
	}
	return stages.Result{Outcomes: []schema.Outcome{schema.FailureOutcome(ref, inc, now)}}, nil
}
