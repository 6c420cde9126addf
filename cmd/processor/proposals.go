package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/schema"
)

// cmdProposalsGet: `processor proposals get <host> <proposal_id>` (or
// <host>/<proposal_id>) prints a proposal's outcome history, the
// fingerprint it was grounded to, its authorization record and the latest
// receipt, asked of the running processor (which reads the outcome stream).
func cmdProposalsGet(c *cmdline, args []string, _ io.Reader) int {
	cn, asJSON, pos, code, done := c.operator(args)
	if done {
		return code
	}
	var ref schema.ProposalRef
	switch len(pos) {
	case 1:
		r, ok := admin.ParseProposalRef(pos[0])
		if !ok {
			return c.usageError("%q is not <host>/<proposal_id>", pos[0])
		}
		ref = r
	case 2:
		ref = schema.ProposalRef{Host: pos[0], ProposalID: pos[1]}
		if !admin.ValidProposalRef(ref) {
			return c.usageError("%q %q is not a host name and a proposal id", pos[0], pos[1])
		}
	default:
		return c.usageError("give the host and the proposal id")
	}
	return answer(c, cn, asJSON, func(ctx context.Context, cl *admin.Client) (*admin.Proposal, error) { return cl.Proposal(ctx, ref) }, writeProposal)
}

func writeProposal(w io.Writer, p *admin.Proposal) {
	fmt.Fprintf(w, "proposal     %s/%s\nfingerprint  %s\n", p.Host, p.ProposalID, orDash(p.Fingerprint))
	approval := "-"
	if a := p.Approval; a != nil {
		approval = a.State + ", arrived " + formatMs(a.ArrivedAtMs)
		if a.ExpiresAtMs > 0 {
			approval += ", approval expires " + formatMs(a.ExpiresAtMs)
		}
		if a.DecidedAtMs > 0 {
			approval += ", decided " + formatMs(a.DecidedAtMs)
		}
		if a.Code != "" {
			approval += " (" + string(a.Code) + ")"
		}
	}
	fmt.Fprintf(w, "approval     %s\n", approval)
	receipt := "-"
	if r := p.Receipt; r != nil {
		receipt = fmt.Sprintf("%s %s (next %s), provider_action_id %s, evidence %s", r.ReceiptID, r.Status, r.NextAction,
			orDash(r.ProviderActionID), orDash(strings.Join(r.EvidenceRefs, " ")))
	}
	fmt.Fprintf(w, "receipt      %s\n\n", receipt)
	if len(p.Outcomes) == 0 {
		fmt.Fprintln(w, "no outcome in the outcome stream")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tSEQ\tAT\tKIND\tTERMINAL\tEFFECT\tINCIDENTS")
	for i, so := range p.Outcomes {
		o := so.Outcome
		if p.Truncated && i == len(p.Outcomes)-1 {
			fmt.Fprintln(tw, "…\t\t\t(outcomes left out)\t\t\t")
		}
		terminal := "no"
		if o.Terminal {
			terminal = "yes"
		}
		codes := make([]string, 0, len(o.Incidents))
		for _, inc := range o.Incidents {
			codes = append(codes, string(inc.Code))
		}
		n := fmt.Sprint(i + 1)
		if p.Truncated && i == len(p.Outcomes)-1 {
			n = "last"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", n, so.Seq, formatMs(o.AtMs), o.Kind, terminal, o.EffectTruth, orDash(strings.Join(codes, ",")))
	}
	tw.Flush()
}
