package main

import (
	"bytes"
	"context"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/schema"
)

// cmdActivityGet: `processor activity get <fingerprint|host/proposal_id>`
// prints an intent's value-free activity snapshot, read straight from the
// KV bucket `<prefix>_activity` (no processor needed for a fingerprint,
// only its NATS server). It logs in like the other operator commands; a
// proposal is first looked up by the running processor (a signed request).
// The snapshot is JSON whatever -o says.
func cmdActivityGet(c *cmdline, args []string, _ io.Reader) int {
	cn, _, pos, code, done := c.operator(args)
	if done {
		return code
	}
	target, code, ok := targetArg(c, pos)
	if !ok {
		return code
	}
	if err := cn.resolve(c.fs); err != nil {
		return c.fail(err)
	}
	sess, err := cn.open()
	if err != nil {
		return c.fail(err)
	}
	defer sess.close()
	ctx, cancel := context.WithTimeout(sess.ctx, cn.timeout)
	defer cancel()
	fp := target.Fingerprint
	if target.Proposal != nil {
		cl := &admin.Client{NC: sess.nc, Subjects: sess.subj, Timeout: cn.timeout, Key: sess.key, Now: operatorNow}
		p, err := cl.Proposal(ctx, *target.Proposal)
		if err != nil {
			return c.fail(err)
		}
		if p.Fingerprint == "" {
			return c.fail(fmt.Errorf("%s has no fingerprint: it ended before grounding bound it (see processor proposals get %s)", target, target))
		}
		fp = p.Fingerprint
	}
	// Stream info of the bucket's stream and a direct get: all an
	// operator may ask of JetStream (SPEC §2.8). No consumer is created.
	js, err := jetstream.New(sess.nc)
	if err != nil {
		return c.fail(err)
	}
	subj := sess.subj
	bucket, err := js.KeyValue(ctx, subj.ActivityBucket())
	if err != nil {
		return c.fail(fmt.Errorf("bucket %s: %w", subj.ActivityBucket(), refusedBy(sess.ctx, err)))
	}
	e, err := bucket.Get(ctx, schema.FingerprintKey(fp))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return c.fail(fmt.Errorf("no activity for %s", fp))
	}
	if err != nil {
		return c.fail(refusedBy(sess.ctx, err))
	}
	var out bytes.Buffer
	if err := stdjson.Indent(&out, e.Value(), "", "  "); err != nil {
		return c.fail(fmt.Errorf("the snapshot is not JSON: %w", err))
	}
	out.WriteByte('\n')
	_, _ = c.stdout.Write(out.Bytes())
	return 0
}

// cmdActivityList: `processor activity list` prints intents, the most
// recently changed first, a page at a time, asked of the running
// processor (operators create no consumers, so it lists the bucket).
func cmdActivityList(c *cmdline, args []string, _ io.Reader) int {
	limit := c.fs.Int("limit", admin.DefaultActivityLimit, fmt.Sprintf("`N` intents per page (1–%d)", admin.MaxActivityLimit))
	before := c.fs.Uint64("before", 0, "start below revision `REV`: the next page's value printed at the end of the previous one")
	cn, asJSON, _, code, done := c.operator(args)
	if done {
		return code
	}
	if *limit < 1 || *limit > admin.MaxActivityLimit {
		return c.usageError("--limit must be between 1 and %d", admin.MaxActivityLimit)
	}
	return answer(c, cn, asJSON, func(ctx context.Context, cl *admin.Client) (*admin.ActivityList, error) {
		return cl.Activity(ctx, *limit, *before)
	}, func(w io.Writer, l *admin.ActivityList) { writeActivityList(w, l, *limit) })
}

func writeActivityList(w io.Writer, l *admin.ActivityList, limit int) {
	if len(l.Entries) == 0 {
		fmt.Fprintln(w, "no activity")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "FINGERPRINT\tUPDATED\tSTATUS\tPROVIDER\tOPERATION\tENV\tREFERENT\tPROPOSALS")
		for _, e := range l.Entries {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Fingerprint, formatMs(e.UpdatedAtMs), orDash(e.Status), orDash(e.Provider),
				orDash(e.Operation), orDash(e.Environment), orDash(e.Referent), orDash(schema.JoinRefs(e.Proposals, ",")))
		}
		tw.Flush()
	}
	if l.Next != 0 {
		fmt.Fprintf(w, "next page: processor activity list --before %s --limit %d\n", strconv.FormatUint(l.Next, 10), limit)
	}
}
