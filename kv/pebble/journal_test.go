package pebble_test

import (
	"testing"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/kvtest"

	"github.com/portcullis/portcullis/kv/pebble"
)

func TestJournal(t *testing.T) {
	kvtest.RunJournal(t, func(t *testing.T) (kv.Journal, func() kv.Journal) {
		s, err := pebble.Open(t.TempDir(), pebble.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return pebble.NewJournal(s), func() kv.Journal { return pebble.NewJournal(s) }
	})
}
