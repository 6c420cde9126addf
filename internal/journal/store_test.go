package journal_test

import (
	"testing"

	"github.com/portcullis/portcullis/kv/pebble"

	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/journal"
	"github.com/portcullis/portcullis/internal/journal/journaltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPebble(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) (journal.Store, func() journal.Store) {
		s, err := pebble.Open(t.TempDir(), pebble.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return journal.NewPebble(s), func() journal.Store { return journal.NewPebble(s) }
	})
}
