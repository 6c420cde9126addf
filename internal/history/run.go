package history

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/subjects"
)

// ReadDuring reads through the operator API, every 200–600ms until stop,
// the receipts of one of keys() (drawn at random) and, every third time,
// the newest page of the activity list; each read goes into the history
// (one that fails — a server down, a processor frozen — is recorded as
// unknown).
func (r *Recorder) ReadDuring(c *admin.Client, keys func() []string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(200*time.Millisecond + rand.N(400*time.Millisecond)):
			}
			if ks := keys(); len(ks) > 0 {
				_, _ = r.ReadReceipts(ctx, c, ks[rand.IntN(len(ks))])
			}
			if n%3 == 2 {
				_, _ = r.ReadActivity(ctx, c, 20)
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { cancel(); wg.Wait() }) }
}

// CheckRun ends a test's recording: it reads the stored outcomes into the
// history, checks it (Check, the visualisation under Dir(t.TempDir())),
// logs its size and the check's time, fails t with every violation and
// returns the history and how many violations it found.
func (r *Recorder) CheckRun(t testing.TB, js jetstream.JetStream, s subjects.Subjects, o Options) (History, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outs, err := ReadOutcomes(ctx, js, s)
	if err != nil {
		t.Fatal(err)
	}
	r.Outcomes(outs)
	h := r.History()
	if o.VisualDir == "" {
		o.VisualDir = Dir(t.TempDir())
	}
	start := time.Now()
	bad, visual := Check(h, o)
	t.Logf("history: %d events %v, checked in %s: %d violations", len(h), h.Counts(), time.Since(start).Round(time.Millisecond), len(bad))
	for _, v := range bad {
		t.Error(v)
	}
	if visual != "" {
		t.Errorf("the operator's reads are not linearizable: porcupine's visualisation is %s", visual)
	}
	return h, len(bad)
}
