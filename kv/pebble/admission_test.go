package pebble_test

import (
	"testing"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/kvtest"
	"github.com/portcullis/portcullis/kv/pebble"
)

func TestAdmissions(t *testing.T) {
	kvtest.RunAdmissions(t, func(t *testing.T) (kv.Admissions, func() kv.Admissions) {
		s := openKV(t, t.TempDir())
		t.Cleanup(func() { s.Close() })
		r := pebble.AdmissionRecords{Store: s}
		return r, func() kv.Admissions { return r }
	})
}
