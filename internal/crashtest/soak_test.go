package crashtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// errSilent makes the far side send no reply: the processor's call times
// out (ADAPTER_TIMEOUT) although the request arrived.
var errSilent = errors.New("far side: no reply")

// soakProposal is proposal i of the soak: an inventory proposal of its own
// intent, or (every seventh) a second proposal of the intent before it;
// every fifth needs a standalone grant (it has none inline).
func soakProposal(t *testing.T, i int) (id string, body map[string]any, key string, needsGrant bool) {
	t.Helper()
	id = fmt.Sprintf("soak-%04d", i)
	batch := id
	needsGrant = i%5 == 4
	if i%7 == 6 && (i-1)%5 != 4 && !needsGrant {
		batch = fmt.Sprintf("soak-%04d", i-1)
	}
	p := testenv.Lumber(id)
	testenv.Set(p, "intent.provider", "inventory")
	testenv.Set(p, "intent.payload", map[string]any{"quantity": 20, "batch": batch})
	testenv.Set(p, "context.delivery.delivery_id", "delivery:"+id)
	key = strings.TrimPrefix(testenv.FingerprintOf(t, p, "sku-1001"), "sha256:")
	if !needsGrant {
		p = testenv.Granted(t, p, "sku-1001", time.Now())
	}
	return id, p, key, needsGrant
}

// soakDispatch is the far side's answer to a soak dispatch: confirmed,
// except that one key in eight gets no reply (the processor's call times
// out: ADAPTER_TIMEOUT, which reconciliation settles).
func soakDispatch(_ context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
	if req.IdempotencyKey[len(req.IdempotencyKey)-1]%8 == 0 {
		return schema.AdapterReply{}, errSilent
	}
	return schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "inv:" + req.IdempotencyKey[:8]}, nil
}

// grantParked grants each parked soak proposal once its NEEDS_APPROVAL is
// stored, with a standalone grant published durably.
func grantParked(t *testing.T, far *farSide, ids []string) {
	t.Helper()
	for _, id := range ids {
		o := far.env.WaitStored(t, id, testenv.IsKind(schema.KindNeedsApproval), 2*time.Minute)
		g := testenv.Grant(o.Approval.Fingerprint, time.Now(), nil)
		g["proposal_id"] = id
		far.publishDurably(t, g, true, "grant/"+id)
	}
}

// soakNodes starts three processor binaries on env, each with its own
// store directory.
func soakNodes(t *testing.T, env *testenv.Env) []*node {
	t.Helper()
	nodes := []*node{{cfg: env.ProcessorConfig(t, "a")}, {cfg: env.ProcessorConfig(t, "b")}, {cfg: env.ProcessorConfig(t, "c")}}
	for _, n := range nodes {
		n.start(t)
	}
	return nodes
}

// soakLoad sends a soak's proposals (soakProposal) in disruptions+1
// chunks and calls disrupt(d) after chunk d, for d < disruptions; each
// chunk's parked proposals are granted while the next chunk is in flight
// (and the next disruption comes), the last chunk's at the end. It
// returns the proposal ids and their intents' idempotency keys. All the
// while, the operator reads receipts and activity (farSide.readDuring).
func soakLoad(t *testing.T, far *farSide, proposals, disruptions int, disrupt func(d int)) (ids []string, keys map[string]string) {
	t.Helper()
	defer far.readDuring(t)()
	var parked []string
	keys = map[string]string{}
	chunk := proposals / (disruptions + 1)
	for i, d := 0, 0; i < proposals; d++ {
		var needGrants []string
		for end := min(i+chunk, proposals); i < end; i++ {
			id, p, key, needsGrant := soakProposal(t, i)
			far.publishDurably(t, p, false, "proposal/"+id)
			ids = append(ids, id)
			keys[id] = key
			if needsGrant {
				needGrants = append(needGrants, id)
			}
		}
		grantParked(t, far, parked)
		parked = needGrants
		if d < disruptions {
			disrupt(d)
		}
	}
	grantParked(t, far, parked)
	return ids, keys
}

// The crash soak of SPEC §6: three processor binaries on a three-server
// cluster with NATS authentication on, proposals flowing — some needing a
// standalone grant, some whose provider never answers (a timeout that
// reconciliation settles) — while processors are SIGKILLed (half of them
// losing their store directory) and NATS servers are stopped, each brought
// back after. Every proposal ends CONFIRMED with its key received by the
// provider exactly once — no outage ends a proposal (no PROCESSING_FAILED,
// no FAILED_BEFORE_DISPATCH), no outcome contradicts another (every
// outcome of every proposal is checked, not only its last) — no approval
// is lost, no reconciliation attempt is queried twice. PORTCULLIS_LONG=1:
// 1,000 proposals and 24 disruptions.
func TestClusterSoak(t *testing.T) {
	proposals, disruptions := 96, 6
	if long(t) {
		proposals, disruptions = 1000, 24
	}
	env := testenv.New(t, testenv.Clustered(), testenv.WithAuth(), testenv.NotStarted(), fastReconcile)
	far := serveFarSide(t, env)
	far.OnDispatch(soakDispatch)
	nodes := soakNodes(t, env)
	ids, keys := soakLoad(t, far, proposals, disruptions, func(d int) {
		if d%4 == 3 {
			s := (d / 4) % testenv.ClusterSize
			t.Logf("disruption %d: NATS server %d stopped", d, s)
			env.Cluster.Stop(t, s)
			time.Sleep(time.Second)
			env.Cluster.Start(t, s)
			return
		}
		n := nodes[d%len(nodes)]
		lose := d%2 == 0
		t.Logf("disruption %d: processor %s SIGKILLed (store lost: %v)", d, n.cfg.Store.Dir, lose)
		n.p.Kill()
		if !n.p.Wait(30 * time.Second) {
			t.Fatal("processor survived SIGKILL")
		}
		if lose {
			if err := os.RemoveAll(n.cfg.Store.Dir); err != nil {
				t.Fatal(err)
			}
		}
		n.start(t)
	})

	ended := map[schema.Kind]int{}
	deadline := time.Now().Add(2 * time.Minute)
	for _, id := range ids {
		var o schema.Outcome
		testenv.Poll(time.Until(deadline), func() bool {
			var found bool
			o, found = env.StoredOutcome(t, id)
			return found && o.Terminal
		})
		ended[o.Kind]++
		if !o.Terminal {
			t.Errorf("%s: no terminal outcome (last: %s)", id, o.Kind)
		}
		if o.Kind != schema.KindConfirmed {
			// What the processors logged of it, shown if the test fails.
			traceIntent(t, nodes, keys[id], id)
		}
	}
	t.Logf("%d proposals ended: %v", len(ids), ended)
	// Every outcome of every proposal, not only its last: none contradicts
	// another or what the provider received, and no outage ended one; the
	// operator's reads during the soak are linearizable.
	far.checkTruth(t)
	for _, n := range nodes {
		n.stop(t)
	}
}
