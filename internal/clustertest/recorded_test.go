package clustertest

import (
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/history"
	"github.com/portcullis/portcullis/internal/testenv"
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

// readDuring has the operator read receipts and activity until check
// (history.Recorder.ReadDuring), the receipts of intents the provider
// received.
func (p *provider) readDuring(t *testing.T) {
	t.Helper()
	c := p.env.Admin()
	c.Timeout = 5 * time.Second
	stop := recorderOf(p.env).ReadDuring(c, func() []string { return slices.Collect(maps.Keys(p.fake.Delivered())) })
	p.stops = append(p.stops, stop)
	t.Cleanup(stop)
}

// checkHistory stops the operator's reads and checks the run's history
// (history.Recorder.CheckRun); with ended, every proposal published must
// have ended.
func (p *provider) checkHistory(t *testing.T, ended bool) {
	t.Helper()
	for _, stop := range p.stops {
		stop()
	}
	recorderOf(p.env).CheckRun(t, p.env.JS, p.env.Subjects, history.Options{Ended: ended})
}
