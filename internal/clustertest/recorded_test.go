package clustertest

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/history"
	"github.com/portcullis/portcullis/testenv"
)

// Every test here that scripts the provider records its history
// (internal/history): the proposals and grants it publishes, each request
// the provider receives, the operator's reads, and, once the run is over,
// every stored outcome; provider.check verifies the contract's invariants
// over the whole of it.

// recorders are the histories, by Env.
var recorders sync.Map // *testenv.Env → *history.Recorder

func recorderOf(env *testenv.Env) *history.Recorder {
	v, _ := recorders.LoadOrStore(env, history.NewRecorder())
	return v.(*history.Recorder)
}

// proposed records a proposal of the default host published since call.
func proposed(env *testenv.Env, id string, call time.Time) {
	recorderOf(env).Propose(testenv.Ref(id), call)
}

// readDuring reads, every 200–500ms until check, the receipts of an
// intent the provider has seen and, every third time, the newest page of
// the activity list, through the operator API (a read that fails is
// recorded as unknown).
func (p *provider) readDuring(t *testing.T) {
	t.Helper()
	c := p.env.Admin()
	c.Timeout = 5 * time.Second
	rec := recorderOf(p.env)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(200*time.Millisecond + rand.N(300*time.Millisecond)):
			}
			if keys := slices.Collect(maps.Keys(p.fake.Delivered())); len(keys) > 0 {
				_, _ = rec.ReadReceipts(ctx, c, keys[rand.IntN(len(keys))])
			}
			if n%3 == 2 {
				_, _ = rec.ReadActivity(ctx, c, 20)
			}
		}
	})
	p.stops = append(p.stops, func() { cancel(); wg.Wait() })
	t.Cleanup(p.stopReads)
}

func (p *provider) stopReads() {
	for _, stop := range p.stops {
		stop()
	}
	p.stops = nil
}

// check stops the operator's reads, reads the stored outcomes into the
// history and fails t with every violation of the contract's invariants
// (with ended, every proposal published must have ended); porcupine's
// visualisation is written on a failure of the operator's reads.
func (p *provider) checkHistory(t *testing.T, ended bool) {
	t.Helper()
	p.stopReads()
	rec := recorderOf(p.env)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	outs, err := history.ReadOutcomes(ctx, p.env.JS, p.env.Subjects)
	if err != nil {
		t.Fatal(err)
	}
	rec.Outcomes(outs)
	h := rec.History()
	start := time.Now()
	bad, visual := history.Check(h, history.Options{Ended: ended, VisualDir: history.Dir(t.TempDir())})
	t.Logf("history: %d events %v, checked in %s: %d violations", len(h), h.Counts(), time.Since(start).Round(time.Millisecond), len(bad))
	for _, v := range bad {
		t.Error(v)
	}
	if visual != "" {
		t.Errorf("the operator's reads are not linearizable: porcupine's visualisation is %s", visual)
	}
}
