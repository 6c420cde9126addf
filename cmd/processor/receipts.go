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

// cmdReceiptsGet: `processor receipts get <fingerprint|host/proposal_id>`
// prints an intent's receipt history, asked of the running processor.
func cmdReceiptsGet(c *cmdline, args []string, _ io.Reader) int {
	cn, asJSON, pos, code, done := c.operator(args)
	if done {
		return code
	}
	target, code, ok := targetArg(c, pos)
	if !ok {
		return code
	}
	return answer(c, cn, asJSON, func(ctx context.Context, cl *admin.Client) (*admin.Receipts, error) {
		return cl.ReceiptsOf(ctx, target)
	}, writeReceipts)
}

func writeReceipts(w io.Writer, r *admin.Receipts) {
	state := string(r.OutcomeKind)
	if r.Terminal {
		state += " (terminal)"
	}
	if r.Resolution != "" {
		state += ", settled by the " + r.Resolution
		if n := len(r.Receipts); n > 0 && r.Receipts[n-1].Reconciliation != nil && r.Receipts[n-1].Reconciliation.Operator != "" {
			state += " " + r.Receipts[n-1].Reconciliation.Operator
		}
	}
	fmt.Fprintf(w, "fingerprint  %s\nreferent     %s\nproposals    %s\noutcome      %s\n\n",
		r.Fingerprint, r.Referent, schema.JoinRefs(r.Proposals, ", "), state)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tRECEIPT\tSTATUS\tNEXT\tATTEMPT\tERROR_CODE\tRECORDED")
	for i, rc := range r.Receipts {
		attempt := "dispatch"
		if rc.Reconciliation != nil {
			attempt = rc.Reconciliation.AttemptID
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", i+1, rc.ReceiptID, rc.Status, rc.NextAction, attempt, orDash(rc.ErrorCode), formatMs(rc.RecordedAtMs))
	}
	tw.Flush()
	if n := len(r.Receipts); n > 0 {
		last := r.Receipts[n-1]
		fmt.Fprintf(w, "\nlatest: provider_action_id %s, evidence %s%s\n", orDash(last.ProviderActionID), orDash(strings.Join(last.EvidenceRefs, " ")), disclosureNote(last.Disclosure))
	}
}

func disclosureNote(d *schema.DisclosureRecord) string {
	if d == nil {
		return ""
	}
	return fmt.Sprintf(", disclosed %s to %s (assurance %s)", strings.Join(d.FieldClasses, ","), d.Recipient, d.AuthenticationAssurance)
}
