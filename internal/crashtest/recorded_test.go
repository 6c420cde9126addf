package crashtest

import (
	"maps"
	"slices"
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

// readDuring has the operator read receipts and activity until stop
// (history.Recorder.ReadDuring), the receipts of intents the far side
// received.
func (f *farSide) readDuring(t *testing.T) (stop func()) {
	t.Helper()
	c := f.env.Admin()
	c.Timeout = 5 * time.Second
	return f.rec.ReadDuring(c, func() []string { return slices.Collect(maps.Keys(f.Delivered())) })
}

// check reads the stored outcomes into the history and fails t with every
// violation of the contract's invariants, every proposal published having
// ended (history.Recorder.CheckRun). It returns the history and how many
// violations it found.
func (f *farSide) check(t *testing.T) (history.History, int) {
	t.Helper()
	return f.rec.CheckRun(t, f.env.JS, f.env.Subjects, history.Options{Ended: true})
}
