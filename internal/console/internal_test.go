package console

import (
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/schema"
)

// TestSummarize: throughput is the growth of each processor's finished
// messages between two samples, summed; a processor that restarted counts
// from zero, one new since the last sample adds no rate yet; lag is the
// largest any processor read.
func TestSummarize(t *testing.T) {
	at := time.Unix(1000, 0)
	proc := func(id string, ready bool, finished, retry, pending uint64) admin.ProcessorStatus {
		return admin.ProcessorStatus{ID: id, Ready: ready, Stages: []admin.StageStatus{
			{Stage: "admission", Consuming: ready, Forwarded: finished, Retry: retry, Pending: pending, GaveUp: 1},
		}}
	}
	prev := &sample{at: at, st: &admin.Status{Processors: []admin.ProcessorStatus{
		proc("a", true, 100, 0, 5), proc("b", true, 1000, 10, 7),
	}}}
	last := &sample{at: at.Add(2 * time.Second), st: &admin.Status{Processors: []admin.ProcessorStatus{
		proc("a", true, 140, 4, 3),  // +40, +4
		proc("b", false, 20, 0, 9),  // restarted: counts from zero, +21 with its gave_up
		proc("c", true, 5000, 0, 1), // new: no baseline
	}}}
	o := summarize(prev, last)
	if o.Interval != 2*time.Second || o.Ready != 2 || len(o.Stages) != 1 {
		t.Fatalf("overview = %+v", o)
	}
	s := o.Stages[0]
	if !s.HasRate || s.Rate != 30.5 || s.RetryRate != 2 || s.Pending != 9 || s.GaveUp != 3 || s.Consuming != 2 || s.Processors != 3 || o.MaxRate != 30.5 {
		t.Errorf("admission = %+v", s)
	}
	first := summarize(nil, last)
	if first.Interval != 0 || first.Stages[0].HasRate || first.Stages[0].Rate != 0 {
		t.Errorf("one sample = %+v", first.Stages[0])
	}
}

// TestTimelineOrder: entries sort by time, an outcome never before the
// receipt it carries, and at one time approval, decision, dispatch,
// receipt, outcome.
func TestTimelineOrder(t *testing.T) {
	r := &schema.Receipt{ReceiptID: "rcpt_2", RecordedAtMs: 101, ErrorCode: string(schema.CodeOperatorResolved),
		Reconciliation: &schema.ReceiptReconcileRef{Operator: "ops"}}
	tl := &timeline{}
	tl.addProposal(schema.ProposalRef{Host: "h", ProposalID: "p"}, &admin.Proposal{
		Approval: &admin.ApprovalState{State: "permitted", ArrivedAtMs: 10, DecidedAtMs: 10},
		Outcomes: []admin.StoredOutcome{
			{Seq: 2, Outcome: schema.Outcome{ProposalID: "p", Kind: schema.KindRejected, AtMs: 100, Receipt: r}},
			{Seq: 1, Outcome: schema.Outcome{ProposalID: "p", Kind: schema.KindReconciliationRequired, AtMs: 20}},
		},
	})
	tl.Entries = append(tl.Entries, entry{AtMs: 101, order: entryReceipt, Kind: "receipt", Receipt: r, Operator: operatorOf(r)},
		entry{AtMs: 10, order: entryDispatch, Kind: "dispatch"})
	tl.sort()
	var got []string
	for _, e := range tl.Entries {
		got = append(got, e.Kind)
	}
	want := []string{"approval", "approval", "dispatch", "outcome", "receipt", "outcome"}
	if !slices.Equal(got, want) {
		t.Errorf("order %q, want %q", got, want)
	}
	last := tl.Entries[len(tl.Entries)-1]
	if last.Operator != "ops" || last.Outcome.Host != "h" {
		t.Errorf("last = %+v", last)
	}
}

// FuzzParseSearch: any query string gets a bounded query or value-free
// problems, never a panic; what it accepts is from the closed sets.
func FuzzParseSearch(f *testing.F) {
	for _, s := range []string{"", "what=incidents&phase=dispatch&code=ADAPTER_TIMEOUT", "what=outcomes&host=frontdesk&kind=DENIED",
		"from=2025-11-29T00:00&until=2025-11-30T00:00:00&limit=5&after=7", "kind=MAYBE&host=a.b&limit=0", "from=x&until=2025-11-29T00:00:00Z",
		"what=%00&code=%ff", "limit=99999999999999999999&after=-1"} {
		f.Add(s)
	}
	now := time.Unix(1_764_424_800, 0)
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, problems := parseSearch(v, now)
		for _, p := range problems {
			for _, vals := range v {
				for _, val := range vals {
					if len(val) > 8 && strings.Contains(p, val) {
						t.Fatalf("a problem repeats the input: %q", p)
					}
				}
			}
		}
		if len(problems) > 0 {
			return
		}
		if q.What != searchOutcomes && q.What != searchIncidents || q.Limit < 1 || q.Limit > maxSearchLimit || !q.From.Before(q.Until) {
			t.Fatalf("accepted %+v", q)
		}
		if q.Kind != "" && !slices.Contains(schema.Kinds(), q.Kind) || q.Phase != "" && !slices.Contains(schema.Phases(), q.Phase) {
			t.Fatalf("accepted %+v", q)
		}
		if _, p := parseSearch(q.values(), now); len(p) > 0 {
			t.Fatalf("its own continue link does not parse: %v", p)
		}
	})
}
