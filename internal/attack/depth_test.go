package attack_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// nested is an array nested depth deep ([[…]]).
func nested(depth int) any {
	var v any = []any{}
	for i := 1; i < depth; i++ {
		v = []any{v}
	}
	return v
}

// deepProposal is A's lumber proposal whose payload is an array nested
// depth deep: the whole body then nests depth+2 deep (the proposal and its
// intent are the first two levels), and its payload comes before its
// proposal_id (members are in sorted order).
func deepProposal(t *testing.T, id string, depth int) []byte {
	t.Helper()
	body := string(testenv.Body(t, testenv.Set(intentOf(id, 0), "intent.payload", "DEEP")))
	return []byte(strings.Replace(body, `"DEEP"`, strings.Repeat("[", depth)+strings.Repeat("]", depth), 1))
}

// TestDeepNesting (finding 9): JSON nested deeper than 64 levels used to be
// decoded (and re-encoded, recursively) and could exhaust the stack or be
// retried until PROCESSING_FAILED; and a body nested deeper than the JSON
// decoder's own limit (10,000) had no readable id, so it got no outcome.
// Now any body deeper than 64 is ADMISSION_MALFORMED at once, and gets its
// outcome whenever its id is readable, however deep it nests.
func TestDeepNesting(t *testing.T) {
	env := testenv.New(t)
	// The deepest body allowed: 64 levels in all.
	ok := testenv.Granted(t, testenv.Set(intentOf("deep-64", 0), "intent.payload", nested(62)), "sku-1001", time.Now())
	env.PublishSigned(t, ok, env.Host)
	confirmed(t, env.Recorder.Wait(t, "deep-64", testenv.Terminal), testenv.FingerprintOf(t, ok, "sku-1001"))

	depths := []int{63, 9_998, 9_999, 10_001, 30_000} // payload depth; the body is 2 deeper
	for _, d := range depths {
		env.PublishSigned(t, deepProposal(t, fmt.Sprintf("deep-%d", d), d), env.Host)
	}
	env.Publish(t, deepProposal(t, "deep-unsigned", 20_000))
	for _, d := range depths {
		id := fmt.Sprintf("deep-%d", d)
		o := env.Recorder.Wait(t, id, testenv.Terminal)
		checkOutcome(t, o, schema.KindIntegrationFailure, malformed)
		if o.Fingerprint != nil || o.Receipt != nil {
			t.Errorf("%s: %+v", id, o)
		}
	}
	waitEvents(t, env, unauthenticated, 1)
	h := settled(t, env)
	for _, d := range depths {
		if outs := h.on(env, hostA, fmt.Sprintf("deep-%d", d)); len(outs) != 1 {
			t.Errorf("deep-%d: %d outcomes, want exactly 1", d, len(outs))
		}
	}
	if outs := h.on(env, hostA, "deep-unsigned"); len(outs) != 0 {
		t.Errorf("an unsigned deep body got outcomes: %+v", outs)
	}
	// No retries, no give-up: each was refused on its first delivery.
	h.wantCodes(t, map[[2]string]int{malformed: len(depths), unauthenticated: 1})
	if n := h.count(processingFailed); n != 0 {
		t.Errorf("%d PROCESSING_FAILED events", n)
	}
	m := env.Processor().Metrics()
	for result, want := range map[string]float64{"retry": 0, "gave_up": 0, "outcome": float64(len(depths)), "forwarded": 1, "consumed": 1} {
		if got := testutil.ToFloat64(m.StageMessages.WithLabelValues(subjects.StageAdmission, result)); got != want {
			t.Errorf("actions_stage_messages_total{stage=admission,result=%s} = %v, want %v", result, got, want)
		}
	}
	if n := env.Fakes["demo"].Dispatches(); n != 1 {
		t.Errorf("provider calls = %d, want 1 (deep-64)", n)
	}
}
