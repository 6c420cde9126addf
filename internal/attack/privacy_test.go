package attack_test

import (
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// TestAttacksLeakNothing (finding 10): values B plants in its attacks —
// tenant, actor, payload, attributes, grant signers, member names of junk —
// appear in no outcome, incident event, log line, metric, activity
// snapshot or Pebble record, whether the attack was refused unread,
// refused after decoding, parked or carried out.
func TestAttacksLeakNothing(t *testing.T) {
	env := testenv.New(t)
	const (
		tenant  = "SECRET-TENANT-a41"
		actor   = "SECRET-ACTOR-b52"
		payload = "SECRET-PAYLOAD-c63"
		attr    = "SECRET-ATTR-d74"
		signer  = "SECRET-SIGNER-e85"
		member  = "SECRET-MEMBER-f96"
	)
	now := time.Now()
	// plant puts B's secrets into a proposal of B's own tenant.
	plant := func(id string, granted bool) map[string]any {
		p := testenv.AsOtherTenant(testenv.Lumber(id))
		testenv.Set(p, "context.actor.actor_ref", actor)
		testenv.Set(p, "intent.payload", map[string]any{"note": payload, "id": id})
		cand := p["grounding"].(map[string]any)["candidates"].([]any)[0].(map[string]any)
		cand["attributes"] = map[string]any{"resource": "Lumber: Cedar-8ft-GradeA", "note": attr}
		if granted {
			testenv.Granted(t, p, "sku-1001", now)
		}
		return p
	}
	dispatched := plant("leak-dispatched", true)
	env.PublishSigned(t, dispatched, env.OtherHost)
	parkedP := plant("leak-parked", false)
	env.PublishSigned(t, parkedP, env.OtherHost)
	env.PublishSigned(t, testenv.Set(plant("leak-tenant", true), "context.tenant.tenant_ref", tenant), env.OtherHost)
	env.PublishSigned(t, testenv.Set(plant("leak-unknown", true), "intent."+member, payload), env.OtherHost)
	env.PublishSigned(t, testenv.Set(plant("leak-scope", true), "grounding.scope", tenant), env.OtherHost) // scope mismatch
	crossBody := testenv.Body(t, plant("leak-cross", true))
	env.PublishWith(t, env.Subjects.Proposal(hostA), crossBody, testenv.Sign(t, env.OtherHost, crossBody))
	env.PublishWith(t, env.Subjects.Proposal(hostB), crossBody, nil) // unsigned
	deep := strings.Replace(string(testenv.Body(t, plant("leak-deep", true))), `"note":"`+payload+`"`,
		`"note":`+strings.Repeat("[", 20_000)+`"`+payload+`"`+strings.Repeat("]", 20_000), 1)
	env.PublishSigned(t, []byte(deep), env.OtherHost)

	// Grants and declines with a planted signer.
	fpParked := testenv.FingerprintOf(t, parkedP, "sku-1001")
	g := standalone("leak-parked", fpParked, now)
	g["authorized_by"] = signer
	gBody := testenv.Body(t, g)
	env.PublishWith(t, env.Subjects.Grant(hostA), gBody, testenv.Sign(t, env.OtherHost, gBody)) // B's key on A's subject
	unmatched := standalone("leak-nothing", fpParked, now)
	unmatched["authorized_by"] = signer
	env.PublishGrant(t, unmatched, env.OtherHost)
	d := decline("leak-nothing", fpParked)
	d["declined_by"] = signer
	env.PublishGrant(t, d, env.OtherHost)

	confirmed(t, env.Recorder.Wait(t, refB("leak-dispatched"), testenv.Terminal), testenv.FingerprintOf(t, dispatched, "sku-1001"))
	parked(t, env, refB("leak-parked"), fpParked, 0)
	checkOutcome(t, env.Recorder.Wait(t, refB("leak-tenant"), testenv.Terminal), schema.KindDenied, tenantNotPermitted)
	checkOutcome(t, env.Recorder.Wait(t, refB("leak-unknown"), testenv.Terminal), schema.KindIntegrationFailure, malformed)
	checkOutcome(t, env.Recorder.Wait(t, refB("leak-scope"), testenv.Terminal), schema.KindDenied, pc(schema.PhaseGrounding, schema.CodeGroundingScopeMismatch))
	checkOutcome(t, env.Recorder.Wait(t, refB("leak-deep"), testenv.Terminal), schema.KindIntegrationFailure, malformed)

	// B's own genuine grant with the planted signer: carried out.
	env.PublishGrant(t, g, env.OtherHost)
	confirmed(t, env.Recorder.Wait(t, refB("leak-parked"), testenv.Terminal), fpParked)

	h := settled(t, env)
	h.wantCodes(t, map[[2]string]int{
		approvalRequired:   1,
		tenantNotPermitted: 1,
		malformed:          2,
		pc(schema.PhaseGrounding, schema.CodeGroundingScopeMismatch): 1,
		unauthenticated: 3,
		grantUnmatched:  2,
	})
	if outs := h.on(env, hostB, "leak-cross"); len(outs) != 0 {
		t.Errorf("an unauthenticated proposal got outcomes: %+v", outs)
	}
	env.AssertNowhere(t, tenant, actor, payload, attr, signer, member)
}
