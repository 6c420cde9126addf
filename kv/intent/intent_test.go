package intent_test

import (
	"flag"
	"testing"

	"github.com/portcullis/portcullis/kv/intent/intenttest"
)

var rewrite = flag.Bool("rewrite", false, "write what Apply gives into the tables (then read the diff)")

// TestTables runs the transition tables in testdata/: every row's event,
// applied to its before state, gives the row's after state, outcomes,
// incident events and effects.
func TestTables(t *testing.T) {
	files, err := intenttest.Files("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		table, err := intenttest.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		var got []intenttest.Cells
		for _, row := range table.Rows {
			tr, err := table.Run(row)
			if err != nil {
				t.Fatal(err)
			}
			cells := intenttest.Render(tr)
			got = append(got, cells)
			if d := intenttest.Diff(row, cells); d != "" && !*rewrite {
				t.Errorf("%s%s", row, d)
			}
		}
		if *rewrite {
			if err := table.Rewrite(got); err != nil {
				t.Fatal(err)
			}
		}
	}
}
