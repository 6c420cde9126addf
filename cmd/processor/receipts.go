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

// cmdReceipts: `processor receipts get <fingerprint>` prints a fingerprint's
// receipt history, asked of the running processor.
func cmdReceipts(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "get" {
		fmt.Fprintln(stderr, "usage: processor receipts get <fingerprint> [--url URL] [--nkey FILE] [--creds FILE] [--prefix P] [--config FILE] [--json]")
		return 2
	}
	fs := newFlags("receipts get", stderr)
	var c conn
	c.register(fs)
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return 2
	}
	fp, ok := fingerprintArg(stderr, "receipts get", pos)
	if !ok {
		return 2
	}
	if err := c.resolve(fs); err != nil {
		return fail(stderr, "receipts get", err)
	}
	cl, done, err := c.client()
	if err != nil {
		return fail(stderr, "receipts get", err)
	}
	defer done()
	r, err := cl.Receipts(context.Background(), fp)
	if err != nil {
		return fail(stderr, "receipts get", err)
	}
	if c.json {
		writeJSON(stdout, r)
		return 0
	}
	writeReceipts(stdout, r)
	return 0
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
