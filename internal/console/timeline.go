package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/schema"
)

// An intent's timeline, found by its fingerprint, one of its proposals
// (<host>/<proposal_id>) or one of its receipt ids, in time order: every
// proposal's authorization record and the outcomes still in the outcome
// stream (with the incidents they carry), the intent's receipts (dispatch,
// each reconciliation attempt, an operator's resolution) and the activity
// snapshot's decision and dispatch times. Incident events on
// `<prefix>.incidents.>` name no intent (they are value-free), so the
// timeline shows an intent's incidents as its outcomes carry them.

const (
	// maxTimelineProposals bounds the proposals read for one intent.
	maxTimelineProposals = 20
	// receiptScan is how many of the newest outcomes a receipt id is
	// looked for in: receipts are kept by fingerprint, so a receipt id is
	// found through the outcome that carried it.
	receiptScan = 20_000
	// scanChunk is one batch of a scan.
	scanChunk = 500
)

// Entry kinds, in the order entries of the same millisecond are shown.
const (
	entryApproval = iota
	entryDecision
	entryDispatch
	entryReceipt
	entryOutcome
)

// entry is one line of a timeline.
type entry struct {
	AtMs int64
	// sortMs orders the entry: AtMs, but an outcome never before the
	// receipt it carries (a receipt's time is kept monotonic per intent
	// and may lie a millisecond past its outcome's).
	sortMs int64
	order  int
	// Kind is "approval", "decision", "dispatch", "receipt" or "outcome".
	Kind     string
	Proposal string // host/proposal_id, for approval and outcome entries
	Seq      uint64 // the outcome's stream sequence
	Text     string
	Outcome  *schema.Outcome
	Receipt  *schema.Receipt
	// Operator names the operator of a resolution (receipt or outcome).
	Operator string
}

// timeline is what the timeline page shows.
type timeline struct {
	Query       string
	Fingerprint string
	Receipts    *admin.Receipts
	Activity    *schema.Activity
	Proposals   []schema.ProposalRef
	Entries     []entry
	// Found says how the query was resolved to the fingerprint.
	Found string
	// Truncated: a proposal had more outcomes than the processor returns.
	Truncated bool
	// Oldest: the entries are oldest first (the page's toggle); else
	// newest first.
	Oldest bool
	// Resolve is the latest receipt of an intent whose effect is unknown
	// (still polled, or exhausted: Exhausted): the page offers the resolve
	// form for it, as the queue does.
	Resolve   *schema.Receipt
	Exhausted bool
	// Parked lists the intent's proposals waiting for a grant.
	Parked []string
}

// unsettled finds what the page offers for an intent that is not settled:
// the resolve form for an unknown effect, the approvals page for a parked
// proposal.
func (tl *timeline) unsettled() {
	if rs := tl.Receipts; rs != nil && len(rs.Receipts) > 0 {
		if last := rs.Receipts[len(rs.Receipts)-1]; last.Status == schema.StatusReconciliationRequired {
			tl.Resolve, tl.Exhausted = &last, rs.Terminal
		}
	}
	last := map[string]*schema.Outcome{}
	for _, e := range tl.Entries {
		if e.Kind == "outcome" {
			last[e.Proposal] = e.Outcome // sorted oldest first: the last one stays
		}
	}
	for name, o := range last {
		if o.Kind == schema.KindNeedsApproval && !o.Terminal {
			tl.Parked = append(tl.Parked, name)
		}
	}
	slices.Sort(tl.Parked)
}

// userError is a query the console cannot answer as asked: shown to the
// operator, not logged.
type userError struct{ msg string }

func (e *userError) Error() string { return e.msg }

func userErr(format string, args ...any) error { return &userError{fmt.Sprintf(format, args...)} }

// timeline builds the timeline q names.
func (c *Console) timeline(ctx context.Context, q string) (*timeline, error) {
	q = strings.TrimSpace(q)
	tl := &timeline{Query: q}
	var ref *schema.ProposalRef
	switch {
	case strings.HasPrefix(q, "rcpt_"):
		fp, err := c.findReceipt(ctx, q)
		if err != nil {
			return nil, err
		}
		tl.Fingerprint, tl.Found = fp, "receipt "+q+" is one of this intent's"
	case strings.Contains(q, "/"):
		r, ok := admin.ParseProposalRef(q)
		if !ok {
			return nil, userErr("%q is not <host>/<proposal_id>", q)
		}
		ref = &r
		p, err := c.cfg.Admin.Proposal(ctx, r)
		if err != nil {
			return nil, err
		}
		tl.Fingerprint = p.Fingerprint
		if p.Fingerprint == "" {
			tl.Found = "proposal " + r.String() + " was not grounded to an intent"
			tl.Proposals = []schema.ProposalRef{r}
			tl.addProposal(r, p)
			tl.sort()
			return tl, nil
		}
		tl.Found = "proposal " + r.String() + " was grounded to this intent"
	default:
		fp, ok := admin.NormalizeFingerprint(q)
		if !ok {
			return nil, userErr("give a fingerprint (sha256:<64 hex>), <host>/<proposal_id> or a receipt id (rcpt_…)")
		}
		tl.Fingerprint = fp
	}
	fp := tl.Fingerprint
	rs, err := c.cfg.Admin.Receipts(ctx, fp)
	switch {
	case errors.Is(err, admin.ErrNotFound):
	case err != nil:
		return nil, err
	default:
		tl.Receipts = rs
	}
	if tl.Activity, _, err = c.activity(ctx, fp); err != nil {
		return nil, err
	}
	var refs []schema.ProposalRef
	if ref != nil {
		refs = append(refs, *ref)
	}
	if rs != nil {
		refs = append(refs, rs.Proposals...)
	}
	if tl.Activity != nil {
		refs = append(refs, tl.Activity.Proposals...)
	}
	for _, r := range refs {
		if len(tl.Proposals) < maxTimelineProposals && !slices.Contains(tl.Proposals, r) {
			tl.Proposals = append(tl.Proposals, r)
		}
	}
	if rs == nil && tl.Activity == nil && len(tl.Proposals) == 0 {
		return nil, userErr("nothing is known of %s: no receipt, no activity snapshot", fp)
	}
	for _, r := range tl.Proposals {
		p, err := c.cfg.Admin.Proposal(ctx, r)
		if errors.Is(err, admin.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		tl.addProposal(r, p)
	}
	if rs != nil {
		for i := range rs.Receipts {
			r := &rs.Receipts[i]
			tl.Entries = append(tl.Entries, entry{AtMs: r.RecordedAtMs, order: entryReceipt, Kind: "receipt", Receipt: r, Operator: operatorOf(r)})
		}
	}
	if a := tl.Activity; a != nil {
		// The decision, when no proposal's authorization record tells it.
		if d := a.Decision; d != nil && d.DecidedAtMs > 0 && !slices.ContainsFunc(tl.Entries, func(e entry) bool { return e.Kind == "approval" }) {
			text := "authorization decision: " + d.Outcome
			if d.ReasonCode != "" {
				text += " (" + string(d.ReasonCode) + ")"
			}
			if au := a.Authorization; au != nil && au.Method != "" {
				text += ", grant " + au.Method + "/" + au.Assurance
			}
			tl.Entries = append(tl.Entries, entry{AtMs: d.DecidedAtMs, order: entryDecision, Kind: "decision", Text: text})
		}
		// The in-flight record's time: the dispatch receipt tells the end.
		if d := a.Dispatch; d != nil && d.StartedAtMs > 0 {
			tl.Entries = append(tl.Entries, entry{AtMs: d.StartedAtMs, order: entryDispatch, Kind: "dispatch", Text: "dispatch to " + a.Provider + " started (adapter " + d.Adapter + ")"})
		}
	}
	tl.sort()
	tl.unsettled()
	return tl, nil
}

// addProposal adds a proposal's authorization record and outcomes.
func (tl *timeline) addProposal(r schema.ProposalRef, p *admin.Proposal) {
	name := r.String()
	if a := p.Approval; a != nil {
		tl.Entries = append(tl.Entries, entry{AtMs: a.ArrivedAtMs, order: entryApproval, Kind: "approval", Proposal: name, Text: "reached authorization"})
		if a.DecidedAtMs > 0 {
			text := "authorization " + a.State
			if a.Code != "" {
				text += " (" + string(a.Code) + ")"
			}
			tl.Entries = append(tl.Entries, entry{AtMs: a.DecidedAtMs, order: entryApproval, Kind: "approval", Proposal: name, Text: text})
		}
	}
	tl.Truncated = tl.Truncated || p.Truncated
	for i := range p.Outcomes {
		o := &p.Outcomes[i].Outcome
		o.Host = r.Host // not part of the message body
		e := entry{AtMs: o.AtMs, order: entryOutcome, Kind: "outcome", Proposal: name, Seq: p.Outcomes[i].Seq, Outcome: o}
		if o.Receipt != nil {
			e.Operator = operatorOf(o.Receipt)
			e.sortMs = max(o.AtMs, o.Receipt.RecordedAtMs)
		}
		tl.Entries = append(tl.Entries, e)
	}
}

// sort orders the entries oldest first (order shows them newest first
// unless the page asks otherwise).
func (tl *timeline) sort() {
	for i := range tl.Entries {
		tl.Entries[i].sortMs = max(tl.Entries[i].sortMs, tl.Entries[i].AtMs)
	}
	slices.SortStableFunc(tl.Entries, func(a, b entry) int {
		if a.sortMs != b.sortMs {
			return cmpInt(a.sortMs, b.sortMs)
		}
		if a.order != b.order {
			return a.order - b.order
		}
		return cmpInt(int64(a.Seq), int64(b.Seq))
	})
}

// order shows the entries oldest first, or newest first (the default).
func (tl *timeline) order(oldest bool) {
	tl.Oldest = oldest
	if !oldest {
		slices.Reverse(tl.Entries)
	}
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// operatorOf names the operator of a resolution receipt: its configured
// name, "an unnamed operator" for an unsigned one, "" for a provider's.
func operatorOf(r *schema.Receipt) string {
	if r.ErrorCode != string(schema.CodeOperatorResolved) {
		return ""
	}
	if rc := r.Reconciliation; rc != nil && rc.Operator != "" {
		return rc.Operator
	}
	return "an unnamed operator (unsigned request)"
}

// findReceipt finds the fingerprint of a receipt id in the newest
// receiptScan outcomes (each receipt reaches the intent's proposals in an
// outcome), newest first.
func (c *Console) findReceipt(ctx context.Context, id string) (string, error) {
	if len(id) > 64 || strings.ContainsAny(id, "\" \\") {
		return "", userErr("%q is not a receipt id", id)
	}
	stream := c.subj.OutcomesStream()
	first, last, err := c.seqs(ctx, stream)
	if err != nil {
		return "", err
	}
	needle := []byte(`"` + id + `"`)
	scanned := 0
	for end := last; end >= first && end > 0 && scanned < receiptScan; {
		start := max(first, end-min(end, scanChunk-1))
		msgs, err := c.batch(ctx, stream, batchRequest{Seq: start, Batch: scanChunk})
		if err != nil {
			return "", err
		}
		for i := len(msgs) - 1; i >= 0; i-- {
			m := msgs[i]
			if m.Seq > end || !bytes.Contains(m.Data, needle) {
				continue
			}
			var o schema.Outcome
			if schema.Decode(m.Data, &o) != nil || o.Receipt == nil {
				continue
			}
			if r := o.Receipt; r.ReceiptID == id || (r.Reconciliation != nil && r.Reconciliation.PreviousReceiptID == id) {
				return r.Fingerprint, nil
			}
		}
		scanned += int(end - start + 1)
		if start <= first {
			break
		}
		end = start - 1
	}
	return "", userErr("receipt %s is not in the newest %d outcomes; look its intent up by fingerprint or proposal", id, receiptScan)
}
