package sim

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/intent"
	"github.com/portcullis/portcullis/kv/intent/intenttest"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/dispatch"
	"github.com/portcullis/portcullis/stages/reconciliation"
)

// throughStages makes a table row's event happen the way the stages make
// it — dispatch.Step or reconciliation.Step from the facts that lead to
// the event, reconciliation.Settle for an operator's settlement — and
// says whether they committed the record Apply gives, byte for byte, and
// told the same outcomes. ok is false for an event the stages do not
// reach this way: a refused event other than a wait (the stages never
// make it), any but a join on a record with a receipt (dispatch answers
// from it first), a reply of unavailable to a call in flight (dispatch
// records not_invoked first), and the findings reconcileMismatch leaves.
func throughStages(tr intenttest.Transition) (ok bool, mismatch string) {
	ev, before := tr.Event, tr.Before
	refused := tr.Effects.Refused != nil
	wait := errors.Is(tr.Effects.Refused, intent.ErrLeaseHeld) || errors.Is(tr.Effects.Refused, intent.ErrMovedOn)
	switch ev.Kind {
	case intent.Operator:
		return true, settleMismatch(tr)
	case intent.Poll, intent.Finding, intent.Reopen:
		if refused {
			return false, ""
		}
		return reconcileMismatch(tr)
	}
	if refused && !wait || ev.PollAtMs != ev.NowMs+1000 {
		return false, ""
	}
	if before.Receipt != nil && ev.Kind != intent.Join && ev.Ended == nil {
		return false, "" // a proposal of an intent with a receipt is answered from it first
	}
	env := &schema.Envelope{Schema: schema.SchemaEnvelope, Host: ev.Ref.Host,
		Proposal: schema.Proposal{ProposalID: ev.Ref.ProposalID, Intent: schema.Intent{Provider: before.Provider,
			Capability: before.Capability, Operation: before.Operation, Environment: before.Environment}},
		Grounded:      &schema.Grounded{Referent: before.Referent, Fingerprint: before.Fingerprint, IdempotencyKey: before.IdempotencyKey},
		Authorization: &schema.AuthorizationRecord{},
	}
	f := dispatch.Facts{Env: env, Record: before, Found: before.State != kv.StateNew || len(before.Proposals) > 0, Now: ev.NowMs,
		Self: "Z", Provider: dispatch.Provider{Name: before.Provider, Timeout: time.Second, UnavailableRetry: time.Hour},
		Adapter: "fake", Known: true, Redispatch: ev.Redispatch}
	g := grants{}
	switch ev.Kind {
	case intent.Join:
		if before.Receipt == nil {
			return false, ""
		}
	case intent.Begin:
		f.Self, f.Adapter = ev.By, ev.Adapter
		f.Provider.Timeout = time.Duration(ev.UntilMs-ev.NowMs-1) * time.Millisecond
	case intent.NotInvoked:
		f.Dispatched, f.CallErr, f.Lease = true, adapters.ErrNotInvoked, ev.Lease
	case intent.Reply:
		switch {
		case before.State == kv.StateInFlight:
			f.Dispatched, f.Lease = true, intent.LeaseOf(before)
			if f.Reply, f.CallErr = reply(ev.Verdict); f.Reply.Outcome == "" && f.CallErr == nil {
				return false, ""
			}
		case ev.Verdict.ErrorCode == string(schema.CodeAdapterUnavailable):
			f.Known = false // a provider no longer configured: nothing is sent
		default:
			return false, ""
		}
	case intent.Interrupt:
		f.Self, f.GivingUp = ev.Self, ev.Force
	case intent.GiveUp:
		f.GivingUp = true
	case intent.Deny:
		if ev.Ended != nil {
			f.Ended = ev.Ended
		} else {
			g.code = ev.Code
		}
	case intent.End:
		if ev.Code != schema.CodeProcessingFailed {
			return false, ""
		}
		env.Authorization.Bound = true
	default:
		return false, ""
	}
	d := dispatch.Step(f, dispatch.Rules{Policy: g, ReconcileInterval: time.Second, PollSubject: pollSubject, LeaseMargin: time.Millisecond})
	committed := before
	if d.Writes.Record != nil {
		committed = *d.Writes.Record
	}
	var told []schema.Outcome
	if d.Outcome != nil {
		told = append([]schema.Outcome{*d.Outcome}, d.Others...)
	}
	switch {
	case wait && (d.Retry <= 0 || !d.Writes.Empty()):
		return true, fmt.Sprintf("dispatch did not wait: %+v", d)
	case ev.Kind == intent.Begin && d.Call != dispatch.CallProvider:
		return true, "dispatch did not call the provider after its in-flight record"
	}
	return true, differ(tr, committed, told)
}

// reconcileMismatch makes a poll, a finding or a reopening happen through
// reconciliation.Step: the trigger of attempt n, the attempt's
// checkpoint, and the provider's answer that leads to the event. ok is
// false for a finding the stage does not reach from the answer alone: an
// absence (rejected, failed_before_dispatch) of an unknown effect, which
// it believes only past the fence and, for a request that may have been
// lost, turns into a reopening.
func reconcileMismatch(tr intenttest.Transition) (ok bool, mismatch string) {
	ev, before := tr.Event, tr.Before
	r := reconciliation.Rules{Interval: 500 * time.Millisecond, MaxAttempts: 100, PollSubject: pollSubject}
	f := reconciliation.Facts{Trigger: kv.Trigger{Fingerprint: before.Fingerprint, Attempt: ev.Attempt}, Record: before,
		Found: true, Now: ev.NowMs, MayQuery: true}
	switch ev.Kind {
	case intent.Poll:
		if n := before.ReconcileAttempt; n > 0 {
			f.Previous, f.PreviousFound = kv.Attempt{AttemptID: kv.AttemptID(before.Fingerprint, n), Number: n, Status: "error"}, true
		}
	case intent.Finding:
		if ev.PollAtMs != ev.NowMs+1000 || ev.Attempt != 1 {
			return false, ""
		}
		f.Checkpoint = kv.Attempt{AttemptID: ev.AttemptID, Number: ev.Attempt, StartedAtMs: ev.NowMs}
		f.CheckpointFound, f.Queried = true, true
		v := ev.Verdict
		switch {
		case v.Exhausted:
			f.CallErr, r.MaxAttempts = errors.New("connection reset"), ev.Attempt
		case v.Settled && v.Status == schema.StatusConfirmed:
			f.Reply = schema.AdapterReply{Outcome: schema.ReplyConfirmed}
		case v.Settled && !reconciliation.Verifying(before.Receipt):
			return false, ""
		case v.Settled && v.Status == schema.StatusRejected:
			f.Reply = schema.AdapterReply{Outcome: schema.ReplyRejected}
		case v.Settled:
			f.Reply = schema.AdapterReply{Outcome: schema.ReplyFailedBeforeDispatch}
		default:
			f.CallErr = errors.New("connection reset")
		}
	case intent.Reopen:
		// A poll past the fence hears that the request never arrived, and
		// the envelope is held.
		f.Trigger.Attempt = before.ReconcileAttempt
		f.Checkpoint = kv.Attempt{AttemptID: kv.AttemptID(before.Fingerprint, before.ReconcileAttempt), Number: before.ReconcileAttempt, StartedAtMs: ev.NowMs}
		f.CheckpointFound, f.Queried, f.HeldRead, f.Held = true, true, true, []byte("{}")
		f.Reply = schema.AdapterReply{Outcome: schema.ReplyFailedBeforeDispatch}
		if ev.NowMs <= r.AbsentAfter(before) {
			return false, ""
		}
	}
	d := reconciliation.Step(f, r)
	if d.Writes.Record == nil {
		return true, fmt.Sprintf("reconciliation.Step wrote no record: %s", d.Note)
	}
	switch {
	case ev.Kind == intent.Poll && !d.Call:
		return true, "reconciliation.Step did not ask the provider after starting the attempt"
	case ev.Kind == intent.Reopen && d.Redispatch == nil:
		return true, "reconciliation.Step did not hand the envelope back to dispatch"
	}
	return true, differ(tr, *d.Writes.Record, d.Outcomes)
}

// settleMismatch runs an operator's settlement through
// reconciliation.Settle.
func settleMismatch(tr intenttest.Transition) string {
	ev := tr.Event
	r := reconciliation.Rules{PollSubject: pollSubject}
	if ev.AbsentAfterMs > 0 {
		r.ClockSkew = time.Duration(ev.AbsentAfterMs-tr.Before.InFlightUntilMs) * time.Millisecond
	}
	st := reconciliation.Settle(reconciliation.SettleFacts{Fingerprint: tr.Before.Fingerprint, Record: tr.Before,
		Found: true, Present: ev.Present, EvidenceRef: ev.EvidenceRef, Operator: ev.Operator, Examined: ev.Examined,
		ObservedAtMs: ev.ObservedAtMs, Now: ev.NowMs}, r)
	if (st.Refused == nil) != (tr.Effects.Refused == nil) || st.Refused != nil && st.Refused.Error() != tr.Effects.Refused.Error() {
		return fmt.Sprintf("reconciliation.Settle refused %v, Apply %v", st.Refused, tr.Effects.Refused)
	}
	if st.Refused != nil {
		return ""
	}
	if st.Writes.Timer == nil {
		return "reconciliation.Settle armed no announcement"
	}
	return differ(tr, *st.Writes.Record, nil)
}

// differ compares what the stage committed and told with Apply's.
func differ(tr intenttest.Transition, committed kv.Intent, told []schema.Outcome) string {
	if got, want := schema.MustMarshal(committed), schema.MustMarshal(tr.After); !bytes.Equal(got, want) {
		return fmt.Sprintf("the stage committed\n\t%s\nApply gives\n\t%s", got, want)
	}
	if k := tr.Event.Kind; k == intent.Operator || k == intent.Poll || k == intent.Reopen {
		return ""
	}
	if got, want := schema.MustMarshal(told), schema.MustMarshal(tr.Effects.Told); !bytes.Equal(got, want) {
		return fmt.Sprintf("the stage told\n\t%s\nApply tells\n\t%s", got, want)
	}
	return ""
}

// reply is the provider's answer (or the call's error) that
// dispatch.MapDispatch maps to verdict v.
func reply(v kv.Verdict) (schema.AdapterReply, error) {
	switch schema.Code(v.ErrorCode) {
	case schema.CodeAdapterTimeout:
		return schema.AdapterReply{}, adapters.ErrTimeout
	case schema.CodeAdapterError:
		return schema.AdapterReply{}, errors.New("connection reset")
	case schema.CodeAdapterUnavailable:
		return schema.AdapterReply{}, nil
	}
	switch v.Status {
	case schema.StatusConfirmed:
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed}, nil
	case schema.StatusAcknowledged:
		return schema.AdapterReply{Outcome: schema.ReplyAcknowledged}, nil
	case schema.StatusRejected:
		return schema.AdapterReply{Outcome: schema.ReplyRejected}, nil
	case schema.StatusFailedBeforeDispatch:
		return schema.AdapterReply{Outcome: schema.ReplyFailedBeforeDispatch}, nil
	}
	return schema.AdapterReply{Outcome: schema.ReplyIndeterminate}, nil
}

// grants is the re-check: it denies with code, or permits ("").
type grants struct{ code schema.Code }

func (g grants) JudgeGrant(*schema.Grant, *schema.Envelope, int64) (schema.Code, []schema.PolicyEvaluation) {
	return g.code, nil
}

func (g grants) ScreenProposal(*schema.Envelope) (schema.Code, []schema.PolicyEvaluation) {
	return "", nil
}
