package main

import (
	"context"

	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/schema"
)

func reconcileUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: processor reconcile list [flags]")
	fmt.Fprintln(w, "       processor reconcile resolve <fingerprint> --present|--absent --evidence REF [flags]")
	fmt.Fprintln(w, "flags: --url URL (default $"+EnvNATSURL+", else "+DefaultAdminURL+") --nkey FILE (default $"+EnvOperatorNkey+") --creds FILE --prefix P --config FILE --timeout D --json")
}

// cmdReconcile: the operator's queue of actions whose effect is unknown,
// and their settlement. Both ask the running processor.
func cmdReconcile(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		reconcileUsage(stderr)
		return 2
	}
	switch args[0] {
	case "list":
		return reconcileList(args[1:], stdout, stderr)
	case "resolve":
		return reconcileResolve(args[1:], stdout, stderr)
	}
	reconcileUsage(stderr)
	return 2
}

func reconcileList(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("reconcile list", stderr)
	var c conn
	c.register(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 0 {
		fmt.Fprintln(stderr, "processor reconcile list: no arguments expected")
		return 2
	}
	if err := c.resolve(fs); err != nil {
		return fail(stderr, "reconcile list", err)
	}
	cl, done, err := c.client()
	if err != nil {
		return fail(stderr, "reconcile list", err)
	}
	defer done()
	l, err := cl.List(context.Background())
	if err != nil {
		return fail(stderr, "reconcile list", err)
	}
	if c.json {
		writeJSON(stdout, l)
		return 0
	}
	writeList(stdout, l)
	return 0
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

func reconcileResolve(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("reconcile resolve", stderr)
	var c conn
	c.register(fs)
	present := fs.Bool("present", false, "the effect happened: record CONFIRMED")
	absent := fs.Bool("absent", false, "the effect did not happen: record REJECTED")
	evidence := fs.String("evidence", "", "where the finding can be checked (a ticket, a provider console reference): one line with ':', at most 512 characters")
	fs.Usage = func() { reconcileUsage(stderr); fs.PrintDefaults() }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	fp, ok := fingerprintArg(stderr, "reconcile resolve", pos)
	if !ok {
		return 2
	}
	if *present == *absent {
		fmt.Fprintln(stderr, "processor reconcile resolve: give exactly one of --present and --absent")
		return 2
	}
	if !schema.ValidEvidenceRef(*evidence) {
		fmt.Fprintln(stderr, "processor reconcile resolve: --evidence must be one line of at most 512 characters containing ':' (e.g. ticket:OPS-1234)")
		return 2
	}
	if err := c.resolve(fs); err != nil {
		return fail(stderr, "reconcile resolve", err)
	}
	cl, done, err := c.client()
	if err != nil {
		return fail(stderr, "reconcile resolve", err)
	}
	defer done()
	r, err := cl.Resolve(context.Background(), fp, *present, *evidence)
	if err != nil {
		return fail(stderr, "reconcile resolve", err)
	}
	if c.json {
		writeJSON(stdout, r)
		return 0
	}
	writeResolved(stdout, r)
	return 0
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
