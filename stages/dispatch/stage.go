package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/disclosure"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/adapter"
	"github.com/portcullis/portcullis/stages/fault"
)

// Stage is the dispatch stage's handler: it locks the fingerprint, loads
// the journal, steps, commits, makes the one call the step asks for, and
// steps again, until the step publishes.
type Stage struct {
	Journal   kv.Journal
	Adapters  map[string]Adapter // by provider name
	Providers []Provider
	// Policy re-checks the grant and managed policy (SPEC §3 step 3).
	Policy stages.Grants
	// NC carries disclosure requests (core NATS request-reply).
	NC *nats.Conn
	// Route: the stage's own stream in; Next is the stage that verifies
	// and reconciles, whose first poll fires on its timer subject.
	Route    stages.Route
	Clock    stages.Clock
	Metrics  *metrics.Metrics
	Activity kv.Activity
	// Authorized, if set, is the activity edit of the permit an envelope
	// carries (authorization.HandedOffActivity), applied before
	// dispatch's own: authorization's write of it may have been lost.
	Authorized func(env *schema.Envelope) func(a *schema.Activity)
	Log        *slog.Logger
	// ReconcileInterval is the wait before the first reconciliation or
	// verification poll.
	ReconcileInterval time.Duration
	// Self is this processor's instance id, written into its in-flight
	// records; LeaseMargin is Rules.LeaseMargin (0: the default).
	Self        string
	LeaseMargin time.Duration
	// MsgID is the processor's message id for an id (stages.Sealer's
	// MsgID): with it dispatch recognizes reconciliation's redispatch of a
	// held envelope (Facts.Redispatch). nil: none is recognized.
	MsgID func(id string) string
	// Held keeps, in each host's budget, the envelope of a dispatch whose
	// effect is unknown for want of an answer, for reconciliation to send
	// again should the request turn out lost. nil: none is kept.
	Held kv.Envelopes
}

// maxConflicts bounds how often one input reloads the journal after
// another writer changed it; then the input is redelivered.
const maxConflicts = 8

var _ stages.Handler = (*Stage)(nil)

func (s *Stage) rules() Rules {
	return Rules{
		Policy:            s.Policy,
		ReconcileInterval: s.ReconcileInterval,
		PollSubject:       s.Route.NextTimer,
		LeaseMargin:       s.LeaseMargin,
	}
}

// Adapter is a provider's adapter, as dispatch calls it (an
// adapter.Adapter, which internal/adapters implements).
type Adapter interface {
	// Kind is the adapter's kind; receipts record it as `adapter`.
	Kind() string
	// Dispatch sends the action once. It never retries on its own.
	Dispatch(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error)
}

func (s *Stage) provider(name string) (Provider, Adapter, bool) {
	for _, p := range s.Providers {
		if p.Name == name {
			a := s.Adapters[name]
			return p, a, a != nil
		}
	}
	return Provider{}, nil, false
}

// decodeEnvelope reads an authorized, grounded envelope for its subject.
func (s *Stage) decodeEnvelope(in *stages.Input) (*schema.Envelope, error) {
	env, err := s.Route.Envelope(in, stages.Authorized)
	if err != nil {
		return nil, fmt.Errorf("dispatch: %w: %w", stages.ErrPermanent, err)
	}
	return env, nil
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

// Handle runs SPEC §3 Dispatch for one authorized proposal under its
// fingerprint's lock: steps 1–5 for one fingerprint never run concurrently.
func (s *Stage) Handle(ctx context.Context, in *stages.Input) (stages.Result, error) {
	env, err := s.decodeEnvelope(in)
	if err != nil {
		return stages.Result{}, err
	}
	if !bound(env) {
		s.Log.Error("dispatch: fingerprint does not match the proposal it came with; message rejected", "seq", in.StreamSeq)
		return rejected(), nil
	}
	return s.run(ctx, env, false, in.Header.Get(nats.MsgIdHdr))
}

// GiveUp ends a proposal dispatch could not process, from the journal: a
// fingerprint that may have reached a provider is reported
// DISPATCH_INTERRUPTED and never sent again.
func (s *Stage) GiveUp(ctx context.Context, in *stages.Input, cause error) (stages.Result, error) {
	env, err := s.decodeEnvelope(in)
	if err != nil {
		ref, _, ok := s.Route.ProposalRef(in.Subject)
		inc := schema.NewIncident(schema.PhaseDispatch, schema.CodeProcessingFailed)
		if !ok {
			return stages.Result{Events: []schema.Incident{inc}}, nil
		}
		return stages.Result{Outcomes: []schema.Outcome{schema.FailureOutcome(ref, inc, stages.NowMs(s.Clock))}}, nil
	}
	if !bound(env) {
		return rejected(), nil
	}
	s.Log.Error("dispatch gave up on a proposal; ending it from the journal", "host", env.Host, "proposal_id", env.Proposal.ProposalID,
		"fingerprint", env.Grounded.Fingerprint, "cause", cause)
	return s.run(ctx, env, true, in.Header.Get(nats.MsgIdHdr))
}

// run is the shell around Step. On a shared journal another processor may
// change the record between Load and Commit (ErrConflict): nothing of the
// commit took effect, so run loads again and steps again — keeping what
// this run did since: a provider called once is never called again, and
// its reply, if another processor's record won (it found the dispatch's
// lease lapsed and recorded DISPATCH_INTERRUPTED), is left to
// reconciliation, which asks the provider what happened.
func (s *Stage) run(ctx context.Context, env *schema.Envelope, givingUp bool, msgID string) (stages.Result, error) {
	fp := env.Grounded.Fingerprint
	unlock := s.Journal.Lock(fp)
	defer unlock()
	f, err := s.facts(env, givingUp)
	if err != nil {
		return stages.Result{}, err
	}
	f.Redispatch = s.redispatchOf(msgID, f.Record)
	var disc *disclosure.Disclosure
	defer func() {
		if disc != nil {
			disc.Wipe() // the values live only for the adapter call
		}
	}()
	r := s.rules()
	conflicts := 0
	for {
		d := Step(f, r)
		if d.Call == CallProvider {
			if f.Dispatched {
				return stages.Result{}, fmt.Errorf("dispatch: a step asked to call the provider twice: %w", stages.ErrPermanent)
			}
			fault.Hit(fault.DispatchBeforeInFlight)
		}
		if err := s.Journal.Commit(fp, d.Writes); err != nil {
			if errors.Is(err, kv.ErrConflict) && conflicts < maxConflicts {
				conflicts++
				if f.Dispatched {
					s.Log.Warn("dispatch: another processor recorded this intent while its provider call ran; its record stands and reconciliation settles the effect",
						"fingerprint", fp, "reply", f.Reply.Outcome, "call_failed", f.CallErr != nil)
				}
				if err := s.reload(&f); err != nil {
					return stages.Result{}, err
				}
				f.Redispatch = s.redispatchOf(msgID, f.Record)
				continue
			}
			if d.Call == CallProvider && !stages.Transient(err) {
				// The store failed (a replicated journal that did not
				// answer is an outage: retried, never this).
				s.Log.Error("in-flight record not written; the provider is not called", "fingerprint", fp, "err", err)
				f.CheckpointErr = err
				continue
			}
			// Nothing changed on disk: a redelivery finds the journal as it
			// was (in flight after a call: DISPATCH_INTERRUPTED).
			return stages.Result{}, fmt.Errorf("dispatch: %w", err)
		}
		switch d.Call {
		case CallDisclosure:
			var code schema.Code
			disc, code, err = s.resolve(ctx, env, f.Provider)
			if err != nil {
				return stages.Result{}, err
			}
			f.DisclosureCode = code
			if disc != nil {
				rec := disc.Record
				f.Disclosed = &rec
			}
		case CallProvider:
			fault.Hit(fault.DispatchAfterInFlight)
			f.Record = *d.Writes.Record
			f.Lease = LeaseOf(f.Record)
			f.Reply, f.CallErr = s.dispatch(ctx, env, f, disc)
			f.Dispatched = true
			fault.Hit(fault.DispatchAfterReply)
			f.Now = stages.NowMs(s.Clock)
			if errors.Is(f.CallErr, adapter.ErrInvalidRequest) {
				s.Log.Error("adapter refused the request as invalid; nothing was sent", "fingerprint", fp)
			}
		default:
			if d.Retry > 0 && d.Writes.Empty() {
				s.Log.Debug("dispatch: in flight at another processor; waiting for its receipt or the end of its lease",
					"fingerprint", fp, "writer", f.Record.InFlightBy, "retry", d.Retry)
			}
			return s.result(env, d), nil
		}
	}
}

// redispatchOf is the redispatch of rec an input with message id msgID is
// (Facts.Redispatch): rec's latest, when msgID is its kv.RedispatchID's.
func (s *Stage) redispatchOf(msgID string, rec kv.Intent) int {
	if s.MsgID == nil || msgID == "" || rec.Redispatches == 0 || msgID != s.MsgID(kv.RedispatchID(rec.Fingerprint, rec.Redispatches)) {
		return 0
	}
	return rec.Redispatches
}

// reload reads the fingerprint's record again after a conflict.
func (s *Stage) reload(f *Facts) error {
	rec, found, err := s.Journal.Load(f.Env.Grounded.Fingerprint)
	if err != nil {
		return fmt.Errorf("dispatch: %w", err)
	}
	f.Now = stages.NowMs(s.Clock)
	if !found {
		rec = kv.NewIntent(kv.IdentityOf(f.Env), f.Adapter, f.Now)
	}
	f.Record, f.Found = rec, found
	if f.Ended == nil {
		// Another processor may have ended the proposal since.
		if e, found, err := s.Journal.Ended(f.Env.Ref()); err != nil {
			return fmt.Errorf("dispatch: read proposal end: %w", err)
		} else if found {
			f.Ended = &e
		}
	}
	return nil
}

// facts loads what the step decides from.
func (s *Stage) facts(env *schema.Envelope, givingUp bool) (Facts, error) {
	now := stages.NowMs(s.Clock)
	f := Facts{Env: env, Now: now, GivingUp: givingUp, Self: s.Self}
	if e, found, err := s.Journal.Ended(env.Ref()); err != nil {
		return Facts{}, fmt.Errorf("dispatch: read proposal end: %w", err)
	} else if found {
		f.Ended = &e
	}
	rec, found, err := s.Journal.Load(env.Grounded.Fingerprint)
	if err != nil {
		return Facts{}, fmt.Errorf("dispatch: %w", err)
	}
	prov, a, known := s.provider(env.Proposal.Intent.Provider)
	f.Provider, f.Known = prov, known
	if known {
		f.Adapter = a.Kind()
	}
	if !found {
		rec = kv.NewIntent(kv.IdentityOf(env), f.Adapter, now)
	}
	f.Record, f.Found = rec, found
	return f, nil
}

// resolve asks the host's resolver for the disclosure's values: a closed
// code for a failure that denies, an error for one that may pass (retried).
func (s *Stage) resolve(ctx context.Context, env *schema.Envelope, prov Provider) (*disclosure.Disclosure, schema.Code, error) {
	req, err := disclosure.RequestForEnvelope(env)
	if err != nil {
		return nil, "", fmt.Errorf("dispatch: disclosure request: %w: %w", stages.ErrPermanent, err)
	}
	got, err := disclosure.Resolve(ctx, s.NC, s.Route.Subjects.DisclosureResolve(), req, prov.Timeout)
	if code, ok := disclosure.Code(err); ok {
		return nil, code, nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("dispatch: disclosure: %w", err)
	}
	return &got, "", nil
}

// dispatch makes the provider call the in-flight record announced, with
// the record's lease end as the request's not_after_ms (SPEC §4). A
// request whose lease ended before it could leave (the processor stalled
// between the in-flight write and here) is not sent: another processor may
// already have declared the dispatch interrupted. It is answered as a
// connector answers a late request (schema.LateReply), which Step treats
// as not invoked. Connectors check again on receipt: a stall after this
// check still cannot make a provider act late.
func (s *Stage) dispatch(ctx context.Context, env *schema.Envelope, f Facts, disc *disclosure.Disclosure) (schema.AdapterReply, error) {
	in := &env.Proposal.Intent
	req := schema.DispatchRequest{
		Schema:         schema.SchemaDispatch,
		Fingerprint:    f.Record.Fingerprint,
		IdempotencyKey: f.Record.IdempotencyKey,
		Target: schema.Target{
			Provider:    in.Provider,
			Capability:  in.Capability,
			Operation:   in.Operation,
			Environment: in.Environment,
			Referent:    f.Record.Referent,
		},
		Payload:       in.Payload,
		ExternalSpend: in.ExternalSpend,
		NotAfterMs:    f.Record.InFlightUntilMs,
	}
	if schema.Late(req.NotAfterMs, stages.NowMs(s.Clock)) {
		s.Log.Warn("dispatch: the lease ended before the request could be sent; not sent",
			"fingerprint", req.Fingerprint, "not_after_ms", req.NotAfterMs)
		return schema.LateReply(), nil
	}
	if disc != nil {
		req.ProtectedDisclosure = disc.ForDispatch()
	}
	fault.Hit(fault.DispatchBeforeSend)
	start := time.Now()
	reply, err := s.Adapters[in.Provider].Dispatch(ctx, req)
	s.Metrics.DispatchDuration.WithLabelValues(in.Provider).Observe(time.Since(start).Seconds())
	req.ProtectedDisclosure = nil
	return reply, err
}

// result turns a publishing decision into what the runner does.
func (s *Stage) result(env *schema.Envelope, d Decision) stages.Result {
	res := stages.Result{Events: d.Events, RetryAfter: d.Retry}
	if d.Outcome != nil {
		res.Outcomes = append([]schema.Outcome{*d.Outcome}, d.Others...)
	}
	var hold func(ctx context.Context) error
	if d.Hold != "" && s.Held != nil {
		// Kept (sealed, under the host's and the intent's subject) for a
		// redispatch, should reconciliation learn the request never
		// arrived: once the outcomes are out, before the input is acked
		// (a redelivery keeps it again, under the same id).
		data, id := schema.EncodeEnvelope(env), d.Hold
		hold = func(ctx context.Context) error { return s.hold(ctx, env, data, id) }
	}
	if rc := d.Writes.Receipt; rc != nil {
		fault.Hit(fault.DispatchAfterReceipt)
		s.Metrics.Dispatches.WithLabelValues(rc.Provider, string(rc.Status)).Inc()
		s.Log.Info("dispatch recorded", "host", env.Host, "proposal_id", env.Proposal.ProposalID, "fingerprint", rc.Fingerprint,
			"status", rc.Status, "receipt_id", rc.ReceiptID)
	}
	if e := d.Writes.Ended; e != nil {
		s.Log.Info("dispatch: proposal denied at the re-check", "host", env.Host, "proposal_id", env.Proposal.ProposalID,
			"fingerprint", env.Grounded.Fingerprint, "code", e.Ended.Code)
	}
	if d.Activity != nil && s.Activity != nil {
		fp, edit := env.Grounded.Fingerprint, d.Activity.Apply
		if s.Authorized != nil {
			if permit := s.Authorized(env); permit != nil {
				own := edit
				edit = func(a *schema.Activity) { permit(a); own(a) }
			}
		}
		res.Done = func(ctx context.Context) error {
			if hold != nil {
				if err := hold(ctx); err != nil {
					return err
				}
			}
			fault.Hit(fault.DispatchAfterOutcome)
			return s.Activity.Update(ctx, fp, edit)
		}
	} else if hold != nil {
		res.Done = hold
	}
	return res
}

// hold keeps env, the envelope of a dispatch whose effect is unknown, in
// its host's budget. A host whose budget is spent keeps none: should its
// request turn out lost, reconciliation ends the intent
// FAILED_BEFORE_DISPATCH instead of sending it again — that host's loss
// alone, where waiting for room would hold the dispatch stream every host
// needs.
func (s *Stage) hold(ctx context.Context, env *schema.Envelope, data []byte, id string) error {
	err := s.Held.Keep(ctx, env.Host, kv.Hex(env.Grounded.Fingerprint), data, id)
	if errors.Is(err, kv.ErrBudget) {
		s.Log.Warn("dispatch: the envelope of a dispatch whose effect is unknown is not kept: its host's budget is spent; should the request turn out lost, the intent ends FAILED_BEFORE_DISPATCH instead of being sent again",
			"host", env.Host, "proposal_id", env.Proposal.ProposalID, "fingerprint", env.Grounded.Fingerprint)
		return nil
	}
	if err != nil {
		return fmt.Errorf("dispatch: keep the envelope: %w", err)
	}
	return nil
}
