package sim

import (
	"testing"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/kvtest"
)

// TestJournalConformance holds the simulated journal to the contract every
// kv.Journal backend passes: what the simulation relies on is what the
// real stores promise.
func TestJournalConformance(t *testing.T) {
	kvtest.RunJournal(t, func(t *testing.T) (kv.Journal, func() kv.Journal) {
		j := newSharedJournal()
		return j.handle(), func() kv.Journal { return j.handle() }
	})
}
