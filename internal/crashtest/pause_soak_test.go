package crashtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// pauseLength draws how long pause n lasts: every third well past the
// dispatch lease (8–22s: longer than the lease and the stage's ack wait, so
// that another processor takes the frozen one's work over and declares its
// dispatches interrupted); the others 40% short (0.1–3s), 30% up to the
// lease (3–7s), 30% past it.
func pauseLength(rng *rand.Rand, n int) time.Duration {
	ms := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	switch r := rng.IntN(10); {
	case n%3 == 2:
		return ms(lease+time.Second, lease+15*time.Second)
	case r < 4:
		return ms(100*time.Millisecond, 3*time.Second)
	case r < 7:
		return ms(3*time.Second, lease)
	default:
		return ms(lease+time.Second, lease+15*time.Second)
	}
}

// The pause soak (SPEC §4, §6): three processor binaries on a three-server
// cluster with NATS authentication on, proposals flowing — some needing a
// standalone grant, some whose provider never answers (a timeout that
// reconciliation settles), some a second proposal of an intent; the
// provider takes up to 400ms per dispatch — while
// processors are frozen with SIGSTOP at random moments for random lengths
// (a third or more of them well past the dispatch lease; every fourth disruption
// freezes two processors at once) and thawed with SIGCONT. For every
// proposal: its outcomes agree with what the provider received (each
// idempotency key received at most once; no terminal outcome contradicted
// by another; CONFIRMED if and only if the provider acted), and no pause
// turned into PROCESSING_FAILED or FAILED_BEFORE_DISPATCH. Each
// reconciliation attempt id is queried once. PORTCULLIS_LONG=1: 1,000
// proposals and 40 disruptions; PORTCULLIS_SOAK_SEED picks the schedule.
func TestClusterPauseSoak(t *testing.T) {
	proposals, disruptions := 96, 8
	if long(t) {
		proposals, disruptions = 1000, 40
	}
	seed := uint64(time.Now().UnixNano())
	if s, ok := soakSeed(); ok {
		seed = s
	}
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	t.Logf("pause soak: %d proposals, %d disruptions, seed %d", proposals, disruptions, seed)

	env := testenv.New(t, testenv.Clustered(), testenv.WithAuth(), testenv.NotStarted(), fastReconcile, withSkew(2*time.Second))
	far := serveFarSide(t, env)
	// The provider takes 50–400ms per dispatch (by its key), so that
	// pauses catch processors inside provider calls too.
	far.OnDispatch(func(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
		time.Sleep(time.Duration(50+int(req.IdempotencyKey[0])*int(req.IdempotencyKey[1])%350) * time.Millisecond)
		return soakDispatch(ctx, req)
	})
	nodes := soakNodes(t, env)

	var pauses []time.Duration
	freeze := func(n *node, d time.Duration) {
		n.p.Pause()
		time.Sleep(d) // frozen for d: the disruption itself, nothing is asserted here
		n.p.Resume()
	}
	ids, keys := soakLoad(t, far, proposals, disruptions, func(d int) {
		// Land in the middle of this chunk's work.
		time.Sleep(time.Duration(rng.Int64N(int64(500 * time.Millisecond))))
		frozen := []int{rng.IntN(len(nodes))}
		if d%4 == 3 {
			frozen = append(frozen, (frozen[0]+1+rng.IntN(len(nodes)-1))%len(nodes))
		}
		var wg sync.WaitGroup
		for _, k := range frozen {
			length := pauseLength(rng, len(pauses))
			pauses = append(pauses, length)
			t.Logf("disruption %d: processor %s frozen for %s", d, nodes[k].cfg.Store.Dir, length.Round(10*time.Millisecond))
			wg.Go(func() { freeze(nodes[k], length) })
		}
		wg.Wait()
	})

	// Every proposal ends; then the thawed processors' late work settles.
	for _, id := range ids {
		env.WaitStored(t, id, testenv.IsTerminal, 3*time.Minute)
	}
	env.QuiesceWithin(t, 2*time.Minute)

	// Every outcome of every proposal, not only its last: none contradicts
	// another or what the provider received, and no pause ended one; the
	// operator's reads during the soak are linearizable.
	_, bad := far.checkTruth(t)
	history := env.StoredHistory(t)
	ended := map[string]int{}
	var interrupted, early, staleAfterTerminal int
	for _, id := range ids {
		outs := history[id]
		if len(outs) == 0 {
			continue // reported above
		}
		ended[string(outs[len(outs)-1].Kind)]++
		if outs[len(outs)-1].Kind != schema.KindConfirmed {
			traceIntent(t, nodes, keys[id], id)
		}
		if hasIncident(outs, schema.PhaseDispatch, schema.CodeDispatchInterrupted) {
			interrupted++
		}
		if hasIncident(outs, schema.PhaseReconciliation, schema.CodeProviderIndeterminate) {
			early++ // an absence answered before the fence passed (the far side never says indeterminate)
		}
		if i := slices.IndexFunc(outs, func(o schema.Outcome) bool { return o.Terminal }); i >= 0 &&
			slices.ContainsFunc(outs[i+1:], func(o schema.Outcome) bool { return !o.Terminal }) {
			staleAfterTerminal++
		}
	}
	slices.Sort(pauses)
	past := 0
	for _, p := range pauses {
		if p > lease {
			past++
		}
	}
	t.Logf("pause soak: %d proposals ended %v; %d pauses (%d past the %s lease), lengths min %s median %s max %s; "+
		"%d proposals saw DISPATCH_INTERRUPTED, %d an absence answered before the fence; %d late requests refused; "+
		"%d violations of the truth, %d proposals with a non-terminal outcome after their terminal one",
		len(ids), ended, len(pauses), past, lease, pauses[0].Round(10*time.Millisecond), pauses[len(pauses)/2].Round(10*time.Millisecond),
		pauses[len(pauses)-1].Round(10*time.Millisecond), interrupted, early, far.Late(), bad, staleAfterTerminal)
	for _, n := range nodes {
		n.stop(t)
	}
}

// traceIntent logs what the processors — those running and those killed
// before them — logged about a proposal: lines naming its intent (the
// fingerprint's hex digits) or its id, at most 40, to tell how it ended as
// it did.
func traceIntent(t *testing.T, nodes []*node, key, id string) {
	t.Helper()
	n := 0
	for _, nd := range nodes {
		for i, p := range append(slices.Clone(nd.past), nd.p) {
			for _, l := range strings.Split(string(p.Logs.Bytes()), "\n") {
				if (strings.Contains(l, key) || strings.Contains(l, `"`+id+`"`)) && n < 40 {
					n++
					t.Logf("%s#%d: %.600s", filepath.Base(filepath.Dir(nd.cfg.Store.Dir)), i, l)
				}
			}
		}
	}
}

// soakSeed reads PORTCULLIS_SOAK_SEED, to replay a pause soak's schedule.
func soakSeed() (uint64, bool) {
	var s uint64
	_, err := fmt.Sscan(os.Getenv("PORTCULLIS_SOAK_SEED"), &s)
	return s, err == nil
}
