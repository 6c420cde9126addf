package reconciliation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/intent"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/adapter"
	"github.com/portcullis/portcullis/stages/fault"
	"github.com/portcullis/portcullis/subjects"
)

// Stage is the reconciliation stage. As a stages.Handler it consumes the
// timers the scheduler fires on `<prefix>.stage.<Self>.timer.<hex>` (dispatch
// schedules the first poll, each poll the next); Resolve and Indeterminate
// serve the operator.
//
// Every step for a fingerprint runs under the journal's fingerprint lock,
// which dispatch holds too, so a poll, a dispatch republish and an
// operator's settlement never interleave.
type Stage struct {
	Journal  kv.Journal
	Adapters map[string]Adapter // by provider name
	// Route: the stage consumes its own timers (Self); it has no successor.
	Route    stages.Route
	Clock    stages.Clock
	Metrics  *metrics.Metrics
	Activity kv.Activity // nil: no activity snapshots
	Log      *slog.Logger
	// Interval is reconciliation.interval: poll n waits Backoff(Interval, n).
	Interval time.Duration
	// MaxAttempts is reconciliation.max_attempts.
	MaxAttempts int
	// ClockSkew is approval.clock_skew (Rules.ClockSkew).
	ClockSkew time.Duration
	// Held are the envelopes dispatch kept, per host, for intents whose
	// effect is unknown: one is sent again when its request is found lost
	// in flight (nil: never dispatched again). Redispatch is the subject
	// dispatch receives a proposal's hand-off on (its token:
	// "<h>.<proposal_id>").
	Held       kv.Envelopes
	Redispatch func(token string) string
}

// Adapter is a provider's adapter, as reconciliation asks it (an
// adapter.Adapter, which internal/adapters implements).
type Adapter interface {
	// Reconcile asks, read-only, what became of an earlier dispatch.
	Reconcile(ctx context.Context, req schema.ReconcileRequest) (schema.AdapterReply, error)
}

var _ stages.Handler = (*Stage)(nil)

// Errors of Resolve.
var (
	ErrInvalidFingerprint = errors.New("reconciliation: not a fingerprint (sha256:<64 hex>)")
	ErrInvalidEvidence    = errors.New("reconciliation: evidence must be one line of at most 512 characters containing ':'")
	ErrNotFound           = intent.ErrNoReceipt
	ErrNotIndeterminate   = intent.ErrNotIndeterminate
	// ErrSuperseded (Settle, with SettleFacts.Examined): the latest
	// receipt is not the one the operator examined.
	ErrSuperseded = intent.ErrSuperseded
	// ErrTooEarly (Settle, with SettleFacts.ObservedAtMs; wrapped with
	// ErrNotIndeterminate): an absence observed before the dispatch's
	// request expired (Rules.AbsentAfter).
	ErrTooEarly = intent.ErrTooEarly
)

// errTrigger marks a timer message that is not a valid trigger.
var errTrigger = errors.New("reconciliation: malformed trigger")

// maxAttemptNumber bounds a trigger's attempt number (max_attempts is far
// smaller in any sane configuration).
const maxAttemptNumber = 1 << 20

func (s *Stage) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

func (s *Stage) rules() Rules {
	return Rules{
		Interval: s.Interval, MaxAttempts: s.MaxAttempts, ClockSkew: s.ClockSkew,
		PollSubject: s.Route.Timer,
	}
}

// DecodeTrigger reads a timer message: the subject names the fingerprint's
// hex digits, the body is a kv.Trigger for that fingerprint with an
// attempt number ≥ 1, or an announcement.
func DecodeTrigger(s subjects.Subjects, subject string, data []byte) (kv.Trigger, error) {
	_, kind, id, ok := s.ParseStage(subject)
	if !ok || kind != subjects.KindTimer || !schema.ValidFingerprintKey(id) {
		return kv.Trigger{}, fmt.Errorf("%w: subject", errTrigger)
	}
	var tr kv.Trigger
	if err := schema.Decode(data, &tr); err != nil {
		return kv.Trigger{}, fmt.Errorf("%w: %w", errTrigger, err)
	}
	if tr.Fingerprint != schema.FingerprintOfKey(id) {
		return kv.Trigger{}, fmt.Errorf("%w: fingerprint", errTrigger)
	}
	if tr.Announce != (tr.Attempt == 0) || tr.Attempt < 0 || tr.Attempt > maxAttemptNumber {
		return kv.Trigger{}, fmt.Errorf("%w: attempt", errTrigger)
	}
	return tr, nil
}

// Handle runs one poll (or announcement) of a fingerprint.
func (s *Stage) Handle(ctx context.Context, in *stages.Input) (stages.Result, error) {
	tr, err := DecodeTrigger(s.Route.Subjects, in.Subject, in.Data)
	if err != nil {
		return stages.Result{}, fmt.Errorf("%w: %w", stages.ErrPermanent, err)
	}
	return s.run(ctx, tr, true)
}

// GiveUp ends a trigger the stage could not process. A malformed one is
// dropped with a PROCESSING_FAILED event. A valid poll is recorded as an
// attempt that could not ask the provider (RECONCILE_ERROR), so that
// polling moves on to the next attempt or to exhaustion instead of stopping
// without a word; the provider is never asked from here.
func (s *Stage) GiveUp(ctx context.Context, in *stages.Input, cause error) (stages.Result, error) {
	tr, err := DecodeTrigger(s.Route.Subjects, in.Subject, in.Data)
	if err != nil {
		s.log().Error("malformed reconciliation trigger dropped", "seq", in.StreamSeq)
		return stages.Result{Events: []schema.Incident{schema.NewIncident(schema.PhaseReconciliation, schema.CodeProcessingFailed)}}, nil
	}
	s.log().Error("reconciliation gave up on a trigger; recording it without asking the provider",
		"fingerprint", tr.Fingerprint, "attempt", tr.Attempt, "cause", cause)
	return s.run(ctx, tr, false)
}

// maxConflicts bounds how often one trigger reloads the journal after
// another writer changed it; then the trigger is redelivered.
const maxConflicts = 8

// run is the shell around Step. On a shared journal another processor may
// change the record between Load and Commit (ErrConflict: nothing of the
// commit took effect): run loads again and steps again, keeping the
// provider's answer if it was asked — it is never asked twice.
func (s *Stage) run(ctx context.Context, tr kv.Trigger, mayQuery bool) (stages.Result, error) {
	fp := tr.Fingerprint
	unlock := s.Journal.Lock(fp)
	defer unlock()
	f := Facts{Trigger: tr, MayQuery: mayQuery}
	if err := s.load(&f); err != nil {
		return stages.Result{}, err
	}
	r := s.rules()
	conflicts := 0
	for {
		d := Step(f, r)
		if d.Call && f.Queried {
			return stages.Result{}, fmt.Errorf("reconciliation: a step asked to query twice: %w", stages.ErrPermanent)
		}
		if err := s.Journal.Commit(fp, d.Writes); err != nil {
			if errors.Is(err, kv.ErrConflict) && conflicts < maxConflicts {
				conflicts++
				if err := s.load(&f); err != nil {
					return stages.Result{}, err
				}
				continue
			}
			// Nothing changed on disk; a redelivery finds the attempt
			// started and unfinished and records it without asking again.
			return stages.Result{}, fmt.Errorf("reconciliation: %w", err)
		}
		if d.ReadHeld {
			held, err := s.held(ctx, f.Record)
			if err != nil {
				return stages.Result{}, err
			}
			f.Held = held
			f.HeldRead = true
			continue
		}
		if !d.Call {
			return s.result(d, fp), nil
		}
		fault.Hit(fault.ReconcileAfterCheckpoint)
		f.Record, f.Checkpoint, f.CheckpointFound = *d.Writes.Record, *d.Writes.Attempt, true
		f.Reply, f.CallErr = s.query(ctx, &f.Record, d.Writes.Attempt.AttemptID)
		f.Queried = true
		fault.Hit(fault.ReconcileAfterReply)
		f.Now = stages.NowMs(s.Clock)
	}
}

// load reads what Step decides from: the record, and the checkpoints of
// the trigger's attempt (when it is the record's current one) and of the
// attempt before it (when the trigger is the next one).
func (s *Stage) load(f *Facts) error {
	fp, n := f.Trigger.Fingerprint, f.Trigger.Attempt
	rec, found, err := s.Journal.Load(fp)
	if err != nil {
		return fmt.Errorf("reconciliation: %w", err)
	}
	f.Record, f.Found, f.Now = rec, found, stages.NowMs(s.Clock)
	f.Checkpoint, f.CheckpointFound, f.Previous, f.PreviousFound = kv.Attempt{}, false, kv.Attempt{}, false
	if !found || f.Trigger.Announce {
		return nil
	}
	switch {
	case n == rec.ReconcileAttempt:
		f.Checkpoint, f.CheckpointFound, err = s.Journal.Attempt(fp, kv.AttemptID(fp, n))
	case n == rec.ReconcileAttempt+1 && rec.ReconcileAttempt > 0:
		f.Previous, f.PreviousFound, err = s.Journal.Attempt(fp, kv.AttemptID(fp, rec.ReconcileAttempt))
	}
	if err != nil {
		return fmt.Errorf("reconciliation: read attempt: %w", err)
	}
	return nil
}

// query asks the provider, read-only, what became of the intent.
func (s *Stage) query(ctx context.Context, rec *kv.Intent, attemptID string) (schema.AdapterReply, error) {
	a := s.Adapters[rec.Provider]
	if a == nil {
		// The provider left the configuration: nobody can be asked.
		return schema.AdapterReply{}, fmt.Errorf("reconciliation: no adapter for the provider: %w", adapter.ErrNotInvoked)
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

// held reads the envelope dispatch kept for rec's intent (nil: none, or
// one without a valid seal): each host whose proposals carry the intent
// keeps its own; the newest is sent again.
func (s *Stage) held(ctx context.Context, rec kv.Intent) ([]byte, error) {
	if s.Held == nil {
		return nil, nil
	}
	hex := kv.Hex(rec.Fingerprint)
	var newest []byte
	var newestAt int64
	seen := map[string]bool{}
	for _, ref := range rec.Proposals {
		if seen[ref.Host] {
			continue
		}
		seen[ref.Host] = true
		data, at, err := s.Held.Get(ctx, ref.Host, hex)
		switch {
		case errors.Is(err, kv.ErrForged):
			s.log().Error("reconciliation: a held envelope without a valid seal; ignored", "fingerprint", rec.Fingerprint)
		case errors.Is(err, kv.ErrNotKept):
		case err != nil:
			return nil, fmt.Errorf("reconciliation: read the held envelope: %w", err)
		case newest == nil || at > newestAt:
			newest, newestAt = data, at
		}
	}
	return newest, nil
}

// result turns a publishing decision into what the runner does.
func (s *Stage) result(d Decision, fp string) stages.Result {
	switch {
	case d.Alarm:
		s.log().Error("reconciliation: "+d.Note, "fingerprint", fp)
	case d.Redispatch != nil:
		s.log().Info("reconciliation: "+d.Note, "fingerprint", fp)
	case d.Note != "":
		s.log().Debug("reconciliation trigger: nothing to do", "why", d.Note)
	}
	res := stages.Result{Outcomes: d.Outcomes, Events: d.Events, RetryAfter: d.Retry}
	if d.Redispatch != nil {
		if m, ok := s.redispatchMessage(d.Redispatch, fp, d.Redispatches); ok {
			res.Next = append(res.Next, m)
		}
	}
	if v, rc := d.Finding, d.Writes.Receipt; v != nil && rc != nil {
		s.Metrics.ReconcileAttempts.WithLabelValues(rc.Provider, v.AttemptStatus).Inc()
		s.log().Info("reconciliation recorded", "fingerprint", rc.Fingerprint, "attempt_id", d.Writes.Attempt.AttemptID,
			"attempt_status", v.AttemptStatus, "status", rc.Status, "receipt_id", rc.ReceiptID)
	}
	if d.Activity && s.Activity != nil && len(d.Outcomes) > 0 {
		fp := *d.Outcomes[0].Fingerprint
		res.Done = func(ctx context.Context) error { return s.updateActivity(ctx, fp) }
	}
	return res
}

// redispatchMessage is the hand-off of a held envelope back to dispatch,
// under the message id of the intent's redispatches-th redispatch (a
// second one, after a crash, is a duplicate; dispatch recognizes it by
// it).
func (s *Stage) redispatchMessage(data []byte, fp string, redispatches int) (stages.Message, bool) {
	env, err := stages.DecodeEnvelope(data, stages.Grounded)
	if err != nil || env.Grounded.Fingerprint != fp {
		s.log().Error("reconciliation: a held envelope that is not the intent's; not dispatched again", "fingerprint", fp)
		return stages.Message{}, false
	}
	token := subjects.ProposalToken(env.Host, env.Proposal.ProposalID)
	return stages.Message{Subject: s.Redispatch(token), Data: data, MsgID: kv.RedispatchID(fp, redispatches)}, true
}

// updateActivity writes the intent's latest state into its snapshot. It
// reads the journal again under the snapshot's lock, so that of two late
// writers the last always writes the newest state.
func (s *Stage) updateActivity(ctx context.Context, fp string) error {
	return s.Activity.Update(ctx, fp, func(a *schema.Activity) {
		rec, found, err := s.Journal.Load(fp)
		if err != nil || !found {
			return
		}
		intent.Project(rec, a)
		if a.Dispatch == nil || a.Dispatch.FinishedAtMs == 0 {
			s.fillDispatch(a, fp)
		}
	})
}

// fillDispatch completes the dispatch section from the first receipt, when
// dispatch's own snapshot write never happened (a crash right after its
// receipt).
func (s *Stage) fillDispatch(a *schema.Activity, fp string) {
	rs, err := s.Journal.Receipts(fp)
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
// pending poll then finds the record settled). The receipt, linked to the
// previous one, is synced together with a timer due now that announces the
// outcome to every proposal through the stage's runner, so that the
// announcement survives a crash right after the decision. Resolve is the
// shell around Settle: lock, load, settle, commit, and on kv.ErrConflict
// load and settle again.
func (s *Stage) Resolve(fp string, present bool, evidenceRef, operator string) (Resolution, error) {
	return s.ResolveChecked(fp, present, evidenceRef, operator, "", 0)
}

// ResolveChecked is Resolve held to what the operator examined: examined
// (when not "") is the receipt id they looked at, refused with
// ErrSuperseded when another receipt is the latest (a redispatch since,
// whose request the provider may have acted on); observedAtMs (when > 0)
// is when they looked at the provider, and an absence observed before the
// dispatch's request expired is refused (ErrTooEarly): it may still
// arrive (internal/sim findings 4 and 5).
func (s *Stage) ResolveChecked(fp string, present bool, evidenceRef, operator, examined string, observedAtMs int64) (Resolution, error) {
	if !schema.ValidFingerprint(fp) {
		return Resolution{}, ErrInvalidFingerprint
	}
	if !schema.ValidEvidenceRef(evidenceRef) {
		return Resolution{}, ErrInvalidEvidence
	}
	unlock := s.Journal.Lock(fp)
	defer unlock()
	var st Settlement
	for conflicts := 0; ; conflicts++ {
		rec, found, err := s.Journal.Load(fp)
		if err != nil {
			return Resolution{}, fmt.Errorf("reconciliation: %w", err)
		}
		st = Settle(SettleFacts{Fingerprint: fp, Record: rec, Found: found, Present: present,
			EvidenceRef: evidenceRef, Operator: operator, Now: stages.NowMs(s.Clock),
			Examined: examined, ObservedAtMs: observedAtMs}, s.rules())
		if st.Refused != nil {
			return Resolution{}, st.Refused
		}
		err = s.Journal.Commit(fp, st.Writes)
		if err == nil {
			break
		}
		if !errors.Is(err, kv.ErrConflict) || conflicts >= maxConflicts {
			return Resolution{}, fmt.Errorf("reconciliation: record resolution: %w", err)
		}
		// A poll or a dispatch of the intent changed it meanwhile (on
		// another processor): judge again on what it holds now.
	}
	rec, r := st.Writes.Record, st.Writes.Receipt
	s.log().Info("operator resolved an indeterminate action", "fingerprint", fp, "status", r.Status, "receipt_id", r.ReceiptID, "operator", operator)
	return Resolution{Receipt: *r, OutcomeKind: rec.Latest.Kind, Proposals: slices.Clone(rec.Proposals)}, nil
}
