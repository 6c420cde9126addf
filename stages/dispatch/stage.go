package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/internal/activity"
	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/disclosure"
	"github.com/portcullis/portcullis/internal/fault"
	"github.com/portcullis/portcullis/internal/policy"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// Stage is the dispatch stage's handler.
type Stage struct {
	Store     *kv.Store
	Adapters  map[string]adapters.Adapter // by provider name
	Providers []config.Provider
	// Rules re-check the grant and managed policy (SPEC §3 step 3).
	Rules policy.Rules
	// NC carries disclosure requests (core NATS request-reply).
	NC       *nats.Conn
	Subjects subjects.Subjects
	Clock    stages.Clock
	Metrics  *metrics.Metrics
	Activity *activity.Store
	Log      *slog.Logger
	// ReconcileInterval is the wait before the first reconciliation or
	// verification poll.
	ReconcileInterval time.Duration
	// Backoff is the wait between dispatch attempts that reached nobody.
	// Default 250ms doubling, at most 5s.
	Backoff func(n int) time.Duration
}

var _ stages.Handler = (*Stage)(nil)

func (s *Stage) backoff(n int) time.Duration {
	if s.Backoff != nil {
		return s.Backoff(n)
	}
	d := 250 * time.Millisecond << min(n, 5)
	return min(d, 5*time.Second)
}

func (s *Stage) provider(name string) (config.Provider, bool) {
	for _, p := range s.Providers {
		if p.Name == name {
			return p, true
		}
	}
	return config.Provider{}, false
}

// decodeEnvelope reads an authorized, grounded envelope for its subject.
func (s *Stage) decodeEnvelope(in *stages.Input) (*schema.Envelope, error) {
	var env schema.Envelope
	if err := schema.DecodeEnvelope(in.Data, &env); err != nil {
		return nil, fmt.Errorf("dispatch: envelope: %w: %w", stages.ErrPermanent, err)
	}
	_, _, tok, ok := s.Subjects.ParseStage(in.Subject)
	if !ok || env.Grounded == nil || env.Authorization == nil || !schema.ValidFingerprint(env.Grounded.Fingerprint) ||
		tok != subjects.ProposalToken(env.Host, env.Proposal.ProposalID) {
		return nil, fmt.Errorf("dispatch: envelope not grounded and authorized, or not for its subject: %w", stages.ErrPermanent)
	}
	return &env, nil
}

// bound reports whether the envelope's fingerprint and idempotency key are
// those of its proposal and referent: dispatch never trusts a fingerprint
// it is handed (SPEC §2.8), so a message that binds one intent's grant to
// another intent's payload never reaches a provider.
func bound(env *schema.Envelope) bool {
	fp, err := fingerprint.Of(&env.Proposal, env.Grounded.Referent)
	return err == nil && fp.Fingerprint == env.Grounded.Fingerprint && fp.IdempotencyKey == env.Grounded.IdempotencyKey
}

func rejected() stages.Result {
	return stages.Result{Events: []schema.Incident{schema.NewIncident(schema.PhaseDispatch, schema.CodeInternalMessageRejected)}}
}

// Handle runs SPEC §3 Dispatch steps 1–5 for one authorized proposal. Steps
// 1–5 for one fingerprint never run concurrently: the fingerprint's lock is
// held throughout.
func (s *Stage) Handle(ctx context.Context, in *stages.Input) (stages.Result, error) {
	env, err := s.decodeEnvelope(in)
	if err != nil {
		return stages.Result{}, err
	}
	if !bound(env) {
		s.Log.Error("dispatch: fingerprint does not match the proposal it came with; message rejected", "seq", in.StreamSeq)
		return rejected(), nil
	}
	fp := env.Grounded.Fingerprint
	ref := env.Ref()
	unlock := s.Store.Lock("fp/" + fp)
	defer unlock()

	// A proposal this stage ended at its re-check keeps that answer.
	if e, found, err := s.Store.Ended(ref); err != nil {
		return stages.Result{}, fmt.Errorf("dispatch: read proposal end: %w", err)
	} else if found {
		return s.ended(env, e), nil
	}

	rec, found, err := s.Store.Intent(fp)
	if err != nil {
		return stages.Result{}, fmt.Errorf("dispatch: read journal: %w", err)
	}
	now := stages.NowMs(s.Clock)
	if !found {
		rec = s.newIntent(env, now)
	}
	rec.AddProposal(ref)

	// Step 1: a receipt exists: it is the answer.
	if rec.Receipt != nil {
		return s.republish(env, rec, now)
	}
	// Step 2: in flight without a receipt: the provider may have acted.
	if rec.State == kv.IntentInFlight {
		return s.finish(ctx, env, rec, Interrupted(), "interrupted", nil)
	}
	// Steps 3–5, repeated while the provider provably receives nothing.
	for attempt := 0; ; attempt++ {
		res, retry, err := s.attempt(ctx, env, &rec)
		if err != nil || !retry {
			return res, err
		}
		select {
		case <-ctx.Done():
			// Shutting down: the journal says not-invoked; a redelivery
			// after restart continues inside the same window.
			return stages.Result{}, fmt.Errorf("dispatch: %w", ctx.Err())
		case <-time.After(s.backoff(attempt)):
		}
	}
}

func (s *Stage) newIntent(env *schema.Envelope, now int64) kv.Intent {
	in := &env.Proposal.Intent
	adapter := ""
	if a, ok := s.Adapters[in.Provider]; ok {
		adapter = a.Kind()
	}
	return kv.Intent{
		Fingerprint:    env.Grounded.Fingerprint,
		IdempotencyKey: env.Grounded.IdempotencyKey,
		Provider:       in.Provider,
		Capability:     in.Capability,
		Operation:      in.Operation,
		Environment:    in.Environment,
		Referent:       env.Grounded.Referent,
		Adapter:        adapter,
		UpdatedAtMs:    now,
	}
}

// republish answers a proposal of an intent that already has a receipt.
func (s *Stage) republish(env *schema.Envelope, rec kv.Intent, now int64) (stages.Result, error) {
	b := s.Store.NewBatch()
	b.PutIntent(rec) // records the proposal, so it hears of reconciliation
	if err := b.Commit(kv.Sync); err != nil {
		return stages.Result{}, fmt.Errorf("dispatch: record proposal: %w", err)
	}
	return stages.Result{
		Outcomes: []schema.Outcome{Outcome(&rec, env.Ref(), now)},
		Done: func(ctx context.Context) error {
			return s.updateActivity(ctx, env, &rec, nil)
		},
	}, nil
}

// end ends one proposal with a denial at the step 3 re-check: recorded
// for the proposal (with Sync, before its outcome is published), never for
// the fingerprint, so that a later proposal of the same intent with a
// fresh grant is judged afresh (SPEC §3 Dispatch step 3).
func (s *Stage) end(env *schema.Envelope, phase schema.Phase, code schema.Code) (stages.Result, error) {
	e := kv.Ended{Phase: phase, Code: code, AtMs: stages.NowMs(s.Clock)}
	b := s.Store.NewBatch()
	b.PutEnded(env.Ref(), e)
	if err := b.Commit(kv.Sync); err != nil {
		return stages.Result{}, fmt.Errorf("dispatch: record denial: %w", err)
	}
	s.Log.Info("dispatch: proposal denied at the re-check", "host", env.Host, "proposal_id", env.Proposal.ProposalID,
		"fingerprint", env.Grounded.Fingerprint, "code", code)
	return s.ended(env, e), nil
}

// ended is the outcome of a proposal ended at the re-check, and its
// activity record (the intent's own state is untouched).
func (s *Stage) ended(env *schema.Envelope, e kv.Ended) stages.Result {
	o := schema.FailureOutcome(env.Ref(), schema.NewIncident(e.Phase, e.Code), e.AtMs)
	o.Fingerprint, o.Referent = schema.StringPtr(env.Grounded.Fingerprint), schema.StringPtr(env.Grounded.Referent)
	res := stages.Result{Outcomes: []schema.Outcome{o}}
	if s.Activity != nil {
		res.Done = func(ctx context.Context) error {
			return s.Activity.Update(ctx, env.Grounded.Fingerprint, func(a *schema.Activity) {
				a.AddProposal(env.Ref())
				if a.Receipt != nil {
					return // the intent was dispatched by another proposal; this one only ended
				}
				a.Status = schema.ActivityDenied
				a.Decision = &schema.ActivityDecision{Outcome: "deny", ReasonCode: e.Code, DecidedAtMs: e.AtMs}
			})
		}
	}
	return res
}

// attempt is one pass of steps 3–5. retry reports a dispatch that provably
// reached nobody, inside the provider's unavailable_retry window.
func (s *Stage) attempt(ctx context.Context, env *schema.Envelope, rec *kv.Intent) (res stages.Result, retry bool, err error) {
	now := stages.NowMs(s.Clock)
	// Step 3: the grant window and managed policy again, then disclosure.
	d := s.Rules.Authorize(&env.Authorization.Grant, policy.TargetOf(env), now)
	if !d.Permitted() {
		res, err := s.end(env, PhaseOf(d.Code), d.Code)
		return res, false, err
	}
	prov, ok := s.provider(rec.Provider)
	adapter := s.Adapters[rec.Provider]
	if !ok || adapter == nil {
		// Admission refuses unknown providers; this is a configuration
		// change between admission and dispatch. Nothing was sent.
		res, err := s.finish(ctx, env, *rec, MapDispatch(schema.AdapterReply{}, adapters.ErrNotInvoked), "dispatch", nil)
		return res, false, err
	}
	var disc *disclosure.Disclosure
	if env.Proposal.Intent.ProtectedDisclosure != nil {
		req, err := disclosure.RequestForEnvelope(env)
		if err != nil {
			return stages.Result{}, false, fmt.Errorf("dispatch: disclosure request: %w: %w", stages.ErrPermanent, err)
		}
		got, err := disclosure.Resolve(ctx, s.NC, s.Subjects.DisclosureResolve(), req, prov.Timeout)
		if code, ok := disclosure.Code(err); ok {
			res, err := s.end(env, schema.PhaseDisclosure, code)
			return res, false, err
		}
		if err != nil {
			return stages.Result{}, false, fmt.Errorf("dispatch: disclosure: %w", err)
		}
		disc = &got
		defer disc.Wipe() // the values live only for this adapter call
	}

	// Step 4: the in-flight record, synced, before the provider is called.
	fault.Hit(fault.DispatchBeforeInFlight)
	rec.State = kv.IntentInFlight
	rec.DispatchAttempts++
	rec.InFlightAtMs = now
	rec.Adapter = adapter.Kind()
	rec.UpdatedAtMs = now
	b := s.Store.NewBatch()
	b.PutIntent(*rec)
	if err := b.Commit(kv.Sync); err != nil {
		s.Log.Error("in-flight record not written; the provider is not called", "fingerprint", rec.Fingerprint, "err", err)
		inc := schema.NewIncident(schema.PhaseDispatch, schema.CodeCheckpointFailed)
		o := schema.FailureOutcome(env.Ref(), inc, now)
		o.Fingerprint, o.Referent = schema.StringPtr(rec.Fingerprint), schema.StringPtr(rec.Referent)
		return stages.Result{Outcomes: []schema.Outcome{o}}, false, nil
	}
	fault.Hit(fault.DispatchAfterInFlight)

	req := s.request(env)
	if disc != nil {
		req.ProtectedDisclosure = disc.ForDispatch()
	}
	start := time.Now()
	reply, callErr := adapter.Dispatch(ctx, req)
	s.Metrics.DispatchDuration.WithLabelValues(rec.Provider).Observe(time.Since(start).Seconds())
	req.ProtectedDisclosure = nil
	fault.Hit(fault.DispatchAfterReply)

	if errors.Is(callErr, adapters.ErrNotInvoked) && !errors.Is(callErr, adapters.ErrInvalidRequest) {
		// Nobody received it: durably not-invoked, then retry inside the
		// window (connectors reconnecting after a restart).
		now = stages.NowMs(s.Clock)
		rec.State = kv.IntentNotInvoked
		if rec.NotInvokedSinceMs == 0 {
			rec.NotInvokedSinceMs = now
		}
		rec.UpdatedAtMs = now
		b := s.Store.NewBatch()
		b.PutIntent(*rec)
		if err := b.Commit(kv.Sync); err != nil {
			// The journal still says in flight: a redelivery reports
			// DISPATCH_INTERRUPTED, which is safe.
			return stages.Result{}, false, fmt.Errorf("dispatch: mark not invoked: %w", err)
		}
		if time.Duration(now-rec.NotInvokedSinceMs)*time.Millisecond < prov.UnavailableRetry {
			return stages.Result{}, true, nil
		}
	} else if errors.Is(callErr, adapters.ErrInvalidRequest) {
		s.Log.Error("adapter refused the request as invalid; nothing was sent", "fingerprint", rec.Fingerprint)
	}
	var record *schema.DisclosureRecord
	if disc != nil {
		r := disc.Record
		record = &r
	}
	// Step 5: the receipt, synced; then the outcome.
	res, err = s.finish(ctx, env, *rec, MapDispatch(reply, callErr), "dispatch", record)
	return res, false, err
}

func (s *Stage) request(env *schema.Envelope) schema.DispatchRequest {
	in := &env.Proposal.Intent
	return schema.DispatchRequest{
		Schema:         schema.SchemaDispatch,
		Fingerprint:    env.Grounded.Fingerprint,
		IdempotencyKey: env.Grounded.IdempotencyKey,
		Provider:       in.Provider,
		Capability:     in.Capability,
		Operation:      in.Operation,
		Environment:    in.Environment,
		Referent:       env.Grounded.Referent,
		Payload:        in.Payload,
		ExternalSpend:  in.ExternalSpend,
	}
}

// finish writes a verdict's receipt (Sync) with, where the effect still
// needs checking, the reconciliation timer and the indeterminate index; and
// returns the outcome for the proposal.
func (s *Stage) finish(ctx context.Context, env *schema.Envelope, rec kv.Intent, v Verdict, step string, disc *schema.DisclosureRecord) (stages.Result, error) {
	now := stages.NowMs(s.Clock)
	r := Receipt(&rec, v, step, disc, now)
	Record(&rec, r, v, now)
	b := s.Store.NewBatch()
	if r.NextAction != schema.NextNone {
		rec.ReconcileNextAtMs = now + s.ReconcileInterval.Milliseconds()
		ScheduleReconcile(b, s.Subjects, rec.Fingerprint, 1, rec.ReconcileNextAtMs)
	}
	if Indeterminate(&r) {
		b.SetIndeterminate(rec.Fingerprint, now)
	}
	b.PutIntent(rec)
	b.AppendReceipt(rec.ReceiptSeq, r)
	if err := b.Commit(kv.Sync); err != nil {
		// Nothing changed on disk: a redelivery finds the journal as it was
		// (in flight after a call: DISPATCH_INTERRUPTED).
		return stages.Result{}, fmt.Errorf("dispatch: write receipt: %w", err)
	}
	fault.Hit(fault.DispatchAfterReceipt)
	s.Metrics.Dispatches.WithLabelValues(rec.Provider, string(r.Status)).Inc()
	if Indeterminate(&r) {
		s.Metrics.Indeterminate.Inc()
	}
	s.Log.Info("dispatch recorded", "host", env.Host, "proposal_id", env.Proposal.ProposalID, "fingerprint", rec.Fingerprint, "status", r.Status, "receipt_id", r.ReceiptID)
	return stages.Result{
		Outcomes: []schema.Outcome{Outcome(&rec, env.Ref(), now)},
		Done: func(ctx context.Context) error {
			fault.Hit(fault.DispatchAfterOutcome)
			return s.updateActivity(ctx, env, &rec, disc)
		},
	}, nil
}

// updateActivity writes the dispatch section of the intent's snapshot.
func (s *Stage) updateActivity(ctx context.Context, env *schema.Envelope, rec *kv.Intent, disc *schema.DisclosureRecord) error {
	if s.Activity == nil {
		return nil
	}
	return s.Activity.Update(ctx, rec.Fingerprint, func(a *schema.Activity) {
		ApplyIntent(a, env, rec)
		if disc != nil {
			d := *disc
			a.Disclosure = &d
		}
	})
}

// ApplyIntent copies an intent's value-free state into its activity snapshot.
func ApplyIntent(a *schema.Activity, env *schema.Envelope, rec *kv.Intent) {
	for _, p := range rec.Proposals {
		a.AddProposal(p)
	}
	if env != nil {
		a.AddProposal(env.Ref())
	}
	a.Provider, a.Capability, a.Operation, a.Environment = rec.Provider, rec.Capability, rec.Operation, rec.Environment
	a.Referent = rec.Referent
	r := rec.Receipt
	if r == nil {
		return
	}
	if a.Receipt != nil && a.Receipt.RecordedAtMs > r.RecordedAtMs {
		return // a later receipt is there already
	}
	rc := *r
	a.Receipt = &rc
	a.Status = string(r.Status)
	if a.Dispatch == nil {
		a.Dispatch = &schema.ActivityDispatch{}
	}
	a.Dispatch.Adapter = rec.Adapter
	a.Dispatch.Attempted = a.Dispatch.Attempted || (r.Reconciliation == nil && r.DispatchAttempted)
	if rec.InFlightAtMs > 0 {
		a.Dispatch.StartedAtMs = rec.InFlightAtMs
	}
	if r.Reconciliation == nil {
		a.Dispatch.FinishedAtMs = r.RecordedAtMs
		a.Dispatch.Status = r.Status
		a.Dispatch.ErrorCode = r.ErrorCode
	}
	if r.Disclosure != nil {
		d := *r.Disclosure
		a.Disclosure = &d
	}
	if rec.ReconcileAttempt > 0 || rec.ReconcileNextAtMs > 0 || rec.Resolution != "" {
		a.Reconciliation = &schema.ActivityReconciliation{
			Attempts:   rec.ReconcileAttempt,
			NextAtMs:   rec.ReconcileNextAtMs,
			Exhausted:  rec.ReconcileExhausted,
			Resolution: rec.Resolution,
		}
		if r.Reconciliation != nil {
			a.Reconciliation.LastAttemptID = r.Reconciliation.AttemptID
			a.Reconciliation.ResolvedBy = r.Reconciliation.Operator // only an operator's receipt names one
		}
	}
}

// GiveUp ends a proposal dispatch could not process: from the journal, so
// that a fingerprint that may have reached a provider is reported
// DISPATCH_INTERRUPTED and never sent again.
func (s *Stage) GiveUp(ctx context.Context, in *stages.Input, cause error) (stages.Result, error) {
	now := stages.NowMs(s.Clock)
	env, err := s.decodeEnvelope(in)
	if err != nil {
		_, _, tok, _ := s.Subjects.ParseStage(in.Subject)
		h, id, ok := subjects.ParseProposalToken(tok)
		inc := schema.NewIncident(schema.PhaseDispatch, schema.CodeProcessingFailed)
		if !ok || !schema.ValidProposalID(id) {
			return stages.Result{Events: []schema.Incident{inc}}, nil
		}
		return stages.Result{Outcomes: []schema.Outcome{schema.FailureOutcome(schema.ProposalRef{Host: h, ProposalID: id}, inc, now)}}, nil
	}
	if !bound(env) {
		return rejected(), nil
	}
	fp := env.Grounded.Fingerprint
	unlock := s.Store.Lock("fp/" + fp)
	defer unlock()
	if e, found, err := s.Store.Ended(env.Ref()); err == nil && found {
		return s.ended(env, e), nil
	}
	rec, found, err := s.Store.Intent(fp)
	if err != nil {
		return stages.Result{}, err
	}
	if !found {
		rec = s.newIntent(env, now)
	}
	rec.AddProposal(env.Ref())
	switch {
	case rec.Receipt != nil:
		return s.republish(env, rec, now)
	case rec.State == kv.IntentInFlight:
		return s.finish(ctx, env, rec, Interrupted(), "interrupted", nil)
	case rec.State == kv.IntentNotInvoked:
		return s.finish(ctx, env, rec, MapDispatch(schema.AdapterReply{}, adapters.ErrNotInvoked), "dispatch", nil)
	}
	s.Log.Error("dispatch gave up before anything was written", "host", env.Host, "proposal_id", env.Proposal.ProposalID, "fingerprint", fp, "cause", cause)
	inc := schema.NewIncident(schema.PhaseDispatch, schema.CodeProcessingFailed)
	o := schema.FailureOutcome(env.Ref(), inc, now)
	o.Fingerprint, o.Referent = schema.StringPtr(fp), schema.StringPtr(env.Grounded.Referent)
	return stages.Result{Outcomes: []schema.Outcome{o}}, nil
}
