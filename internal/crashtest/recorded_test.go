package crashtest

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/history"
	"github.com/portcullis/portcullis/internal/testenv"
)

// Every crash test records its history (internal/history): the proposals
// and grants it publishes, each request the far side receives, the
// operator's reads, and, once the run is over, every stored outcome; then
// the contract's invariants are checked over the whole of it.

// publish publishes a signed proposal (its proposal_id) and records it.
func (f *farSide) publish(t *testing.T, prop map[string]any) {
	t.Helper()
	call := f.rec.Now()
	f.env.PublishSigned(t, prop, f.env.Host)
	f.rec.Propose(testenv.Ref(prop["proposal_id"].(string)), call)
}

// publishDurably publishes a proposal or a grant as PublishDurably does,
// and records it.
func (f *farSide) publishDurably(t *testing.T, v map[string]any, grant bool, msgID string) {
	t.Helper()
	call := f.rec.Now()
	f.env.PublishDurably(t, v, f.env.Host, grant, msgID)
	if ref := testenv.Ref(v["proposal_id"].(string)); grant {
		f.rec.Grant(ref, call)
	} else {
		f.rec.Propose(ref, call)
	}
}

// readDuring reads, every 300–700ms until stop, the receipts of an intent
// the provider has seen and, every third time, the newest page of the
// activity list, through the operator API; each read goes into the
// history (one that fails — a server down, a processor frozen — is
// recorded as unknown).
func (f *farSide) readDuring(t *testing.T) (stop func()) {
	t.Helper()
	c := f.env.Admin()
	c.Timeout = 5 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(300*time.Millisecond + rand.N(400*time.Millisecond)):
			}
			if keys := f.seen(); len(keys) > 0 {
				_, _ = f.rec.ReadReceipts(ctx, c, keys[rand.IntN(len(keys))])
			}
			if n%3 == 2 {
				_, _ = f.rec.ReadActivity(ctx, c, 20)
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// seen returns the keys the far side has received a dispatch of.
func (f *farSide) seen() []string {
	return slices.Collect(maps.Keys(f.Delivered()))
}

// check reads the stored outcomes into the history and fails t with every
// violation of the contract's invariants, every proposal published having
// ended; it writes porcupine's visualisation on a failure of the
// operator's reads. It returns the history and how many violations it
// found.
func (f *farSide) check(t *testing.T) (history.History, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outs, err := history.ReadOutcomes(ctx, f.env.JS, f.env.Subjects)
	if err != nil {
		t.Fatal(err)
	}
	f.rec.Outcomes(outs)
	h := f.rec.History()
	start := time.Now()
	bad, visual := history.Check(h, history.Options{Ended: true, VisualDir: history.Dir(t.TempDir())})
	t.Logf("history: %d events %v, checked in %s: %d violations", len(h), h.Counts(), time.Since(start).Round(time.Millisecond), len(bad))
	for _, v := range bad {
		t.Error(v)
	}
	if visual != "" {
		t.Errorf("the operator's reads are not linearizable: porcupine's visualisation is %s", visual)
	}
	return h, len(bad)
}
