package admission

import (
	"context"
	"fmt"

	"github.com/portcullis/portcullis/internal/fault"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// Stage is the admission stage's handler.
type Stage struct {
	Policy   Policy
	Store    *kv.Store
	Subjects subjects.Subjects
	Clock    stages.Clock
}

var _ stages.Handler = (*Stage)(nil)

// Handle admits or refuses one proposal.
func (s *Stage) Handle(ctx context.Context, in *stages.Input) (stages.Result, error) {
	now := stages.NowMs(s.Clock)
	v := Decide(s.Policy, in.Data, in.Header)
	if !v.Dedupe {
		return refusal(v, now), nil
	}
	p := v.Proposal
	tenant, delivery := p.Context.Tenant.TenantRef, p.Context.Delivery.DeliveryID
	unlock := s.Store.Lock("delivery/" + tenant + "\x00" + delivery)
	defer unlock()
	rec, found, err := s.Store.Delivery(tenant, delivery)
	if err != nil {
		return stages.Result{}, fmt.Errorf("admission: read delivery: %w", err)
	}
	switch {
	case found && rec.Seq != in.StreamSeq:
		// A repeated delivery: republish what was recorded, do nothing else.
		o, ok, err := s.Store.LastOutcome(rec.ProposalID)
		if err != nil {
			return stages.Result{}, fmt.Errorf("admission: read outcome: %w", err)
		}
		if !ok {
			return stages.Result{}, nil // still in flight: its outcome will come
		}
		return stages.Result{Replayed: []schema.Outcome{o}}, nil
	case found && rec.Forwarded:
		return stages.Result{}, nil // this very message was handed off already
	case !found:
		rec = kv.Delivery{ProposalID: p.ProposalID, Seq: in.StreamSeq, AtMs: now}
		b := s.Store.NewBatch()
		b.PutDelivery(tenant, delivery, rec)
		if err := b.Commit(kv.Sync); err != nil {
			return stages.Result{}, fmt.Errorf("admission: record delivery: %w", err)
		}
	}
	fault.Hit(fault.AdmissionAfterRecord)
	if v.Incident != nil {
		return refusal(v, now), nil
	}
	env := schema.Envelope{Schema: schema.SchemaEnvelope, Proposal: *p, Host: v.Host, AdmittedAtMs: now}
	data, err := schema.Marshal(env)
	if err != nil {
		return stages.Result{}, fmt.Errorf("admission: encode envelope: %w", err)
	}
	return stages.Result{
		Next: []stages.Message{{
			Subject: s.Subjects.Stage(subjects.StageGrounding, subjects.KindProposal, p.ProposalID),
			Data:    data,
		}},
		Done: func(context.Context) error {
			rec.Forwarded = true
			b := s.Store.NewBatch()
			b.PutDelivery(tenant, delivery, rec)
			// NoSync: if lost, a redelivery hands off again under the same
			// message id, inside the stream's duplicate window.
			return b.Commit(kv.NoSync)
		},
	}, nil
}

func refusal(v Verdict, now int64) stages.Result {
	if v.ProposalID == "" {
		return stages.Result{Events: []schema.Incident{*v.Incident}}
	}
	return stages.Result{Outcomes: []schema.Outcome{schema.FailureOutcome(v.ProposalID, *v.Incident, now)}}
}

// GiveUp ends a proposal admission could not process.
func (s *Stage) GiveUp(_ context.Context, in *stages.Input, _ error) (stages.Result, error) {
	inc := schema.NewIncident(schema.PhaseAdmission, schema.CodeProcessingFailed)
	id, _ := schema.PeekProposalID(in.Data)
	return refusal(Verdict{ProposalID: id, Incident: &inc}, stages.NowMs(s.Clock)), nil
}
