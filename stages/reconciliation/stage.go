package reconciliation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"time"

	"github.com/portcullis/portcullis/internal/activity"
	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/fault"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/dispatch"
	"github.com/portcullis/portcullis/subjects"
)

// Stage is the reconciliation stage. As a stages.Handler it consumes the
// timers the scheduler fires on `<prefix>.stage.reconciliation.timer.<hex>`
// (dispatch schedules the first poll, each poll the next); Resolve and
// Indeterminate serve the operator.
//
// Every step for a fingerprint runs under the fingerprint's lock, which
// dispatch holds too, so a poll, a dispatch republish and an operator's
// settlement never interleave.
type Stage struct {
	Store    *kv.Store
	Adapters map[string]adapters.Adapter // by provider name
	Subjects subjects.Subjects
	Clock    stages.Clock
	Metrics  *metrics.Metrics
	Activity *activity.Store // nil: no activity snapshots
	Log      *slog.Logger
	// Interval is reconciliation.interval: poll n waits Backoff(Interval, n).
	Interval time.Duration
	// MaxAttempts is reconciliation.max_attempts.
	MaxAttempts int
}

var _ stages.Handler = (*Stage)(nil)

// Errors of Resolve.
var (
	ErrInvalidFingerprint = errors.New("reconciliation: not a fingerprint (sha256:<64 hex>)")
	ErrInvalidEvidence    = errors.New("reconciliation: evidence must be one line of at most 512 characters containing ':'")
	ErrNotFound           = errors.New("reconciliation: no receipt for this fingerprint")
	ErrNotIndeterminate   = errors.New("reconciliation: the effect is not indeterminate")
)

// errTrigger marks a timer message that is not a valid trigger.
var errTrigger = errors.New("reconciliation: malformed trigger")

// maxAttemptNumber bounds a trigger's attempt number (max_attempts is far
// smaller in any sane configuration).
const maxAttemptNumber = 1 << 20

var hexPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (s *Stage) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

func lockKey(fp string) string { return "fp/" + fp }

// DecodeTrigger reads a timer message: the subject names the fingerprint's
// hex digits, the body is a dispatch.Trigger for that fingerprint with an
// attempt number ≥ 1, or an announcement.
func DecodeTrigger(s subjects.Subjects, subject string, data []byte) (dispatch.Trigger, error) {
	stage, kind, id, ok := s.ParseStage(subject)
	if !ok || stage != subjects.StageReconciliation || kind != subjects.KindTimer || !hexPattern.MatchString(id) {
		return dispatch.Trigger{}, fmt.Errorf("%w: subject", errTrigger)
	}
	var tr dispatch.Trigger
	if err := schema.Decode(data, &tr); err != nil {
		return dispatch.Trigger{}, fmt.Errorf("%w: %w", errTrigger, err)
	}
	if tr.Fingerprint != "sha256:"+id {
		return dispatch.Trigger{}, fmt.Errorf("%w: fingerprint", errTrigger)
	}
	if tr.Announce != (tr.Attempt == 0) || tr.Attempt < 0 || tr.Attempt > maxAttemptNumber {
		return dispatch.Trigger{}, fmt.Errorf("%w: attempt", errTrigger)
	}
	return tr, nil
}

// Handle runs one poll (or announcement) of a fingerprint.
func (s *Stage) Handle(ctx context.Context, in *stages.Input) (stages.Result, error) {
	tr, err := DecodeTrigger(s.Subjects, in.Subject, in.Data)
	if err != nil {
		return stages.Result{}, fmt.Errorf("%w: %w", stages.ErrPermanent, err)
	}
	return s.handle(ctx, tr, true)
}

// GiveUp ends a trigger the stage could not process. A malformed one is
// dropped with a PROCESSING_FAILED event. A valid poll is recorded as an
// attempt that could not ask the provider (RECONCILE_ERROR), so that
// polling moves on to the next attempt or to exhaustion instead of stopping
// without a word; the provider is never asked from here.
func (s *Stage) GiveUp(ctx context.Context, in *stages.Input, cause error) (stages.Result, error) {
	tr, err := DecodeTrigger(s.Subjects, in.Subject, in.Data)
	if err != nil {
		s.log().Error("malformed reconciliation trigger dropped", "seq", in.StreamSeq)
		return stages.Result{Events: []schema.Incident{schema.NewIncident(schema.PhaseReconciliation, schema.CodeProcessingFailed)}}, nil
	}
	s.log().Error("reconciliation gave up on a trigger; recording it without asking the provider",
		"fingerprint", tr.Fingerprint, "attempt", tr.Attempt, "cause", cause)
	return s.handle(ctx, tr, false)
}

func (s *Stage) handle(ctx context.Context, tr dispatch.Trigger, mayQuery bool) (stages.Result, error) {
	fp := tr.Fingerprint
	unlock := s.Store.Lock(lockKey(fp))
	defer unlock()
	rec, found, err := s.Store.Intent(fp)
	if err != nil {
		return stages.Result{}, fmt.Errorf("reconciliation: read journal: %w", err)
	}
	if !found || rec.Receipt == nil {
		s.log().Warn("reconciliation trigger for a fingerprint without a receipt; ignored", "fingerprint", fp)
		return stages.Result{}, nil
	}
	if tr.Announce {
		return s.announce(rec), nil
	}
	n := tr.Attempt
	id := AttemptID(fp, n)
	switch {
	case n == rec.ReconcileAttempt:
		cp, found, err := s.Store.Attempt(fp, id)
		if err != nil {
			return stages.Result{}, fmt.Errorf("reconciliation: read attempt: %w", err)
		}
		if found && cp.Status != "" {
			// Finished: its receipt is on disk. If it is still the latest,
			// its outcomes may not have gone out (a crash before the ack):
			// publish them again; the runner's message ids drop duplicates.
			if r := rec.Receipt; r.Reconciliation != nil && r.Reconciliation.AttemptID == id {
				return s.outcomes(rec, nil), nil
			}
			return stages.Result{}, nil
		}
		if !NeedsWork(&rec) {
			return stages.Result{}, nil
		}
		// Started and never finished: the processor stopped while the
		// provider was being asked. Never ask again for this attempt.
		if !found {
			cp = kv.Attempt{AttemptID: id, Number: n, StartedAtMs: stages.NowMs(s.Clock)}
		}
		s.log().Warn("reconciliation attempt interrupted; recorded without asking again", "fingerprint", fp, "attempt_id", id)
		return s.finish(rec, cp, Replayed(rec.Receipt, n, s.MaxAttempts))
	case n == rec.ReconcileAttempt+1 && NeedsWork(&rec):
		return s.attempt(ctx, rec, n, id, mayQuery)
	}
	// An earlier attempt's timer fired again, or the effect was settled.
	s.log().Debug("stale reconciliation trigger", "fingerprint", fp, "attempt", n)
	return stages.Result{}, nil
}

// attempt runs poll n: checkpoint (Sync), ask the provider, record.
func (s *Stage) attempt(ctx context.Context, rec kv.Intent, n int, id string, mayQuery bool) (stages.Result, error) {
	now := stages.NowMs(s.Clock)
	cp := kv.Attempt{AttemptID: id, Number: n, StartedAtMs: now}
	rec.ReconcileAttempt = n
	rec.UpdatedAtMs = now
	if !mayQuery {
		return s.finish(rec, cp, Abandoned(rec.Receipt, n, s.MaxAttempts))
	}
	b := s.Store.NewBatch()
	b.PutAttempt(rec.Fingerprint, cp)
	b.PutIntent(rec)
	if err := b.Commit(kv.Sync); err != nil {
		return stages.Result{}, fmt.Errorf("reconciliation: checkpoint attempt: %w", err)
	}
	fault.Hit(fault.ReconcileAfterCheckpoint)
	reply, err := s.query(ctx, &rec, id)
	fault.Hit(fault.ReconcileAfterReply)
	return s.finish(rec, cp, Decide(rec.Receipt, reply, err, n, s.MaxAttempts))
}

// query asks the provider, read-only, what became of the intent.
func (s *Stage) query(ctx context.Context, rec *kv.Intent, attemptID string) (schema.AdapterReply, error) {
	a := s.Adapters[rec.Provider]
	if a == nil {
		// The provider left the configuration: nobody can be asked.
		return schema.AdapterReply{}, fmt.Errorf("reconciliation: no adapter for the provider: %w", adapters.ErrNotInvoked)
	}
	prev := rec.Receipt
	return a.Reconcile(ctx, schema.ReconcileRequest{
		Schema:            schema.SchemaReconcile,
		Fingerprint:       rec.Fingerprint,
		IdempotencyKey:    rec.IdempotencyKey,
		AttemptID:         attemptID,
		ProviderActionID:  prev.ProviderActionID,
		PreviousReceiptID: prev.ReceiptID,
	})
}

// finish records an attempt's verdict in one synced batch: the attempt
// finished, the new receipt, the intent, the next poll or its end, and the
// indeterminate index; then returns the outcome for every proposal.
func (s *Stage) finish(rec kv.Intent, cp kv.Attempt, v Verdict) (stages.Result, error) {
	now := stages.NowMs(s.Clock)
	fp := rec.Fingerprint
	prev := rec.Receipt
	r := NewReceipt(prev, v, cp.AttemptID, AttemptStep(cp.AttemptID), now)
	change := IndexChange(prev, &r)
	Apply(&rec, r, v, now)
	cp.Status, cp.FinishedAtMs = v.AttemptStatus, now

	b := s.Store.NewBatch()
	rec.ReconcileNextAtMs = 0
	switch {
	case v.Settled:
		rec.Resolution = ResolvedByProvider
		b.CancelTimer(dispatch.ReconcileTimerID(fp))
	case v.Exhausted:
		b.CancelTimer(dispatch.ReconcileTimerID(fp))
	default:
		rec.ReconcileNextAtMs = now + Backoff(s.Interval, cp.Number+1).Milliseconds()
		dispatch.ScheduleReconcile(b, s.Subjects, fp, cp.Number+1, rec.ReconcileNextAtMs)
	}
	switch change {
	case 1:
		b.SetIndeterminate(fp, now)
	case -1:
		b.SetIndeterminate(fp, 0)
	}
	b.PutAttempt(fp, cp)
	b.AppendReceipt(rec.ReceiptSeq, r)
	b.PutIntent(rec)
	if err := b.Commit(kv.Sync); err != nil {
		// Nothing changed on disk; a redelivery finds the attempt started
		// and unfinished and records it without asking again.
		return stages.Result{}, fmt.Errorf("reconciliation: record attempt: %w", err)
	}
	s.Metrics.ReconcileAttempts.WithLabelValues(rec.Provider, v.AttemptStatus).Inc()
	s.Metrics.Indeterminate.Add(float64(change))
	s.log().Info("reconciliation recorded", "fingerprint", fp, "attempt_id", cp.AttemptID,
		"attempt_status", v.AttemptStatus, "status", r.Status, "receipt_id", r.ReceiptID)
	return s.outcomes(rec, v.Events), nil
}

// outcomes is the latest outcome of an intent for each of its proposals,
// with the snapshot update after they were published.
func (s *Stage) outcomes(rec kv.Intent, events []schema.Incident) stages.Result {
	now := stages.NowMs(s.Clock)
	res := stages.Result{Events: events}
	for _, ref := range rec.Proposals {
		res.Outcomes = append(res.Outcomes, dispatch.Outcome(&rec, ref, now))
	}
	res.Done = func(ctx context.Context) error { return s.updateActivity(ctx, rec) }
	return res
}

// announce publishes an intent's latest outcome (an operator's settlement)
// to every proposal; OPERATOR_RESOLVED goes out as an event with it.
func (s *Stage) announce(rec kv.Intent) stages.Result {
	var events []schema.Incident
	if r := rec.Receipt; rec.Resolution == ResolvedByOperator && r.Reconciliation != nil && r.Reconciliation.AttemptID == OperatorAttemptID(rec.Fingerprint) {
		events = []schema.Incident{schema.NewIncident(schema.PhaseReconciliation, schema.CodeOperatorResolved)}
	}
	return s.outcomes(rec, events)
}

// updateActivity writes the intent's latest state into its snapshot. It
// reads the journal again under the snapshot's lock, so that of two late
// writers the last always writes the newest state.
func (s *Stage) updateActivity(ctx context.Context, fallback kv.Intent) error {
	if s.Activity == nil {
		return nil
	}
	fp := fallback.Fingerprint
	return s.Activity.Update(ctx, fp, func(a *schema.Activity) {
		rec := fallback
		if latest, found, err := s.Store.Intent(fp); err == nil && found {
			rec = latest
		}
		dispatch.ApplyIntent(a, nil, &rec)
		if a.Dispatch == nil || a.Dispatch.FinishedAtMs == 0 {
			s.fillDispatch(a, fp)
		}
	})
}

// fillDispatch completes the dispatch section from the first receipt, when
// dispatch's own snapshot write never happened (a crash right after its
// receipt).
func (s *Stage) fillDispatch(a *schema.Activity, fp string) {
	rs, err := s.Store.Receipts(fp)
	if err != nil || len(rs) == 0 || rs[0].Reconciliation != nil {
		return
	}
	first := rs[0]
	if a.Dispatch == nil {
		a.Dispatch = &schema.ActivityDispatch{Adapter: first.Adapter}
	}
	a.Dispatch.Attempted = a.Dispatch.Attempted || first.DispatchAttempted
	a.Dispatch.FinishedAtMs = first.RecordedAtMs
	a.Dispatch.Status = first.Status
	a.Dispatch.ErrorCode = first.ErrorCode
}

// Resolution is what an operator's settlement recorded.
type Resolution struct {
	Receipt     schema.Receipt
	OutcomeKind schema.Kind
	Proposals   []schema.ProposalRef
}

// Resolve records the finding of the operator named operator (the
// configured name of the operator who signed the request; "" for an
// unsigned one, accepted only in development) about an indeterminate
// effect: present (CONFIRMED) or absent (REJECTED), with one evidence
// reference (validated like a provider's). The receipt names the operator
// in reconciliation.operator, and so does the activity record
// (reconciliation.resolved_by). Only a fingerprint whose latest receipt is
// reconciliation_required can be resolved, exhausted or still polling (its
// pending poll is cancelled). The receipt, linked to the previous one, is
// synced together with a timer due now that announces the outcome to every
// proposal through the stage's runner, so that the announcement survives a
// crash right after the decision.
func (s *Stage) Resolve(fp string, present bool, evidenceRef, operator string) (Resolution, error) {
	if !schema.ValidFingerprint(fp) {
		return Resolution{}, ErrInvalidFingerprint
	}
	if !schema.ValidEvidenceRef(evidenceRef) {
		return Resolution{}, ErrInvalidEvidence
	}
	unlock := s.Store.Lock(lockKey(fp))
	defer unlock()
	rec, found, err := s.Store.Intent(fp)
	if err != nil {
		return Resolution{}, fmt.Errorf("reconciliation: read journal: %w", err)
	}
	if !found || rec.Receipt == nil {
		return Resolution{}, ErrNotFound
	}
	if rec.Receipt.Status != schema.StatusReconciliationRequired {
		return Resolution{}, fmt.Errorf("%w: its latest receipt is %s", ErrNotIndeterminate, rec.Receipt.Status)
	}
	now := stages.NowMs(s.Clock)
	prev := rec.Receipt
	v := Operator(prev, present, evidenceRef, operator)
	r := NewReceipt(prev, v, OperatorAttemptID(fp), OperatorStep, now)
	Apply(&rec, r, v, now)
	rec.Resolution, rec.ReconcileNextAtMs = ResolvedByOperator, 0

	b := s.Store.NewBatch()
	dispatch.ScheduleAnnounce(b, s.Subjects, fp, OperatorStep, now)
	b.SetIndeterminate(fp, 0)
	b.AppendReceipt(rec.ReceiptSeq, r)
	b.PutIntent(rec)
	if err := b.Commit(kv.Sync); err != nil {
		return Resolution{}, fmt.Errorf("reconciliation: record resolution: %w", err)
	}
	s.Metrics.Indeterminate.Dec()
	s.log().Info("operator resolved an indeterminate action", "fingerprint", fp, "status", r.Status, "receipt_id", r.ReceiptID, "operator", operator)
	return Resolution{Receipt: r, OutcomeKind: rec.OutcomeKind, Proposals: slices.Clone(rec.Proposals)}, nil
}

// Pending is one action whose effect is unknown, for the operator's queue.
type Pending struct {
	Fingerprint string               `json:"fingerprint"`
	Provider    string               `json:"provider"`
	Capability  string               `json:"capability"`
	Operation   string               `json:"operation"`
	Environment string               `json:"environment"`
	Referent    string               `json:"referent"`
	Proposals   []schema.ProposalRef `json:"proposals"`
	// SinceMs is when the effect became unknown.
	SinceMs int64 `json:"since_ms"`
	// Attempts polls so far of MaxAttempts; Exhausted once they are spent.
	Attempts    int  `json:"attempts"`
	MaxAttempts int  `json:"max_attempts"`
	Exhausted   bool `json:"exhausted"`
	// NextAtMs is when the next poll is due (0: none).
	NextAtMs int64 `json:"next_at_ms"`
	// ErrorCode and ReceiptID are the latest receipt's.
	ErrorCode string `json:"error_code"`
	ReceiptID string `json:"receipt_id"`
}

// Indeterminate lists every action whose effect is unknown, oldest first.
func (s *Stage) Indeterminate() ([]Pending, error) {
	idx, err := s.Store.Indeterminates()
	if err != nil {
		return nil, fmt.Errorf("reconciliation: read index: %w", err)
	}
	out := make([]Pending, 0, len(idx))
	for _, e := range idx {
		rec, found, err := s.Store.Intent(e.Fingerprint)
		if err != nil {
			return nil, fmt.Errorf("reconciliation: read journal: %w", err)
		}
		if !found || rec.Receipt == nil || rec.Receipt.Status != schema.StatusReconciliationRequired {
			continue // settled meanwhile
		}
		out = append(out, Pending{
			Fingerprint: rec.Fingerprint, Provider: rec.Provider, Capability: rec.Capability,
			Operation: rec.Operation, Environment: rec.Environment, Referent: rec.Referent,
			Proposals: slices.Clone(rec.Proposals), SinceMs: e.SinceMs,
			Attempts: rec.ReconcileAttempt, MaxAttempts: s.MaxAttempts, Exhausted: rec.ReconcileExhausted,
			NextAtMs: rec.ReconcileNextAtMs, ErrorCode: rec.Receipt.ErrorCode, ReceiptID: rec.Receipt.ReceiptID,
		})
	}
	slices.SortStableFunc(out, func(a, b Pending) int {
		switch {
		case a.SinceMs < b.SinceMs:
			return -1
		case a.SinceMs > b.SinceMs:
			return 1
		}
		return 0
	})
	return out, nil
}
