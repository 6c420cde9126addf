package history

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/portcullis/portcullis/schema"
)

// Op is what an Event records.
type Op string

// The events of a history.
const (
	// OpPropose: a client published a proposal (Call before the first
	// try, Return once stored).
	OpPropose Op = "propose"
	// OpGrant: a client published a standalone grant for Proposal.
	OpGrant Op = "grant"
	// OpOutcome: an outcome of Proposal was stored (Return: its stream
	// timestamp; Call: the same).
	OpOutcome Op = "outcome"
	// OpDispatch: the provider received a dispatch request for Key; Effect
	// when it acted on it, Late when it refused it past not_after_ms.
	OpDispatch Op = "dispatch"
	// OpReconcile: the provider received a reconcile request for Key with
	// Attempt.
	OpReconcile Op = "reconcile"
	// OpResolve: an operator settled Key (Present or absent); Err when the
	// call got no answer.
	OpResolve Op = "resolve"
	// OpReadReceipts: an operator read Key's receipts (Receipts: their
	// ids, oldest first); Err when it got no answer.
	OpReadReceipts Op = "read-receipts"
	// OpReadActivity: an operator read Key's activity snapshot (Status:
	// the status it shows).
	OpReadActivity Op = "read-activity"
)

// Event is one thing a client, the provider or the operator saw. It holds
// no payload and no protected value: ids, keys, kinds and codes.
type Event struct {
	Op           Op
	Call, Return time.Time
	// Proposal is the proposal published, granted or answered.
	Proposal schema.ProposalRef
	// Key is the intent's idempotency key (the fingerprint's 64 hex
	// digits) of provider requests, resolutions and reads.
	Key     string
	Attempt string // reconcile attempt id
	Effect  bool   // dispatch: the provider acted
	Late    bool   // dispatch: refused past not_after_ms
	Present bool   // resolve: the effect declared present
	// Outcome is the outcome stored (OpOutcome), and Seq its sequence in
	// the outcomes stream (0: unknown; then Return orders it).
	Outcome *schema.Outcome
	Seq     uint64
	// Receipts are what a receipts read returned: receipt ids, oldest
	// first, and their statuses.
	Receipts []string
	Statuses []schema.Status
	// Status is what an activity read returned.
	Status string
	// Err is set on a resolve or read that failed: what it did is
	// unknown, and the checkers leave it out.
	Err string
}

// Recorder collects the events of a run. It is safe for concurrent use:
// the provider records from its handlers while the test publishes.
type Recorder struct {
	mu     sync.Mutex
	events []Event
	now    func() time.Time
}

// NewRecorder returns an empty recorder reading the wall clock.
func NewRecorder() *Recorder { return &Recorder{now: time.Now} }

// Now is the recorder's clock, for a Call time taken before an action.
func (r *Recorder) Now() time.Time { return r.now() }

// Add records e.
func (r *Recorder) Add(e Event) {
	if e.Return.IsZero() {
		e.Return = e.Call
	}
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Propose records a proposal published between call and now.
func (r *Recorder) Propose(ref schema.ProposalRef, call time.Time) {
	r.Add(Event{Op: OpPropose, Proposal: ref, Call: call, Return: r.now()})
}

// Grant records a standalone grant for ref published between call and now.
func (r *Recorder) Grant(ref schema.ProposalRef, call time.Time) {
	r.Add(Event{Op: OpGrant, Proposal: ref, Call: call, Return: r.now()})
}

// Outcomes records the stored outcomes (ReadOutcomes' events), in place
// of those recorded before: the stream holds them all.
func (r *Recorder) Outcomes(events []Event) {
	r.mu.Lock()
	r.events = slices.DeleteFunc(r.events, func(e Event) bool { return e.Op == OpOutcome })
	r.events = append(r.events, events...)
	r.mu.Unlock()
}

// History returns the events recorded so far, ordered by Call time.
func (r *Recorder) History() History {
	r.mu.Lock()
	h := slices.Clone(r.events)
	r.mu.Unlock()
	slices.SortStableFunc(h, func(a, b Event) int { return a.Call.Compare(b.Call) })
	return h
}

// History is a run's events ordered by Call time.
type History []Event

// Counts are the events of a history by Op, for a test's log.
func (h History) Counts() map[Op]int {
	c := map[Op]int{}
	for _, e := range h {
		c[e.Op]++
	}
	return c
}

// of returns the events of op, in order.
func (h History) of(op Op) []Event {
	var out []Event
	for _, e := range h {
		if e.Op == op {
			out = append(out, e)
		}
	}
	return out
}

// outcomesByProposal groups the outcomes by proposal, each proposal's in
// the order they were stored (by stream sequence where known).
func (h History) outcomesByProposal() (map[schema.ProposalRef][]Event, []schema.ProposalRef) {
	by := map[schema.ProposalRef][]Event{}
	for _, e := range h.of(OpOutcome) {
		by[e.Proposal] = append(by[e.Proposal], e)
	}
	refs := make([]schema.ProposalRef, 0, len(by))
	for ref, es := range by {
		slices.SortStableFunc(es, func(a, b Event) int {
			if a.Seq != 0 && b.Seq != 0 {
				return cmp.Compare(a.Seq, b.Seq) // the stream's own order
			}
			return a.Return.Compare(b.Return)
		})
		refs = append(refs, ref)
	}
	slices.SortFunc(refs, func(a, b schema.ProposalRef) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.ProposalID, b.ProposalID))
	})
	return by, refs
}
