package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/portcullis/portcullis/internal/admin"
)

// cmdApprovalsList: `processor approvals list` prints the proposals parked
// for approval, the soonest to expire first, asked of the running
// processor.
func cmdApprovalsList(c *cmdline, args []string, _ io.Reader) int {
	limit := c.fs.Int("limit", admin.DefaultApprovalsLimit, fmt.Sprintf("list `N` proposals at most (1–%d)", admin.MaxApprovalsLimit))
	cn, asJSON, _, code, done := c.operator(args)
	if done {
		return code
	}
	if *limit < 1 || *limit > admin.MaxApprovalsLimit {
		return c.usageError("--limit must be between 1 and %d", admin.MaxApprovalsLimit)
	}
	return answer(c, cn, asJSON, func(ctx context.Context, cl *admin.Client) (*admin.Approvals, error) {
		return cl.Approvals(ctx, *limit)
	}, writeApprovals)
}

func writeApprovals(w io.Writer, a *admin.Approvals) {
	if a.Total == 0 {
		fmt.Fprintln(w, "no proposals wait for approval")
		return
	}
	noun := "proposals wait"
	if a.Total == 1 {
		noun = "proposal waits"
	}
	shown := ""
	if len(a.Approvals) < a.Total {
		shown = fmt.Sprintf(" (the first %d shown; --limit shows more)", len(a.Approvals))
	}
	fmt.Fprintf(w, "%d %s for approval, the soonest to expire first%s:\n", a.Total, noun, shown)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tPROPOSAL\tFINGERPRINT\tREFERENT\tPROVIDER\tARRIVED\tEXPIRES")
	for _, p := range a.Approvals {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Host, p.ProposalID, p.Fingerprint, orDash(p.Referent), orDash(p.Provider),
			formatMs(p.ArrivedAtMs), expiresIn(p.ExpiresAtMs, a.NowMs))
	}
	tw.Flush()
}

// expiresIn is a deadline and how far it is from now.
func expiresIn(atMs, nowMs int64) string {
	if atMs <= 0 {
		return "-"
	}
	d := time.Duration(atMs-nowMs) * time.Millisecond
	if d <= 0 {
		return formatMs(atMs) + " (due)"
	}
	return formatMs(atMs) + " (in " + age(d) + ")"
}
