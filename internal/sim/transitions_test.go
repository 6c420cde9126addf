package sim

import (
	"testing"

	"github.com/portcullis/portcullis/kv/intent/intenttest"
)

// TestIntentTables replays the intent's transition tables
// (kv/intent/testdata): every row through intent.Apply, the transition
// dispatch, reconciliation and the operator's settlement make, checked
// against the row and against the simulation's invariants
// (checkTransition); and every row the stages reach from facts alone
// through the real dispatch.Step, reconciliation.Step or Settle as well, which
// must commit the same record, byte for byte, and tell the same outcomes
// (throughStages). A row the state machine does not give, a transition
// that breaks an invariant, or a stage that does otherwise, fails.
func TestIntentTables(t *testing.T) {
	files, err := intenttest.Files("../../kv/intent/testdata")
	if err != nil {
		t.Fatal(err)
	}
	rows, staged := 0, 0
	for _, file := range files {
		table, err := intenttest.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range table.Rows {
			rows++
			tr, err := table.Run(row)
			if err != nil {
				t.Fatal(err)
			}
			if d := intenttest.Diff(row, intenttest.Render(tr)); d != "" {
				t.Errorf("%s: the state machine does not give the row:%s", row, d)
			}
			for _, v := range checkTransition(tr.Before, tr.After, tr.Event, tr.Effects) {
				t.Errorf("%s: invariant %s", row, v)
			}
			ok, mismatch := throughStages(tr)
			if mismatch != "" {
				t.Errorf("%s: through the stages: %s", row, mismatch)
			}
			if ok {
				staged++
			}
		}
	}
	if rows == 0 {
		t.Fatal("no rows replayed")
	}
	t.Logf("%d rows replayed, %d of them through dispatch.Step, reconciliation.Step or reconciliation.Settle as well", rows, staged)
}
