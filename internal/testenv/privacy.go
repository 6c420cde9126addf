package testenv

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/common/expfmt"
)

// AssertNowhere fails the test if any secret appears in anything Portcullis
// emitted or stored outside its input streams: outcome and incident
// messages (as received and as stored in their streams), the activity
// bucket, the buckets a cluster shares (journal, approvals, admission
// records, nonces), every Pebble record and file, the processor's logs and its
// metrics. Call it with the processor running.
func (e *Env) AssertNowhere(t testing.TB, secrets ...string) {
	t.Helper()
	places := map[string][][]byte{}
	places["outcome and incident messages"] = e.Recorder.Raw()
	places["logs"] = [][]byte{e.Logs.Bytes()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	streams := []string{e.Subjects.OutcomesStream(), e.Subjects.IncidentsStream(), "KV_" + e.Subjects.ActivityBucket()}
	if e.Config.ReplicatedJournal() {
		streams = append(streams, "KV_"+e.Subjects.JournalBucket(), "KV_"+e.Subjects.ApprovalsBucket(),
			"KV_"+e.Subjects.AdmissionBucket(), "KV_"+e.Subjects.NonceBucket())
	}
	for _, stream := range streams {
		places["stream "+stream] = streamBytes(t, ctx, e.JS, stream)
	}
	if p := e.Processor(); p != nil {
		var recs [][]byte
		if err := p.Store().ForEach(func(k, v []byte) error {
			recs = append(recs, bytes.Clone(k), bytes.Clone(v))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		places["pebble records"] = recs
		mfs, err := p.Metrics().Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		for _, mf := range mfs {
			if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
				t.Fatal(err)
			}
		}
		places["metrics"] = [][]byte{buf.Bytes()}
	}
	places["pebble files"] = dirBytes(t, e.Config.Store.Dir)
	for _, s := range secrets {
		for where, blobs := range places {
			for _, b := range blobs {
				if bytes.Contains(b, []byte(s)) {
					t.Errorf("secret %q found in %s", s, where)
					break
				}
			}
		}
	}
}

func streamBytes(t testing.TB, ctx context.Context, js jetstream.JetStream, name string) [][]byte {
	t.Helper()
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var hdr strings.Builder
		for k, v := range m.Header {
			hdr.WriteString(k + ": " + strings.Join(v, ",") + "\n")
		}
		out = append(out, m.Data, []byte(m.Subject+"\n"+hdr.String()))
	}
	return out
}

func dirBytes(t testing.TB, dir string) [][]byte {
	t.Helper()
	var out [][]byte
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out = append(out, b)
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}
