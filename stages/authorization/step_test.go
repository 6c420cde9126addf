package authorization

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/trust"
	"github.com/portcullis/portcullis/stages/policy"
)

// The inputs of the step tables: the proposal prop-1 (flight) arrived as
// authorization-stream message 7, a second hand-off of it as 8, its
// expiry as 9, a grant as grants-stream message 3.
const (
	idProposal = "AUTH/7"
	idTimer    = "AUTH/9"
	idGrant    = "GRANTS/3"
	ttlMs      = int64(600_000)
	arrived    = now - 60_000 // when prop-1 parked
)

var (
	frontdesk = trust.Host{Name: "frontdesk", Tenants: []string{"tenant:demo"}}
	// moved no longer speaks for the parked proposal's tenant.
	moved     = trust.Host{Name: "moved", Tenants: []string{"tenant:other"}}
	stepRules = Rules{
		Policy: Policy{
			Rules:       policy.Rules{Managed: []policy.ManagedPolicy{seedPolicy}, ClockSkew: 30 * time.Second, MaxGrantLifetime: 24 * time.Hour},
			ApprovalTTL: time.Duration(ttlMs) * time.Millisecond,
			Trust: trust.Policy{
				Hosts:   []trust.Host{frontdesk, moved},
				Tenants: []trust.Tenant{{Ref: "tenant:demo", SecurityDomains: []string{"security-domain:demo"}}},
			},
		},
		TimerSubject: func(token string) string { return "timer." + token },
	}
	prop1   = schema.ProposalRef{Host: "frontdesk", ProposalID: "prop-1"}
	orgPass = schema.PolicyEvaluation{Layer: "managed_policy:org", Outcome: schema.EvalPass}
)

// parkedRecord is prop-1's record while it waits for a grant.
func parkedRecord() kv.Approval {
	return kv.Approval{Host: "frontdesk", ProposalID: "prop-1", Fingerprint: fp, Referent: "offer:off-1", Seq: 7,
		State: kv.StateParked, ArrivedAtMs: arrived, ExpiresAtMs: arrived + ttlMs, Evaluations: []schema.PolicyEvaluation{orgPass}}
}

// decidedRecord is prop-1's record decided by input by.
func decidedRecord(state kv.ApprovalState, code schema.Code, by string, parkedFirst bool) kv.Approval {
	a := parkedRecord()
	if !parkedFirst {
		a.ExpiresAtMs, a.ArrivedAtMs = 0, now-5
	}
	a.State, a.Code, a.DecidedBy, a.DecidedAtMs = state, code, by, now-5
	return a
}

func signedGrant(edit func(g *schema.Grant)) *Standalone {
	g := grant()
	if edit != nil {
		edit(g)
	}
	return &Standalone{Host: frontdesk.Name, Signed: true, ProposalID: "prop-1", Grant: g}
}

func decline(fingerprint string) *Standalone {
	return &Standalone{Host: frontdesk.Name, Signed: true, ProposalID: "prop-1",
		Decline: &schema.Decline{Schema: schema.SchemaDecline, ProposalID: "prop-1", IntentFingerprint: fingerprint, DeclinedBy: "actor:demo"}}
}

// Facts builders: an input about prop-1 at now, then the record it finds.
func proposalIn(env *schema.Envelope) Facts {
	return Facts{Input: FromProposal, Ref: prop1, ID: idProposal, Seq: 7, Now: now, Env: env}
}

func timerIn() Facts { return Facts{Input: FromTimer, Ref: prop1, ID: idTimer, Seq: 9, Now: now} }

func grantIn(m *Standalone) Facts {
	return Facts{Input: FromGrant, Ref: prop1, ID: idGrant, Seq: 3, Now: now, Message: m}
}

func (f Facts) with(a kv.Approval) Facts {
	f.Record, f.Found = a, true
	return f
}

func (f Facts) at(ms int64) Facts {
	f.Now = ms
	return f
}

func (f Facts) givingUp() Facts {
	f.GivingUp = true
	return f
}

// read is f after the parked envelope was read back (env nil: gone).
func (f Facts) read(env *schema.Envelope) Facts {
	f.Read, f.Env = true, env
	return f
}

func (f Facts) readFailed() Facts {
	f.Read, f.ReadFailed = true, true
	return f
}

// stepWant summarizes a decision.
type stepWant struct {
	state    kv.ApprovalState // record written ("" none)
	code     schema.Code      // the written record's code
	timer    string           // "add", "cancel" or ""
	read     bool
	handOff  bool
	kind     schema.Kind // outcome ("" none)
	incident schema.Code // the outcome's incident
	event    schema.Code // the only event ("" none)
	activity bool
	alarm    bool
}

func summarize(d Decision) stepWant {
	w := d.Writes
	got := stepWant{read: d.ReadEnvelope, handOff: d.HandOff != nil, activity: d.Activity != nil, alarm: d.Alarm}
	if w.Record != nil {
		got.state, got.code = w.Record.State, w.Record.Code
	}
	switch {
	case w.Timer != nil:
		got.timer = "add"
	case w.CancelTimer:
		got.timer = "cancel"
	}
	if d.Outcome != nil {
		got.kind = d.Outcome.Kind
		if len(d.Outcome.Incidents) == 1 {
			got.incident = d.Outcome.Incidents[0].Code
		}
	}
	if len(d.Events) == 1 {
		got.event = d.Events[0].Code
	}
	return got
}

// TestStep: every row of the stage's behaviour, one decision each.
func TestStep(t *testing.T) {
	const (
		parked, permitted, denied = kv.StateParked, kv.StatePermitted, kv.StateDenied
		needsApproval, deniedKind = schema.KindNeedsApproval, schema.KindDenied
		integration               = schema.KindIntegrationFailure
		failedCode                = schema.CodeProcessingFailed
	)
	live := flight()
	live.Proposal.Intent.Environment = schema.EnvLive
	rich := flight()
	rich.Proposal.Intent.ExternalSpend.AmountMinor = 50_001
	otherIntent := grant()
	otherIntent.IntentFingerprint = "sha256:" + strings.Repeat("0", 64)
	adversarial := grant()
	adversarial.AuthorizationMethod = schema.MethodAdversarialAuto
	expired := grant()
	expired.IssuedAtMs, expired.ExpiresAtMs = now-10, now
	unsigned := signedGrant(nil)
	unsigned.Signed, unsigned.Host = false, moved.Name // unsigned (development): no tenant check

	cases := []struct {
		name string
		f    Facts
		want stepWant
	}{
		// A grounded proposal, decided as it arrives.
		{"proposal without a grant: parked", proposalIn(flight()),
			stepWant{state: parked, timer: "add", kind: needsApproval, incident: schema.CodeApprovalRequired, activity: true}},
		{"proposal without a grant, its host's parked budget spent: refused at once, recorded", func() Facts {
			f := proposalIn(flight())
			f.ParkRefused = true
			return f
		}(), stepWant{state: denied, code: schema.CodeApprovalsPendingExceeded, kind: deniedKind, incident: schema.CodeApprovalsPendingExceeded, activity: true}},
		{"redelivered after its parking was refused: the same refusal", proposalIn(flight()).with(decidedRecord(denied, schema.CodeApprovalsPendingExceeded, idProposal, false)),
			stepWant{kind: deniedKind, incident: schema.CodeApprovalsPendingExceeded, activity: true}},
		{"inline seed grant, the host's parked budget spent: permitted all the same", func() Facts {
			f := proposalIn(withGrant(grant()))
			f.ParkRefused = true
			return f
		}(), stepWant{state: permitted, handOff: true, activity: true}},
		{"proposal without a grant for an intent dispatched already: answered from it, nobody asked", func() Facts {
			f := proposalIn(flight())
			f.IntentBound = true
			return f
		}(), stepWant{state: permitted, handOff: true, activity: true}},
		{"redelivered after it was answered from its intent: the same hand-off", proposalIn(flight()).with(func() kv.Approval {
			r := decidedRecord(permitted, "", idProposal, false)
			r.Bound = true
			return r
		}()), stepWant{handOff: true, activity: true}},
		{"proposal without a grant, live: denied before asking anyone", proposalIn(live),
			stepWant{state: denied, code: schema.CodeLiveActionsForbidden, kind: deniedKind, incident: schema.CodeLiveActionsForbidden, activity: true}},
		{"proposal without a grant, spend over policy", proposalIn(rich),
			stepWant{state: denied, code: schema.CodeExternalSpendExceedsPolicy, kind: deniedKind, incident: schema.CodeExternalSpendExceedsPolicy, activity: true}},
		{"inline seed grant: permitted", proposalIn(withGrant(grant())),
			stepWant{state: permitted, handOff: true, activity: true}},
		{"inline grant of another intent", proposalIn(withGrant(otherIntent)),
			stepWant{state: denied, code: schema.CodeGrantBindingMismatch, kind: deniedKind, incident: schema.CodeGrantBindingMismatch, activity: true}},
		{"inline adversarial_auto", proposalIn(withGrant(adversarial)),
			stepWant{state: denied, code: schema.CodeAutomaticApprovalForbidden, kind: deniedKind, incident: schema.CodeAutomaticApprovalForbidden, activity: true}},
		{"inline grant expired", proposalIn(withGrant(expired)),
			stepWant{state: denied, code: schema.CodeGrantExpired, kind: deniedKind, incident: schema.CodeGrantExpired, activity: true}},
		// The same proposal again.
		{"redelivered while parked: NEEDS_APPROVAL again", proposalIn(flight()).with(parkedRecord()).at(now + 60_000),
			stepWant{kind: needsApproval, incident: schema.CodeApprovalRequired, activity: true}},
		{"redelivered after its inline permit, the grant expired since: the same hand-off",
			proposalIn(withGrant(grant())).with(decidedRecord(permitted, "", idProposal, false)).at(now + time.Hour.Milliseconds()),
			stepWant{handOff: true, activity: true}},
		{"redelivered after its inline denial", proposalIn(withGrant(expired)).with(decidedRecord(denied, schema.CodeGrantExpired, idProposal, false)),
			stepWant{kind: deniedKind, incident: schema.CodeGrantExpired, activity: true}},
		{"handed on a second time: the first one decides", func() Facts {
			f := proposalIn(flight()).with(parkedRecord())
			f.ID, f.Seq = "AUTH/8", 8
			return f
		}(), stepWant{}},
		{"redelivered after a grant decided", proposalIn(flight()).with(decidedRecord(permitted, "", idGrant, true)), stepWant{}},
		{"redelivered after the expiry", proposalIn(flight()).with(decidedRecord(denied, schema.CodeApprovalTimedOut, idTimer, true)), stepWant{}},
		// Giving up on a proposal.
		{"giving up on a parked proposal: unparked", proposalIn(flight()).with(parkedRecord()).givingUp(),
			stepWant{state: denied, code: failedCode, timer: "cancel", kind: integration, incident: failedCode, activity: true}},
		{"giving up on the proposal that decided: republished", proposalIn(withGrant(grant())).with(decidedRecord(permitted, "", idProposal, false)).givingUp(),
			stepWant{handOff: true, activity: true}},
		{"giving up after a grant decided", proposalIn(flight()).with(decidedRecord(permitted, "", idGrant, true)).givingUp(), stepWant{}},
		{"giving up on a second hand-off of a parked proposal", func() Facts {
			f := proposalIn(flight()).with(parkedRecord()).givingUp()
			f.ID, f.Seq = "AUTH/8", 8
			return f
		}(), stepWant{}},
		// A give-up is recorded as the decision before it is announced: the
		// same proposal handed on again later is not judged afresh.
		{"giving up before anything was recorded", proposalIn(flight()).givingUp(), stepWant{state: kv.StateDenied, code: failedCode, kind: integration, incident: failedCode}},
		{"giving up on an envelope that does not decode", proposalIn(nil).givingUp(), stepWant{state: kv.StateDenied, code: failedCode, kind: integration, incident: failedCode}},
		{"the same proposal handed on after a give-up before authorization changes nothing", proposalIn(flight()).with(func() kv.Approval {
			r := decidedRecord(kv.StateDenied, failedCode, "ACTIONS_STAGE_GROUNDING/4", false)
			r.Seq = 0 // ended by a stage before authorization (kv.EndApproval)
			return r
		}()), stepWant{alarm: false}},
		// The expiry timer.
		{"expiry of nothing", timerIn(), stepWant{}},
		{"expiry fired early (another clock): re-armed", timerIn().with(parkedRecord()).at(arrived + ttlMs - 1), stepWant{timer: "add"}},
		{"expiry: APPROVAL_TIMED_OUT", timerIn().with(parkedRecord()).at(arrived + ttlMs),
			stepWant{state: denied, code: schema.CodeApprovalTimedOut, kind: deniedKind, incident: schema.CodeApprovalTimedOut, activity: true}},
		{"expiry redelivered: the same outcome", timerIn().with(decidedRecord(denied, schema.CodeApprovalTimedOut, idTimer, true)).at(now + 60_000),
			stepWant{kind: deniedKind, incident: schema.CodeApprovalTimedOut, activity: true}},
		{"expiry after a grant decided", timerIn().with(decidedRecord(permitted, "", idGrant, true)).at(arrived + ttlMs), stepWant{}},
		{"expiry of an inline decision (stray timer)", timerIn().with(decidedRecord(permitted, "", idProposal, false)), stepWant{}},
		{"giving up on an expiry: unparked", timerIn().with(parkedRecord()).givingUp(),
			stepWant{state: denied, code: failedCode, timer: "cancel", kind: integration, incident: failedCode, activity: true}},
		{"giving up on the expiry that decided: republished", timerIn().with(decidedRecord(denied, schema.CodeApprovalTimedOut, idTimer, true)).givingUp(),
			stepWant{kind: deniedKind, incident: schema.CodeApprovalTimedOut, activity: true}},
		{"giving up on an expiry after a grant", timerIn().with(decidedRecord(permitted, "", idGrant, true)).givingUp(), stepWant{}},
		// A standalone grant or decline.
		{"grant for nothing parked", grantIn(signedGrant(nil)), stepWant{event: schema.CodeGrantUnmatched}},
		{"grant after another grant decided", grantIn(signedGrant(nil)).with(decidedRecord(permitted, "", "GRANTS/2", true)), stepWant{event: schema.CodeGrantUnmatched}},
		{"grant after the expiry", grantIn(signedGrant(nil)).with(decidedRecord(denied, schema.CodeApprovalTimedOut, idTimer, true)), stepWant{event: schema.CodeGrantUnmatched}},
		{"grant for an inline-decided proposal", grantIn(signedGrant(nil)).with(decidedRecord(permitted, "", idProposal, false)), stepWant{event: schema.CodeGrantUnmatched}},
		{"grant for a parked proposal: read its envelope first", grantIn(signedGrant(nil)).with(parkedRecord()), stepWant{read: true}},
		{"grant: resumed", grantIn(signedGrant(nil)).with(parkedRecord()).read(flight()),
			stepWant{state: permitted, timer: "cancel", handOff: true, activity: true}},
		{"unsigned grant (development): resumed without the tenant check", grantIn(unsigned).with(parkedRecord()).read(flight()),
			stepWant{state: permitted, timer: "cancel", handOff: true, activity: true}},
		{"grant from a host that no longer speaks for the tenant", grantIn(&Standalone{Host: moved.Name, Signed: true, ProposalID: "prop-1", Grant: grant()}).with(parkedRecord()).read(flight()),
			stepWant{event: schema.CodeAdmissionUnauthenticated}},
		{"grant not yet valid: stays parked", grantIn(signedGrant(nil)).with(parkedRecord()).read(flight()).at(now - 31_000),
			stepWant{event: schema.CodeGrantNotYetValid}},
		{"grant issued 30s ahead: resumed", grantIn(signedGrant(nil)).with(parkedRecord()).read(flight()).at(now - 30_000),
			stepWant{state: permitted, timer: "cancel", handOff: true, activity: true}},
		{"grant malformed", grantIn(&Standalone{Host: frontdesk.Name, Signed: true, ProposalID: "prop-1", Malformed: true}).with(parkedRecord()).read(flight()),
			stepWant{state: denied, code: schema.CodeGrantMalformed, timer: "cancel", kind: deniedKind, incident: schema.CodeGrantMalformed, activity: true}},
		{"grant of another intent", grantIn(signedGrant(func(g *schema.Grant) { g.IntentFingerprint = otherIntent.IntentFingerprint })).with(parkedRecord()).read(flight()),
			stepWant{state: denied, code: schema.CodeGrantBindingMismatch, timer: "cancel", kind: deniedKind, incident: schema.CodeGrantBindingMismatch, activity: true}},
		{"grant expired", grantIn(signedGrant(nil)).with(parkedRecord()).read(flight()).at(now + 300_000),
			stepWant{state: denied, code: schema.CodeGrantExpired, timer: "cancel", kind: deniedKind, incident: schema.CodeGrantExpired, activity: true}},
		{"grant after the approval expired, before its timer", grantIn(signedGrant(nil)).with(parkedRecord()).read(flight()).at(arrived + ttlMs),
			stepWant{state: denied, code: schema.CodeApprovalTimedOut, timer: "cancel", kind: deniedKind, incident: schema.CodeApprovalTimedOut, activity: true}},
		{"grant, policy refuses its method", grantIn(signedGrant(func(g *schema.Grant) { g.AuthorizationMethod = schema.MethodPolicy })).with(parkedRecord()).read(flight()),
			stepWant{state: denied, code: schema.CodeAutomaticApprovalForbidden, timer: "cancel", kind: deniedKind, incident: schema.CodeAutomaticApprovalForbidden, activity: true}},
		{"decline", grantIn(decline(fp)).with(parkedRecord()).read(flight()),
			stepWant{state: denied, code: schema.CodeApprovalDeclined, timer: "cancel", kind: deniedKind, incident: schema.CodeApprovalDeclined, activity: true}},
		{"decline of another intent: stays parked", grantIn(decline(otherIntent.IntentFingerprint)).with(parkedRecord()).read(flight()),
			stepWant{event: schema.CodeGrantUnmatched}},
		{"grant whose parked envelope is gone: ended", grantIn(signedGrant(nil)).with(parkedRecord()).read(nil),
			stepWant{state: denied, code: failedCode, timer: "cancel", kind: integration, incident: failedCode, activity: true, alarm: true}},
		{"grant redelivered after it resumed: read again", grantIn(signedGrant(nil)).with(decidedRecord(permitted, "", idGrant, true)), stepWant{read: true}},
		{"grant redelivered an hour later: the same hand-off", grantIn(signedGrant(nil)).with(decidedRecord(permitted, "", idGrant, true)).read(flight()).at(now + time.Hour.Milliseconds()),
			stepWant{handOff: true, activity: true}},
		{"grant redelivered, its envelope gone since: nothing may contradict the hand-off", grantIn(signedGrant(nil)).with(decidedRecord(permitted, "", idGrant, true)).read(nil),
			stepWant{alarm: true}},
		{"decline redelivered", grantIn(decline(fp)).with(decidedRecord(denied, schema.CodeApprovalDeclined, idGrant, true)).read(flight()),
			stepWant{kind: deniedKind, incident: schema.CodeApprovalDeclined, activity: true}},
		// Giving up on a grant.
		{"giving up on a grant: the proposal stays parked", grantIn(signedGrant(nil)).with(parkedRecord()).givingUp(), stepWant{event: failedCode}},
		{"giving up on a grant for nothing", grantIn(signedGrant(nil)).givingUp(), stepWant{event: failedCode}},
		{"giving up on the grant that decided: read", grantIn(signedGrant(nil)).with(decidedRecord(permitted, "", idGrant, true)).givingUp(), stepWant{read: true}},
		{"giving up on the grant that decided: republished", grantIn(signedGrant(nil)).with(decidedRecord(permitted, "", idGrant, true)).givingUp().read(flight()),
			stepWant{handOff: true, activity: true}},
		{"giving up on the grant that decided, the read failing", grantIn(signedGrant(nil)).with(decidedRecord(permitted, "", idGrant, true)).givingUp().readFailed(),
			stepWant{event: failedCode}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Step(tc.f, stepRules)
			if got := summarize(d); got != tc.want {
				t.Fatalf("decision %+v\n     want %+v", got, tc.want)
			}
			checkDecision(t, tc.f, d)
		})
	}
}

// checkDecision asserts what holds for every decision.
func checkDecision(t *testing.T, f Facts, d Decision) {
	t.Helper()
	w := d.Writes
	if d.ReadEnvelope && (!w.Empty() || d.HandOff != nil || d.Outcome != nil || len(d.Events) > 0 || d.Activity != nil || f.Read) {
		t.Errorf("a read with something else to do, or a second read: %+v", d)
	}
	if !w.Empty() {
		from := kv.StateNone
		if f.Found {
			from = f.Record.State
		}
		if w.From != from {
			t.Errorf("writes from %q, the step saw %q", w.From, from)
		}
	}
	if w.Timer != nil && (w.Timer.ID != kv.ApprovalTimerID(f.Ref) || w.Timer.Subject != "timer.frontdesk.prop-1" || string(w.Timer.Data) != "frontdesk.prop-1") {
		t.Errorf("expiry timer %+v", w.Timer)
	}
	if r := w.Record; r != nil {
		// A give-up on an envelope that does not decode records the
		// proposal without the intent it could not read.
		unread := f.Env == nil && f.GivingUp && r.Fingerprint == "" && r.Referent == ""
		if r.Ref() != f.Ref || (!unread && (r.Fingerprint != fp || r.Referent != "offer:off-1")) {
			t.Errorf("record of another proposal or intent: %+v", r)
		}
		switch r.State {
		case kv.StateParked:
			if r.DecidedBy != "" || r.ExpiresAtMs != f.Now+ttlMs || w.Timer == nil || w.Timer.DueMs != r.ExpiresAtMs || w.Timer.MsgID != kv.ApprovalTimerID(f.Ref) || r.Seq != f.Seq {
				t.Errorf("parked record %+v, timer %+v", r, w.Timer)
			}
		default:
			if r.DecidedBy != f.ID || r.DecidedAtMs != f.Now {
				t.Errorf("decision not attributed to its input: %+v", r)
			}
			if f.Found && (w.CancelTimer == (f.Input == FromTimer && !f.GivingUp)) {
				t.Errorf("a decision over a parked record must cancel its timer unless that timer fired: %+v", w)
			}
		}
	}
	if o := d.Outcome; o != nil {
		if o.To() != f.Ref {
			t.Errorf("outcome for %s", o.To())
		}
		if f.Env != nil || f.Found {
			if o.Fingerprint == nil || *o.Fingerprint != fp || o.Referent == nil || *o.Referent != "offer:off-1" {
				t.Errorf("outcome not bound to the intent: %+v", o)
			}
		}
		if (o.Kind == schema.KindNeedsApproval) != (o.Approval != nil) {
			t.Errorf("approval request %+v on a %s outcome", o.Approval, o.Kind)
		}
		if a := o.Approval; a != nil && (a.Fingerprint != fp || a.ExpiresAtMs != arrived+ttlMs && a.ExpiresAtMs != f.Now+ttlMs || a.Summary == "") {
			t.Errorf("approval request %+v", a)
		}
	}
	if h := d.HandOff; h != nil {
		// A hand-off carries the grant of the exact fingerprint, or says the
		// intent is bound (dispatched already) and carries none.
		if a := h.Authorization; a == nil || len(a.Evaluations) == 0 ||
			(a.Bound != (a.Grant.IntentFingerprint == "")) || (!a.Bound && a.Grant.IntentFingerprint != fp) {
			t.Errorf("hand-off authorization %+v", h.Authorization)
		}
		if d.Outcome != nil || len(d.Events) > 0 {
			t.Error("a hand-off with an outcome")
		}
	}
	if d.Activity != nil && d.Fingerprint != fp {
		t.Errorf("activity of %q", d.Fingerprint)
	}
	if d.Alarm && d.Note == "" {
		t.Error("an alarm without a note")
	}
}

// TestStepParkThenDecide walks one proposal through the stage's life as the
// shell would, committing each step's writes into a record: park, an early
// expiry, a grant that is not yet valid, a grant that resumes it; then the
// late inputs change nothing.
func TestStepParkThenDecide(t *testing.T) {
	var rec kv.Approval
	found := false
	apply := func(f Facts) Decision {
		t.Helper()
		f.Record, f.Found = rec, found
		d := Step(f, stepRules)
		if d.ReadEnvelope {
			d = Step(f.read(flight()), stepRules)
		}
		checkDecision(t, f, d)
		if r := d.Writes.Record; r != nil {
			rec, found = *r, true
		}
		return d
	}
	park := apply(proposalIn(flight()).at(arrived))
	if park.Outcome == nil || park.Outcome.Approval.ExpiresAtMs != arrived+ttlMs || !slices.Equal(rec.Evaluations, []schema.PolicyEvaluation{orgPass}) {
		t.Fatalf("park: %+v, record %+v", park.Outcome, rec)
	}
	if d := apply(proposalIn(flight()).at(arrived + 1)); d.Outcome == nil || string(schema.MustMarshal(d.Outcome)) != string(schema.MustMarshal(park.Outcome)) {
		t.Errorf("the redelivered proposal's outcome %+v, want %+v", d.Outcome, park.Outcome)
	}
	if d := apply(timerIn().at(arrived + 10)); d.Writes.Timer == nil || !strings.Contains(d.Writes.Timer.MsgID, "/rearmed/"+idTimer) || rec.State != kv.StateParked {
		t.Errorf("early expiry: %+v", d.Writes)
	}
	future := grantIn(signedGrant(nil)).at(now - 31_000)
	future.ID = "GRANTS/1"
	if d := apply(future); len(d.Events) != 1 || d.Events[0].Code != schema.CodeGrantNotYetValid || rec.State != kv.StateParked {
		t.Errorf("future grant: %+v", d)
	}
	resumed := apply(grantIn(signedGrant(nil)))
	if resumed.HandOff == nil || rec.State != kv.StatePermitted || rec.DecidedBy != idGrant {
		t.Fatalf("grant: %+v, record %+v", resumed, rec)
	}
	if h := resumed.HandOff; h.Authorization.DecidedAtMs != now || !slices.Equal(h.Authorization.Evaluations, []schema.PolicyEvaluation{{Layer: "grant", Outcome: schema.EvalPass}, orgPass}) {
		t.Errorf("hand-off authorization %+v", h.Authorization)
	}
	for _, late := range []Facts{timerIn().at(arrived + ttlMs), proposalIn(flight()), timerIn().at(arrived + ttlMs).givingUp(), proposalIn(flight()).givingUp()} {
		if d := apply(late); !d.Writes.Empty() || d.HandOff != nil || d.Outcome != nil || len(d.Events) != 0 {
			t.Errorf("late %v (giving up %v) decided again: %+v", late.Input, late.GivingUp, d)
		}
	}
	if d := apply(grantIn(signedGrant(nil)).at(now + time.Hour.Milliseconds())); d.HandOff == nil ||
		string(schema.MustMarshal(d.HandOff)) != string(schema.MustMarshal(resumed.HandOff)) {
		t.Error("the redelivered grant did not republish the same hand-off")
	}
	second := grantIn(signedGrant(nil))
	second.ID = "GRANTS/4"
	if d := apply(second); len(d.Events) != 1 || d.Events[0].Code != schema.CodeGrantUnmatched {
		t.Errorf("second grant: %+v", d)
	}
}
