package pebble

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/portcullis/portcullis/schema"
)

// BenchmarkSyncCommit is one synced journal write per operation, from many
// goroutines at once: concurrent Sync commits share fsyncs (group commit).
func BenchmarkSyncCommit(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var n atomic.Int64
	b.SetParallelism(16)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			fp := "sha256:" + fmt.Sprintf("%064x", i)
			batch := s.NewBatch()
			batch.PutIntent(fp, map[string]any{"fingerprint": fp, "state": "in_flight", "provider": "demo", "referent": strings.Repeat("r", 16)})
			if err := batch.Commit(Sync); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRead is a journal lookup (dispatch step 1).
func BenchmarkRead(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	fp := "sha256:" + strings.Repeat("ab", 32)
	batch := s.NewBatch()
	batch.PutIntent(fp, map[string]any{"fingerprint": fp, "state": "done", "receipt": &schema.Receipt{Fingerprint: fp, Status: "confirmed"}})
	if err := batch.Commit(Sync); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var r map[string]any
		if found, err := s.Intent(fp, &r); !found || err != nil {
			b.Fatal(found, err)
		}
	}
}
