package crashtest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// truth is what every proposal's outcomes must agree on under faults
// (issue 19): whatever crashed, paused or lost its server, each proposal's
// outcomes — all of them, read from the outcomes stream — never contradict
// each other or what the provider received.
type truth struct {
	// keys are the proposals' idempotency keys, by proposal id.
	keys map[string]string
	// received counts the dispatches the provider received for a key.
	received func(key string) int
}

// check returns every violation in history (testenv.Env.StoredHistory):
//   - no PROCESSING_FAILED and no FAILED_BEFORE_DISPATCH: an outage,
//     a crash or a pause is never a reason to end a proposal;
//   - at most one terminal kind per proposal (a repeat republishes the
//     same), and nothing non-terminal after it but for a republished
//     RECONCILIATION_REQUIRED that reconciliation settled since;
//   - CONFIRMED exactly when the provider received the intent, once;
//   - every proposal ended.
func (tr truth) check(history map[string][]schema.Outcome) []string {
	var bad []string
	ids := make([]string, 0, len(tr.keys))
	for id := range tr.keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		outs := history[id]
		n := tr.received(tr.keys[id])
		var terminal []schema.Kind
		for _, o := range outs {
			for _, in := range o.Incidents {
				if in.Code == schema.CodeProcessingFailed {
					bad = append(bad, fmt.Sprintf("%s: PROCESSING_FAILED in %s (%s)", id, in.Phase, o.Kind))
				}
			}
			if o.Kind == schema.KindFailedBeforeDispatch {
				bad = append(bad, fmt.Sprintf("%s: FAILED_BEFORE_DISPATCH %v (the provider received it %d times)", id, codes(o), n))
			}
			if o.Terminal && !slices.Contains(terminal, o.Kind) {
				terminal = append(terminal, o.Kind)
			}
		}
		switch {
		case len(terminal) == 0:
			bad = append(bad, fmt.Sprintf("%s: no terminal outcome (%d outcomes)", id, len(outs)))
		case len(terminal) > 1:
			bad = append(bad, fmt.Sprintf("%s: contradicting terminal outcomes %v", id, terminal))
		case terminal[0] == schema.KindConfirmed && n != 1:
			bad = append(bad, fmt.Sprintf("%s: CONFIRMED, but the provider received it %d times", id, n))
		case terminal[0] != schema.KindConfirmed && n != 0:
			bad = append(bad, fmt.Sprintf("%s: %s, but the provider received it %d times", id, terminal[0], n))
		}
	}
	return bad
}

func codes(o schema.Outcome) []string {
	var out []string
	for _, in := range o.Incidents {
		out = append(out, string(in.Phase)+"/"+string(in.Code))
	}
	return out
}

// checkTruth fails t with every violation of tr in env's outcomes.
func checkTruth(t *testing.T, env *testenv.Env, tr truth) {
	t.Helper()
	for _, b := range tr.check(env.StoredHistory(t)) {
		t.Error(b)
	}
}

// The checker itself can fail: planted histories that break each rule.
func TestTruthCheckerFailsOnBadHistories(t *testing.T) {
	confirmed := schema.Outcome{Kind: schema.KindConfirmed, Terminal: true}
	failed := schema.Outcome{Kind: schema.KindIntegrationFailure, Terminal: true,
		Incidents: []schema.Incident{{Phase: schema.PhaseGrounding, Code: schema.CodeProcessingFailed}}}
	fbd := schema.Outcome{Kind: schema.KindFailedBeforeDispatch, Terminal: true}
	pending := schema.Outcome{Kind: schema.KindReconciliationRequired}
	cases := []struct {
		name     string
		outs     []schema.Outcome
		received int
		bad      bool
	}{
		{"confirmed and received once", []schema.Outcome{pending, confirmed}, 1, false},
		{"confirmed twice (a repeat)", []schema.Outcome{confirmed, confirmed}, 1, false},
		{"the lie of issue 19: PROCESSING_FAILED, then CONFIRMED", []schema.Outcome{failed, confirmed}, 1, true},
		{"confirmed, never received", []schema.Outcome{confirmed}, 0, true},
		{"confirmed, received twice", []schema.Outcome{confirmed}, 2, true},
		{"failed before dispatch", []schema.Outcome{fbd}, 0, true},
		{"no end", []schema.Outcome{pending}, 1, true},
		{"nothing at all", nil, 0, true},
		{"denied, yet received", []schema.Outcome{{Kind: schema.KindDenied, Terminal: true}}, 1, true},
	}
	for _, tc := range cases {
		tr := truth{keys: map[string]string{"p": "k"}, received: func(string) int { return tc.received }}
		if got := tr.check(map[string][]schema.Outcome{"p": tc.outs}); (len(got) > 0) != tc.bad {
			t.Errorf("%s: violations %v, want bad=%v", tc.name, got, tc.bad)
		}
	}
}
