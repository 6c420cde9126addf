package journal_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/journal"
	"github.com/portcullis/portcullis/internal/journal/journaltest"
	"github.com/portcullis/portcullis/kv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPebble(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) (journal.Store, func() journal.Store) {
		s, err := kv.Open(t.TempDir(), kv.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return journal.NewPebble(s), func() journal.Store { return journal.NewPebble(s) }
	})
}
