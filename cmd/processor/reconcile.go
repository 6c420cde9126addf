package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/schema"
)

// cmdReconcileList: the operator's queue of actions whose effect is
// unknown, asked of the running processor.
func cmdReconcileList(c *cmdline, args []string, _ io.Reader) int {
	cn, asJSON, _, code, done := c.operator(args)
	if done {
		return code
	}
	return answer(c, cn, asJSON, func(ctx context.Context, cl *admin.Client) (*admin.List, error) { return cl.List(ctx) }, writeList)
}

func age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return d.Truncate(time.Second).String()
}

func writeList(w io.Writer, l *admin.List) {
	if len(l.Actions) == 0 {
		fmt.Fprintln(w, "no indeterminate actions")
		return
	}
	noun := "actions"
	if len(l.Actions) == 1 {
		noun = "action"
	}
	fmt.Fprintf(w, "%d indeterminate %s, oldest first:\n", len(l.Actions), noun)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FINGERPRINT\tAGE\tPROVIDER\tOPERATION\tENV\tREFERENT\tATTEMPTS\tSTATE\tLAST_CODE\tPROPOSALS")
	for _, a := range l.Actions {
		state := "exhausted"
		if !a.Exhausted {
			state = "polling"
			if a.NextAtMs > 0 {
				state = "next poll in " + age(time.Duration(a.NextAtMs-l.NowMs)*time.Millisecond)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", a.Fingerprint,
			age(time.Duration(l.NowMs-a.SinceMs)*time.Millisecond), a.Provider, a.Operation, a.Environment, a.Referent,
			a.Attempts, a.MaxAttempts, state, orDash(a.ErrorCode), schema.JoinRefs(a.Proposals, ","))
	}
	tw.Flush()
}

// cmdReconcileResolve settles an indeterminate action.
func cmdReconcileResolve(c *cmdline, args []string, _ io.Reader) int {
	present := c.fs.Bool("present", false, "the effect happened: record CONFIRMED")
	absent := c.fs.Bool("absent", false, "the effect did not happen: record REJECTED")
	evidence := c.fs.String("evidence", "", "`REF`: where the finding can be checked (a ticket, a provider console reference): one line with ':', at most 512 characters")
	receipt := c.fs.String("receipt", "", "`ID`: the receipt you examined (reconcile list, receipt): refused if another receipt is the latest by now (a redispatch since)")
	observed := c.fs.String("observed-at", "", "`TIME` you looked at the provider (RFC 3339, Unix ms, or now): an absence seen before the dispatch's request expired is refused")
	cn, asJSON, pos, code, done := c.operator(args)
	if done {
		return code
	}
	target, code, ok := targetArg(c, pos)
	if !ok {
		return code
	}
	if *present == *absent {
		return c.usageError("give exactly one of --present and --absent")
	}
	if !schema.ValidEvidenceRef(*evidence) {
		return c.usageError("--evidence must be one line of at most 512 characters containing ':' (e.g. ticket:OPS-1234)")
	}
	checks := admin.ResolveChecks{ReceiptID: *receipt}
	if *observed != "" {
		at, err := observedAt(*observed, time.Now())
		if err != nil {
			return c.usageError("%v", err)
		}
		checks.ObservedAtMs = at
	}
	return answer(c, cn, asJSON, func(ctx context.Context, cl *admin.Client) (*admin.Resolved, error) {
		return cl.ResolveChecked(ctx, target, *present, *evidence, checks)
	}, writeResolved)
}

// observedAt reads --observed-at: RFC 3339, Unix milliseconds, or "now".
func observedAt(v string, now time.Time) (int64, error) {
	if v == "now" {
		return now.UnixMilli(), nil
	}
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, fmt.Errorf("--observed-at must be RFC 3339 (2026-12-02T01:30:00Z), Unix milliseconds or now")
	}
	return t.UnixMilli(), nil
}

func writeResolved(w io.Writer, r *admin.Resolved) {
	effect := "absent"
	if r.Receipt.Status == schema.StatusConfirmed {
		effect = "present"
	}
	prev, operator := "-", "- (unsigned)"
	if rc := r.Receipt.Reconciliation; rc != nil {
		prev = rc.PreviousReceiptID
		if rc.Operator != "" {
			operator = rc.Operator
		}
	}
	fmt.Fprintf(w, "resolved %s: effect %s → %s\n  receipt    %s (status %s, previous %s)\n  operator   %s\n  evidence   %s\n  outcome to %s\n",
		r.Fingerprint, effect, r.OutcomeKind, r.Receipt.ReceiptID, r.Receipt.Status, prev, operator,
		strings.Join(r.Receipt.EvidenceRefs, " "), schema.JoinRefs(r.Proposals, ", "))
}
