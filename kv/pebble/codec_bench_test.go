package pebble

import (
	"testing"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"

	"github.com/go-json-experiment/json"
)

// BenchmarkRecordCodec encodes and decodes the records of the hot path in
// their JSON form (as every record was stored before the binary form) and
// in the binary form: a confirmed intent with its receipt (the journal's
// record, written twice and read at least once per dispatch), an
// admission record and a proposal's last outcome.
func BenchmarkRecordCodec(b *testing.B) {
	in := realisticIntent()
	out := schema.NewOutcome(in.Proposals[0], schema.KindConfirmed, in.UpdatedAtMs)
	out.Fingerprint, out.Referent, out.Receipt = &in.Fingerprint, &in.Referent, in.Receipt
	for _, c := range []struct {
		name string
		v    any
		zero func() any
	}{
		{"intent", &in, func() any { return new(kv.Intent) }},
		{"admitted", ptr(realisticAdmitted()), func() any { return new(kv.Admitted) }},
		{"outcome", &out, func() any { return new(schema.Outcome) }},
	} {
		j, err := json.Marshal(c.v, json.Deterministic(true))
		if err != nil {
			b.Fatal(err)
		}
		bin, _ := encodeBinary(c.v)
		b.Run(c.name+"/encode/json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := json.Marshal(c.v, json.Deterministic(true)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(j)), "bytes/record")
		})
		b.Run(c.name+"/encode/binary", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := encodeBinary(c.v); !ok {
					b.Fatal("not a converted kind")
				}
			}
			b.ReportMetric(float64(len(bin)), "bytes/record")
		})
		b.Run(c.name+"/decode/json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := decode(j, c.zero()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/decode/binary", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := decode(bin, c.zero()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkJournalLoad reads a realistic intent back through the journal
// (dispatch step 1 on a known fingerprint, reconciliation, every Commit's
// reload), from a store that wrote it as JSON and from one that wrote it
// binary: the codec's share of a read that finds its record.
func BenchmarkJournalLoad(b *testing.B) {
	for _, form := range []string{"json", "binary"} {
		b.Run(form, func(b *testing.B) {
			s, err := openDB(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			s.jsonRecords = form == "json"
			in := realisticIntent()
			batch := s.NewBatch()
			batch.PutIntent(in.Fingerprint, &in)
			if err := batch.Commit(Sync); err != nil {
				b.Fatal(err)
			}
			j := NewJournal(s)
			b.ReportAllocs()
			for b.Loop() {
				if _, found, err := j.Load(in.Fingerprint); !found || err != nil {
					b.Fatal(found, err)
				}
			}
		})
	}
}
