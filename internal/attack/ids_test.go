package attack_test

import (
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/subjects"
)

// TestProposalIDsArePerHost (finding 1): proposal ids were global, so B
// could squat an id A was about to use: A's proposal was then refused or
// answered with B's outcome. Now a proposal is (host, proposal_id): A's
// own squat-1 is its own intent with its own outcome on its own subject,
// and A's retry republishes A's outcome, never B's.
func TestProposalIDsArePerHost(t *testing.T) {
	env := testenv.New(t)
	fake := env.Fakes["demo"]

	b := grantedB(t, "squat-1", 1, time.Now())
	env.PublishSigned(t, b, env.OtherHost)
	fpB := testenv.FingerprintOf(t, b, "sku-1001")
	receiptB := confirmed(t, env.Recorder.Wait(t, refB("squat-1"), testenv.Terminal), fpB)

	a := grantedA(t, "squat-1", 2, time.Now()) // another intent, same id
	env.PublishSigned(t, a, env.Host)
	fpA := testenv.FingerprintOf(t, a, "sku-1001")
	receiptA := confirmed(t, env.Recorder.Wait(t, "squat-1", testenv.Terminal), fpA)
	if fpA == fpB || receiptA == receiptB {
		t.Fatalf("A's squat-1 got B's binding: fingerprint %s receipt %s", fpA, receiptA)
	}
	if n := fake.Dispatches(); n != 2 {
		t.Errorf("provider calls = %d, want 2 (one per intent)", n)
	}
	if nA, nB := fake.DispatchesFor(keyOf(t, a)), fake.DispatchesFor(keyOf(t, b)); nA != 1 || nB != 1 {
		t.Errorf("provider calls per intent: A %d, B %d; want 1 each", nA, nB)
	}

	// A retries its delivery (same body, same delivery id): A's recorded
	// outcome again, as a new message, on A's subject.
	env.PublishSigned(t, a, env.Host)
	outs := env.Recorder.WaitAll(t, "squat-1", testenv.Count(2))
	if got := confirmed(t, outs[1], fpA); got != receiptA || outs[1].AtMs != outs[0].AtMs {
		t.Errorf("A's retry: %+v, want A's recorded outcome %+v", outs[1], outs[0])
	}

	h := settled(t, env)
	if got := env.Subjects.Outcome(hostA, "squat-1"); got != "actions.outcomes.frontdesk.squat-1" {
		t.Fatalf("A's outcome subject is %s", got)
	}
	onA, onB := h.on(env, hostA, "squat-1"), h.on(env, hostB, "squat-1")
	if len(onA) != 2 || len(onB) != 1 {
		t.Fatalf("outcomes: %d on %s, %d on %s; want 2 and 1", len(onA), env.Subjects.Outcome(hostA, "squat-1"), len(onB), env.Subjects.Outcome(hostB, "squat-1"))
	}
	for _, o := range onA {
		confirmed(t, o, fpA)
	}
	confirmed(t, onB[0], fpB)
	if h.total() != 3 {
		t.Errorf("%d outcome messages in all, want 3", h.total())
	}
	h.wantCodes(t, nil)
	if n := fake.Dispatches(); n != 2 {
		t.Errorf("provider calls after A's retry = %d, want 2", n)
	}
}

// TestJunkCannotReplaceARecordedOutcome (finding 2): an unauthenticated
// body naming A's proposal id used to overwrite the proposal's recorded
// last outcome (and get an outcome on A's subject), so that A's retry
// heard junk. Now it gets only the ADMISSION_UNAUTHENTICATED event; and a
// malformed body that A itself signs under its used id gets only
// ADMISSION_PROPOSAL_ID_REUSED: the id's subject belongs to the first
// proposal. (A retry republishes the recorded outcome once per replay
// window: the second is read by direct get.)
func TestJunkCannotReplaceARecordedOutcome(t *testing.T) {
	env := testenv.New(t)
	a := grantedA(t, "lastout-1", 3, time.Now())
	fp := testenv.FingerprintOf(t, a, "sku-1001")
	env.PublishSigned(t, a, env.Host)
	receipt := confirmed(t, env.Recorder.Wait(t, "lastout-1", testenv.Terminal), fp)

	junk := []byte(`{"proposal_id":"lastout-1","schema":5}`)
	env.Publish(t, junk) // unsigned, on A's subject; the processor is not in dev mode
	waitEvents(t, env, unauthenticated, 1)
	h := settled(t, env)
	if outs := h.on(env, hostA, "lastout-1"); len(outs) != 1 {
		t.Fatalf("outcomes on A's subject after the junk: %+v", outs)
	}
	h.wantCodes(t, map[[2]string]int{unauthenticated: 1})
	if !logged(env, "unauthenticated message refused", `"check":"no signature"`) {
		t.Errorf("no log line says which check failed:\n%s", env.Logs.Bytes())
	}

	firstWindow := replayWindow()
	env.PublishSigned(t, a, env.Host) // A's retry of its delivery
	outs := env.Recorder.WaitAll(t, "lastout-1", testenv.Count(2))
	if got := confirmed(t, outs[1], fp); got != receipt {
		t.Errorf("A's retry: receipt %s, want %s", got, receipt)
	}

	// The same junk, signed by A under A's used id.
	env.PublishSigned(t, junk, env.Host)
	waitEvents(t, env, idReused, 1)
	h = settled(t, env)
	if outs := h.on(env, hostA, "lastout-1"); len(outs) != 2 {
		t.Fatalf("outcomes on A's subject after the signed junk: %+v", outs)
	}
	h.wantCodes(t, map[[2]string]int{unauthenticated: 1, idReused: 1})

	// And A's retry is still answered right: inside the replay window its
	// outcome was republished once already, so nothing more is sent, and
	// the last stored outcome, which A reads by direct get, is its own.
	env.PublishSigned(t, a, env.Host)
	h = settled(t, env)
	want := 2 + int(replayWindow()-firstWindow) // a window may have begun between the retries
	if outs := h.on(env, hostA, "lastout-1"); len(outs) != want || len(env.Recorder.Outcomes("lastout-1")) != want {
		t.Fatalf("outcomes on A's subject after A's second retry: %+v, %d live", outs, len(env.Recorder.Outcomes("lastout-1")))
	}
	if o, found := env.StoredOutcome(t, "lastout-1"); !found || confirmed(t, o, fp) != receipt {
		t.Errorf("A's last stored outcome: %+v, want the receipt %s", o, receipt)
	}
	if n := env.Fakes["demo"].Dispatches(); n != 1 {
		t.Errorf("provider calls = %d, want 1", n)
	}
}

// TestResignedProposalIsARepeat (finding 3): the same proposal under a new
// delivery id is a repeat: it republishes the recorded outcome and the
// provider is not called again. The same id with another body is refused
// with the ADMISSION_PROPOSAL_ID_REUSED event and nothing else happens:
// no outcome, no hand-off, no dispatch.
func TestResignedProposalIsARepeat(t *testing.T) {
	env := testenv.New(t)
	a := grantedA(t, "resign-1", 4, time.Now())
	fp := testenv.FingerprintOf(t, a, "sku-1001")
	env.PublishSigned(t, a, env.Host)
	first := env.Recorder.Wait(t, "resign-1", testenv.Terminal)
	receipt := confirmed(t, first, fp)

	again := testenv.Set(grantedA(t, "resign-1", 4, time.Now()), "context.delivery.delivery_id", "delivery:resign-1-again")
	again["grant"] = a["grant"] // the same body but for the delivery id
	env.PublishSigned(t, again, env.Host)
	outs := env.Recorder.WaitAll(t, "resign-1", testenv.Count(2))
	if got := confirmed(t, outs[1], fp); got != receipt || outs[1].AtMs != first.AtMs {
		t.Errorf("re-signed repeat: %+v, want the recorded %+v", outs[1], first)
	}

	other := testenv.Set(grantedA(t, "resign-1", 5, time.Now()), "context.delivery.delivery_id", "delivery:resign-1-other")
	env.PublishSigned(t, other, env.Host)
	waitEvents(t, env, idReused, 1)
	h := settled(t, env)
	if outs := h.on(env, hostA, "resign-1"); len(outs) != 2 {
		t.Errorf("outcomes on resign-1: %+v, want the first and its repeat", outs)
	}
	h.wantCodes(t, map[[2]string]int{idReused: 1})
	if n := env.Fakes["demo"].Dispatches(); n != 1 {
		t.Errorf("provider calls = %d, want 1", n)
	}
	if n := env.Fakes["demo"].DispatchesFor(keyOf(t, other)); n != 0 {
		t.Errorf("the reused id's other intent reached the provider %d times", n)
	}
	for _, stage := range []string{subjects.StageGrounding, subjects.StageAuthorization, subjects.StageDispatch} {
		if ids := testenv.ProposalIDs(env.StageEnvelopes(t, stage, 1)); len(ids) != 1 || ids[0] != "resign-1" {
			t.Errorf("%s received %v, want the first resign-1 only", stage, ids)
		}
	}
}
