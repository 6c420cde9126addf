package sim

import (
	"testing"

	"github.com/portcullis/portcullis/internal/journal"
	"github.com/portcullis/portcullis/internal/journal/journaltest"
)

// TestJournalConformance holds the simulated journal to the contract every
// journal.Store backend passes: what the simulation relies on is what the
// real stores promise.
func TestJournalConformance(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) (journal.Store, func() journal.Store) {
		j := newSharedJournal()
		return j.handle(), func() journal.Store { return j.handle() }
	})
}
