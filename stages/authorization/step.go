// Package authorization is the stage between grounding and dispatch (SPEC
// §2.2, §2.7, §3 Authorization): it authorizes exactly the grounded
// operation with the proposal's inline grant, or parks the proposal
// durably until a standalone grant for it arrives on `<prefix>.grants.>` or
// approval.ttl passes. Managed policies restrict every grant; they never
// grant.
//
// step.go is the pure part: Step decides one input — a grounded proposal,
// a standalone grant or decline, the approval's expiry — from the
// proposal's approval record (kv.Approval): what to write, whether
// to read the parked envelope back first, and what to publish. verdict.go
// judges proposals and grants and renders outcomes, hand-offs and activity.
// stage.go only locks, loads, steps, commits, reads, steps again and hands
// the result to the runner.
package authorization

import (
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// Input is what a step is about.
type Input int

// Inputs.
const (
	// FromProposal: a grounded proposal handed on by grounding.
	FromProposal Input = iota + 1
	// FromTimer: the proposal's approval expiry fired.
	FromTimer
	// FromGrant: a standalone grant or decline, authenticated for its
	// host, names the proposal.
	FromGrant
)

// Facts are what one step decides from.
type Facts struct {
	Input Input
	Ref   schema.ProposalRef
	// ID names the input ("<stream>/<seq>"): a record it decides says
	// DecidedBy ID, so that its redelivery republishes the decision. Seq is
	// its stream sequence.
	ID  string
	Seq uint64
	Now int64
	// GivingUp: the runner gave up on the input (its retries are spent, or
	// it cannot be processed at all).
	GivingUp bool
	// Record is the proposal's approval record; Found whether one exists.
	Record kv.Approval
	Found  bool
	// Env is the proposal's grounded envelope: the input itself
	// (FromProposal; nil only when giving up on one that does not decode),
	// or the parked envelope once Read.
	Env *schema.Envelope
	// Message is the grant or decline (FromGrant).
	Message *Standalone
	// IntentBound: the proposal's intent is dispatched already (its
	// fingerprint has a receipt or an in-flight record in the journal):
	// read for a new proposal that carries no grant, which is then
	// answered from the intent instead of parked (SPEC §2.4).
	IntentBound bool
	// Read: the parked envelope was read back (ReadEnvelope); Env is nil
	// if it is gone from the stream. ReadFailed: the read failed for
	// another reason (only while giving up: otherwise the input is
	// retried).
	Read       bool
	ReadFailed bool
	// ParkRefused: the proposal was to park, and its envelope could not
	// be kept: its host's proposals waiting for approval fill its budget
	// (kv.ErrBudget). It is refused instead, at once.
	ParkRefused bool
}

// Rules are what every step decides with.
type Rules struct {
	Policy Policy
	// TimerSubject is where a proposal's expiry fires: the authorization
	// stage's timer subject for the proposal's token ("<h>.<proposal_id>").
	TimerSubject func(token string) string
}

// Decision is what the shell does for one step, in this order: commit
// Writes (durably; a conflict is retried); if ReadEnvelope, read the
// parked envelope (Record.Seq on the authorization stream) and step again;
// otherwise publish HandOff, Outcome and Events, then apply Activity to
// the snapshot of Fingerprint.
type Decision struct {
	Writes       kv.ApprovalWrites
	ReadEnvelope bool
	// HandOff is the envelope dispatch receives.
	HandOff  *schema.Envelope
	Outcome  *schema.Outcome
	Events   []schema.Incident
	Activity *ActivityChange
	// Fingerprint is the intent whose activity snapshot Activity edits.
	Fingerprint string
	// Note is a value-free line for the log when the step does something
	// unusual; Alarm makes it an error.
	Note  string
	Alarm bool
}

// Step runs SPEC §3 Authorization for one input, one decision at a time:
//   - a redelivered input that decided already republishes its recorded
//     decision, never decides again (a grant can have expired since);
//   - a new proposal is decided (inline grant, policy refusal) or parked
//     with its expiry timer; the same proposal handed on again changes
//     nothing, and a parked one republishes NEEDS_APPROVAL;
//   - a grant or decline for a parked proposal reads the parked envelope
//     back, then decides it (a not-yet-valid grant leaves it parked); for
//     anything else it is GRANT_UNMATCHED;
//   - the expiry ends a parked proposal APPROVAL_TIMED_OUT, once; fired
//     early (another clock), it is re-armed;
//   - giving up on a proposal or expiry unparks with PROCESSING_FAILED,
//     giving up on a grant leaves the proposal parked.
//
// Every decision is one compare-and-set of the record (Writes.From), so
// that of a grant and the expiry, or two grants, exactly one wins.
func Step(f Facts, r Rules) Decision {
	switch f.Input {
	case FromProposal:
		return stepProposal(f, r)
	case FromTimer:
		return stepTimer(f, r)
	case FromGrant:
		return stepGrant(f, r)
	}
	return Decision{Note: "unknown input", Alarm: true}
}

// decidedHere reports whether this input made the recorded decision.
func (f *Facts) decidedHere() bool { return f.Found && f.Record.DecidedBy == f.ID }

func (f *Facts) parked() bool { return f.Found && f.Record.Parked() }

func stepProposal(f Facts, r Rules) Decision {
	a := f.Record
	switch {
	case f.decidedHere():
		// Decided on arrival; publishing or the ack did not complete.
		return publish(a, recorded(a, grantOf(f.Env)), f.Env)
	case f.GivingUp && f.parked() && a.Seq == f.Seq:
		return end(f, Ruling{Decision: Deny, Code: schema.CodeProcessingFailed})
	case f.GivingUp && f.Found:
		return Decision{} // decided by another input: that decision stands
	case f.GivingUp || f.Env == nil:
		return failed(f)
	case f.Found && a.Seq != f.Seq:
		return Decision{Note: "duplicate hand-off ignored"} // the first one decides
	case f.parked():
		return publish(a, recorded(a, nil), f.Env)
	case f.Found:
		return Decision{} // decided since by a grant or the timer
	}
	env := f.Env
	v := DecideProposal(r.Policy, env, f.Now)
	if v.Decision == Park && f.IntentBound {
		// Done or under way already: the same receipt, from dispatch,
		// with no new approval asked (nothing will be dispatched).
		v = Ruling{Decision: Permit, Evaluations: v.Evaluations, Bound: true}
	}
	a = kv.Approval{
		Host: f.Ref.Host, ProposalID: f.Ref.ProposalID, Fingerprint: env.Grounded.Fingerprint, Referent: env.Grounded.Referent,
		Seq: f.Seq, ArrivedAtMs: f.Now, Evaluations: v.Evaluations,
	}
	w := kv.ApprovalWrites{From: kv.StateNone, Record: &a}
	note := ""
	if v.Decision == Park && f.ParkRefused {
		// The host's own budget is spent: its proposal ends now, rather
		// than wait in a stream every host needs.
		v, note = Ruling{Decision: Deny, Code: schema.CodeApprovalsPendingExceeded, Evaluations: v.Evaluations}, "parking refused: the host's budget of proposals waiting for approval is spent"
	}
	if v.Decision == Park {
		a.State, a.ExpiresAtMs = kv.StateParked, f.Now+r.Policy.ApprovalTTL.Milliseconds()
		t := expiryTimer(r, f.Ref, a.ExpiresAtMs, kv.ApprovalTimerID(f.Ref))
		w.Timer = &t
	} else {
		decide(&a, v, f.ID, f.Now)
	}
	d := publish(a, v, env)
	d.Writes = w
	d.Note = note
	return d
}

func stepTimer(f Facts, r Rules) Decision {
	a := f.Record
	switch {
	case f.decidedHere():
		return publish(a, recorded(a, nil), nil)
	case !f.parked():
		return Decision{} // nothing parked, or a grant decided first
	case f.GivingUp:
		return end(f, Ruling{Decision: Deny, Code: schema.CodeProcessingFailed})
	case f.Now < a.ExpiresAtMs:
		// Fired early by another processor's clock: wait for our own,
		// under a message id the stream has not seen.
		t := expiryTimer(r, f.Ref, a.ExpiresAtMs, kv.ApprovalTimerID(f.Ref)+"/rearmed/"+f.ID)
		return Decision{Writes: kv.ApprovalWrites{From: kv.StateParked, Timer: &t}, Note: "expiry fired early; re-armed"}
	}
	v := TimedOut()
	decide(&a, v, f.ID, f.Now)
	d := publish(a, v, nil)
	// The timer that fired is the scheduler's to delete.
	d.Writes = kv.ApprovalWrites{From: kv.StateParked, Record: &a}
	return d
}

func stepGrant(f Facts, r Rules) Decision {
	a, m := f.Record, f.Message
	replay := f.decidedHere()
	switch {
	case f.GivingUp && !replay:
		// The proposal it names stays parked until another grant or its
		// expiry.
		return event(schema.NewIncident(schema.PhaseAuthorization, schema.CodeProcessingFailed))
	case !replay && !f.parked():
		// Unknown, not parked yet, or decided already.
		d := event(schema.NewIncident(schema.PhaseAuthorization, schema.CodeGrantUnmatched))
		d.Note = "grant matches no parked proposal"
		return d
	case !f.Read:
		return Decision{ReadEnvelope: true}
	case f.ReadFailed:
		return event(schema.NewIncident(schema.PhaseAuthorization, schema.CodeProcessingFailed))
	case replay:
		return publish(a, recorded(a, m.Grant), f.Env)
	}
	var v Ruling
	note := ""
	if f.Env == nil {
		// The stream lost the envelope (purged): end the proposal rather
		// than loop on it.
		v, note = Ruling{Decision: Deny, Code: schema.CodeProcessingFailed}, "parked envelope unavailable; proposal ended"
	} else {
		v = DecideStandalone(r.Policy, *m, f.Env, a.Fingerprint, a.ExpiresAtMs, f.Now)
	}
	if v.Decision == Keep {
		return event(*v.Event)
	}
	decide(&a, v, f.ID, f.Now)
	d := publish(a, v, f.Env)
	d.Writes = kv.ApprovalWrites{From: kv.StateParked, Record: &a, CancelTimer: true}
	d.Note, d.Alarm = note, note != ""
	return d
}

// end decides a parked proposal with v (giving up on it) and cancels its
// expiry.
func end(f Facts, v Ruling) Decision {
	a := f.Record
	decide(&a, v, f.ID, f.Now)
	d := publish(a, v, nil)
	d.Writes = kv.ApprovalWrites{From: kv.StateParked, Record: &a, CancelTimer: true}
	return d
}

// failed ends a proposal the stage could not process and has no record of:
// PROCESSING_FAILED, bound to its fingerprint when the envelope is at hand,
// and recorded as the proposal's decision before it is published, so that
// the same proposal handed on again later (after the stream's duplicate
// window) is not judged afresh against that answer.
func failed(f Facts) Decision {
	ref, env := f.Ref, f.Env
	o := schema.FailureOutcome(ref, schema.NewIncident(schema.PhaseAuthorization, schema.CodeProcessingFailed), f.Now)
	a := kv.Approval{Host: ref.Host, ProposalID: ref.ProposalID, Seq: f.Seq, ArrivedAtMs: f.Now, Evaluations: []schema.PolicyEvaluation{}}
	if env != nil && env.Grounded != nil {
		o.Fingerprint = schema.StringPtr(env.Grounded.Fingerprint)
		o.Referent = schema.StringPtr(env.Grounded.Referent)
		a.Fingerprint, a.Referent = env.Grounded.Fingerprint, env.Grounded.Referent
	}
	decide(&a, Ruling{Decision: Deny, Code: schema.CodeProcessingFailed}, f.ID, f.Now)
	return Decision{Outcome: &o, Writes: kv.ApprovalWrites{From: kv.StateNone, Record: &a}}
}

func event(inc schema.Incident) Decision { return Decision{Events: []schema.Incident{inc}} }

func grantOf(env *schema.Envelope) *schema.Grant {
	if env == nil {
		return nil
	}
	return env.Proposal.Grant
}

func expiryTimer(r Rules, ref schema.ProposalRef, dueMs int64, msgID string) kv.Timer {
	return kv.ExpiryTimer(r.TimerSubject(subjects.ProposalToken(ref.Host, ref.ProposalID)), ref, dueMs, msgID)
}

// decide records verdict v, reached at nowMs by input by, in a.
func decide(a *kv.Approval, v Ruling, by string, nowMs int64) {
	a.State = kv.StateDenied
	if v.Decision == Permit {
		a.State = kv.StatePermitted
	}
	a.DecidedBy, a.DecidedAtMs, a.Evaluations = by, nowMs, v.Evaluations
	a.Bound = v.Bound
	a.Code = ""
	if v.Decision == Deny {
		a.Code = v.Code
	}
}

// recorded is the verdict a record holds, for republishing it. g is the
// grant that was judged (it is not stored in the record: its input has it).
func recorded(a kv.Approval, g *schema.Grant) Ruling {
	switch a.State {
	case kv.StateParked:
		return Ruling{Decision: Park, Code: schema.CodeApprovalRequired, Evaluations: a.Evaluations}
	case kv.StatePermitted:
		if a.Bound {
			return Ruling{Decision: Permit, Evaluations: a.Evaluations, Bound: true}
		}
		return Ruling{Decision: Permit, Evaluations: a.Evaluations, Grant: g}
	}
	return Ruling{Decision: Deny, Code: a.Code, Evaluations: a.Evaluations, Grant: g}
}

// publish is what a recorded verdict publishes: the hand-off to dispatch,
// or the outcome; then the activity snapshot. env is nil when the
// proposal's envelope is not at hand (an expiry, a give-up, a lost
// envelope).
func publish(a kv.Approval, v Ruling, env *schema.Envelope) Decision {
	at := a.DecidedAtMs
	if v.Decision == Park {
		at = a.ArrivedAtMs
	}
	var d Decision
	switch {
	case v.Decision == Permit && env != nil && (v.Grant != nil || v.Bound):
		out := HandOff(env, v, at)
		d.HandOff = &out
	case v.Decision == Permit:
		// Only a replay whose parked envelope vanished from the stream
		// since gets here: the hand-off went out before, and nothing may
		// contradict it.
		return Decision{Note: "cannot republish a permitted hand-off", Alarm: true}
	default:
		var approval *schema.Approval
		if v.Decision == Park && env != nil {
			approval = ApprovalRequest(env, a.ExpiresAtMs)
		}
		o := Outcome(a.Ref(), a.Fingerprint, a.Referent, v, at, approval)
		d.Outcome = &o
	}
	d.Fingerprint = a.Fingerprint
	d.Activity = ActivityEdit(a.Ref(), env, v, at, a.ExpiresAtMs)
	return d
}
