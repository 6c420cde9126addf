package attack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// t0 is where the manual clocks of these tests start.
var t0 = time.UnixMilli(1_764_424_800_000)

// dispatchWorkers is how many proposals the dispatch stage handles at once
// (internal/engine's dispatch runner): that many blocked provider calls
// make a backlog.
const dispatchWorkers = 16

// standalone is a grant for fp, for proposal id, issued at issued and
// valid for five minutes, as host A would send it on actions.grants.<h>.
func standalone(id, fp string, issued time.Time) map[string]any {
	g := testenv.Grant(fp, issued, nil)
	g["proposal_id"] = id
	return g
}

func decline(id, fp string) map[string]any {
	return map[string]any{"schema": schema.SchemaDecline, "proposal_id": id, "intent_fingerprint": fp, "declined_by": "actor:demo"}
}

// parked waits for a proposal's NEEDS_APPROVAL and checks what it asks;
// expiresAtMs 0: approval.ttl after the outcome.
func parked(t *testing.T, env *testenv.Env, ref, fp string, expiresAtMs int64) {
	t.Helper()
	o := env.Recorder.Wait(t, ref, testenv.Kind(schema.KindNeedsApproval))
	checkOutcome(t, o, schema.KindNeedsApproval, approvalRequired)
	if expiresAtMs == 0 {
		expiresAtMs = o.AtMs + env.Config.Approval.TTL.Milliseconds()
	}
	if o.Approval == nil || o.Approval.Fingerprint != fp || o.Approval.ExpiresAtMs != expiresAtMs || o.Fingerprint == nil || *o.Fingerprint != fp {
		t.Fatalf("%s: parked outcome %+v (approval %+v), want fingerprint %s until %d", ref, o, o.Approval, fp, expiresAtMs)
	}
}

// TestExpiringGrantTrap (finding 5): a denial at dispatch's re-check used
// to bind the fingerprint, so a proposal whose grant expired while
// dispatch was backlogged — or one a hostile tenant sent of the victim's
// intent with a grant about to expire — became the intent's answer for
// ever. Now B cannot produce A's fingerprint at all, and an expired grant
// ends only its own proposal: the same intent with a fresh grant is
// dispatched, once.
func TestExpiringGrantTrap(t *testing.T) {
	clock := stages.NewManualClock(t0)
	env := testenv.New(t, testenv.WithClock(clock))
	fake := env.Fakes["demo"]

	// B tries to poison A's intent: its own copy (another fingerprint)
	// with a grant that has just expired, and A's tenant with A's
	// fingerprint's grant, just as expired.
	victim := intentOf("trap-a", 31)
	fpA := testenv.FingerprintOf(t, victim, "sku-1001")
	bCopy := testenv.AsOtherTenant(intentOf("trap-b", 31))
	fpB := testenv.FingerprintOf(t, bCopy, "sku-1001")
	if fpA == fpB {
		t.Fatal("B's copy of A's intent has A's fingerprint")
	}
	expired := func(fp string) map[string]any { return testenv.Grant(fp, t0.Add(-5*time.Minute), nil) } // expires at t0: expired now
	bCopy["grant"] = expired(fpB)
	bAsA := intentOf("trap-b-as-a", 31)
	bAsA["grant"] = expired(fpA)
	env.PublishSigned(t, bCopy, env.OtherHost)
	env.PublishSigned(t, bAsA, env.OtherHost)
	o := env.Recorder.Wait(t, refB("trap-b"), testenv.Terminal)
	checkOutcome(t, o, schema.KindDenied, pc(schema.PhaseAuthorization, schema.CodeGrantExpired))
	if *o.Fingerprint != fpB {
		t.Errorf("B's denial is bound to %s, want B's own %s", *o.Fingerprint, fpB)
	}
	checkOutcome(t, env.Recorder.Wait(t, refB("trap-b-as-a"), testenv.Terminal), schema.KindDenied, tenantNotPermitted)

	testenv.Granted(t, victim, "sku-1001", clock.Now())
	env.PublishSigned(t, victim, env.Host)
	confirmed(t, env.Recorder.Wait(t, "trap-a", testenv.Terminal), fpA)
	if n := fake.DispatchesFor(keyOf(t, victim)); n != 1 {
		t.Fatalf("A's intent reached the provider %d times, want 1", n)
	}

	// An honest proposal whose grant expires while dispatch is backlogged:
	// every dispatch worker is held by a provider call that does not answer.
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	var entered atomic.Int32
	fake.OnDispatch(func(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
		var p struct {
			Case string `json:"case"`
		}
		_ = json.Unmarshal(req.Payload, &p)
		if p.Case == "blocker" {
			entered.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return schema.AdapterReply{Outcome: "confirmed", ProviderActionID: "inv:" + req.IdempotencyKey[:8]}, nil
	})
	for i := range dispatchWorkers {
		p := testenv.Set(testenv.Lumber(fmt.Sprintf("blocker-%02d", i)), "intent.payload", map[string]any{"quantity": i, "case": "blocker"})
		env.PublishSigned(t, testenv.Granted(t, p, "sku-1001", clock.Now()), env.Host)
	}
	testenv.WaitFor(t, "every dispatch worker blocked in the provider", func() bool { return entered.Load() >= dispatchWorkers })
	honest := grantedA(t, "trap-honest", 32, clock.Now()) // valid for 5 minutes from t0
	fp := testenv.FingerprintOf(t, honest, "sku-1001")
	env.PublishSigned(t, honest, env.Host)
	// Authorized (at t0) and handed to dispatch, where it waits.
	if got := env.StageEnvelopes(t, subjects.StageDispatch, dispatchWorkers+2); got[len(got)-1].Proposal.ProposalID != "trap-honest" {
		t.Fatalf("last dispatch hand-off is %s", got[len(got)-1].Proposal.ProposalID)
	}
	if outs := env.Recorder.Outcomes("trap-honest"); len(outs) != 0 {
		t.Fatalf("trap-honest decided before the backlog cleared: %+v", outs)
	}
	clock.Advance(6 * time.Minute)
	once.Do(func() { close(release) })

	first := env.Recorder.Wait(t, "trap-honest", testenv.Terminal)
	checkOutcome(t, first, schema.KindDenied, pc(schema.PhaseAuthorization, schema.CodeGrantExpired))
	if first.Fingerprint == nil || *first.Fingerprint != fp || first.Receipt != nil {
		t.Fatalf("trap-honest: %+v", first)
	}
	for i := range dispatchWorkers {
		checkOutcome(t, env.Recorder.Wait(t, fmt.Sprintf("blocker-%02d", i), testenv.Terminal), schema.KindConfirmed)
	}

	// A later proposal of the same intent with a fresh grant is judged
	// afresh, and dispatched once.
	again := grantedA(t, "trap-honest-again", 32, clock.Now())
	env.PublishSigned(t, again, env.Host)
	confirmed(t, env.Recorder.Wait(t, "trap-honest-again", testenv.Terminal), fp)
	if n := fake.DispatchesFor(keyOf(t, honest)); n != 1 {
		t.Errorf("the honest intent reached the provider %d times, want 1", n)
	}
	// The expired proposal's own retry keeps its answer.
	env.PublishSigned(t, honest, env.Host)
	outs := env.Recorder.WaitAll(t, "trap-honest", testenv.Count(2))
	if outs[1].Kind != schema.KindDenied || outs[1].AtMs != first.AtMs {
		t.Errorf("trap-honest's retry: %+v, want its recorded denial", outs[1])
	}
	settled(t, env)
	if n := fake.Dispatches(); n != dispatchWorkers+2 {
		t.Errorf("provider calls = %d, want %d (the blockers, trap-a, trap-honest-again)", n, dispatchWorkers+2)
	}
}

// TestGrantsCannotBeWeaponized (finding 7): standalone grants and declines
// that nothing authenticates for the parked proposal's host — another
// host's, unsigned, a bare id, a decline of another intent — used to end
// (or resume) A's parked proposal. Now each gets exactly one incident event
// and the proposal stays parked; A's own genuine messages still decide it,
// with clock skew allowed on issued_at_ms and the grant lifetime bounded.
func TestGrantsCannotBeWeaponized(t *testing.T) {
	clock := stages.NewManualClock(t0)
	env := testenv.New(t, testenv.WithClock(clock))
	ttlEnd := t0.Add(env.Config.Approval.TTL).UnixMilli()

	p := intentOf("park-1", 41)
	fp := testenv.FingerprintOf(t, p, "sku-1001")
	env.PublishSigned(t, p, env.Host)
	parked(t, env, "park-1", fp, ttlEnd)
	pending(t, env, 1)

	bCopy := testenv.AsOtherTenant(intentOf("park-1", 41)) // B's copy of A's intent, under A's id
	fpB := testenv.FingerprintOf(t, bCopy, "sku-1001")
	g := standalone("park-1", fp, clock.Now())
	body := testenv.Body(t, g)
	declined := decline("park-1", fp)
	declinedBody := testenv.Body(t, declined)
	grantOn := func(host string, b []byte, signer func() map[string][]string) func() {
		return func() {
			var hdr map[string][]string
			if signer != nil {
				hdr = signer()
			}
			env.PublishWith(t, env.Subjects.Grant(host), b, hdr)
		}
	}
	attacks := []struct {
		name string
		send func()
		code [2]string
	}{
		{"B's grant on B's subject", func() { env.PublishGrant(t, g, env.OtherHost) }, grantUnmatched},
		{"B's key on A's subject", grantOn(hostA, body, func() map[string][]string { return testenv.Sign(t, env.OtherHost, body) }), unauthenticated},
		{"A's key on B's subject", grantOn(hostB, body, func() map[string][]string { return testenv.Sign(t, env.Host, body) }), unauthenticated},
		{"unsigned grant", func() { env.PublishGrant(t, g, nil) }, unauthenticated},
		{"bare proposal id", grantOn(hostA, []byte(`{"proposal_id":"park-1"}`), nil), unauthenticated},
		{"bare proposal id, B's on B's subject", func() { env.PublishGrant(t, []byte(`{"proposal_id":"park-1"}`), env.OtherHost) }, grantUnmatched},
		{"B's decline on B's subject", func() { env.PublishGrant(t, declined, env.OtherHost) }, grantUnmatched},
		{"B's decline on A's subject", grantOn(hostA, declinedBody, func() map[string][]string { return testenv.Sign(t, env.OtherHost, declinedBody) }), unauthenticated},
		{"unsigned decline", func() { env.PublishGrant(t, declined, nil) }, unauthenticated},
		{"A's decline of B's copy of the intent", func() { env.PublishGrant(t, decline("park-1", fpB), env.Host) }, grantUnmatched},
		{"A's decline of no intent", func() { env.PublishGrant(t, decline("park-1", "sha256:"+strings.Repeat("0", 64)), env.Host) }, grantUnmatched},
	}
	want := map[[2]string]int{approvalRequired: 1}
	for _, a := range attacks {
		a.send()
		want[a.code]++
		waitEvents(t, env, a.code, want[a.code])
	}
	h := settled(t, env)
	if outs := h.on(env, hostA, "park-1"); len(outs) != 1 || outs[0].Kind != schema.KindNeedsApproval {
		t.Fatalf("park-1's outcomes after the attacks: %+v, want only NEEDS_APPROVAL", outs)
	}
	if h.total() != 1 {
		t.Errorf("%d outcome messages, want 1: %v", h.total(), h.outcomes)
	}
	h.wantCodes(t, want)
	pending(t, env, 1)

	// B squats park-1 under its own host and grants it with A's grant:
	// that ends B's proposal, not A's.
	env.PublishSigned(t, bCopy, env.OtherHost)
	parked(t, env, refB("park-1"), fpB, ttlEnd)
	env.PublishGrant(t, g, env.OtherHost)
	o := env.Recorder.Wait(t, refB("park-1"), testenv.Terminal)
	checkOutcome(t, o, schema.KindDenied, pc(schema.PhaseAuthorization, schema.CodeGrantBindingMismatch))
	pending(t, env, 1)
	if n := env.Fakes["demo"].Dispatches(); n != 0 {
		t.Fatalf("provider calls = %d before any genuine grant", n)
	}

	// A's genuine grant, issued 200ms ahead of the processor's clock
	// (inside approval.clock_skew): dispatched.
	env.PublishGrant(t, standalone("park-1", fp, clock.Now().Add(200*time.Millisecond)), env.Host)
	confirmed(t, env.Recorder.Wait(t, "park-1", testenv.Terminal), fp)
	pending(t, env, 0)

	// Issued 31s ahead (clock_skew is 30s): not yet valid, still parked;
	// a valid grant after it is accepted.
	p2 := intentOf("park-2", 42)
	fp2 := testenv.FingerprintOf(t, p2, "sku-1001")
	env.PublishSigned(t, p2, env.Host)
	parked(t, env, "park-2", fp2, ttlEnd)
	env.PublishGrant(t, standalone("park-2", fp2, clock.Now().Add(31*time.Second)), env.Host)
	waitEvents(t, env, notYetValid, 1)
	h = settled(t, env)
	if outs := h.on(env, hostA, "park-2"); len(outs) != 1 || outs[0].Kind != schema.KindNeedsApproval {
		t.Fatalf("park-2's outcomes after a grant from the future: %+v", outs)
	}
	pending(t, env, 1)
	env.PublishGrant(t, standalone("park-2", fp2, clock.Now()), env.Host)
	confirmed(t, env.Recorder.Wait(t, "park-2", testenv.Terminal), fp2)

	// A window longer than approval.max_grant_lifetime (24h): until 2286.
	p3 := intentOf("park-3", 43)
	fp3 := testenv.FingerprintOf(t, p3, "sku-1001")
	env.PublishSigned(t, p3, env.Host)
	parked(t, env, "park-3", fp3, ttlEnd)
	forever := standalone("park-3", fp3, clock.Now())
	forever["expires_at_ms"] = int64(9_999_999_999_999)
	env.PublishGrant(t, forever, env.Host)
	checkOutcome(t, env.Recorder.Wait(t, "park-3", testenv.Terminal), schema.KindDenied, pc(schema.PhaseAuthorization, schema.CodeGrantLifetimeExceeded))

	// A's own decline of the right fingerprint ends it.
	p4 := intentOf("park-4", 44)
	fp4 := testenv.FingerprintOf(t, p4, "sku-1001")
	env.PublishSigned(t, p4, env.Host)
	parked(t, env, "park-4", fp4, ttlEnd)
	env.PublishGrant(t, decline("park-4", fp4), env.Host)
	checkOutcome(t, env.Recorder.Wait(t, "park-4", testenv.Terminal), schema.KindDenied, pc(schema.PhaseAuthorization, schema.CodeApprovalDeclined))

	h = settled(t, env)
	pending(t, env, 0)
	for id, n := range map[string]int{"park-1": 2, "park-2": 2, "park-3": 2, "park-4": 2} {
		if outs := h.on(env, hostA, id); len(outs) != n {
			t.Errorf("%s: %d outcomes, want %d: %+v", id, len(outs), n, outs)
		}
	}
	if n := env.Fakes["demo"].Dispatches(); n != 2 {
		t.Errorf("provider calls = %d, want 2 (park-1, park-2)", n)
	}
}
