package main

import (
	"bytes"
	"context"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/activity"
)

// cmdActivity: `processor activity get <fingerprint>` prints a fingerprint's
// value-free activity snapshot, read straight from the KV bucket
// `<prefix>_activity` (no processor needed, only its NATS server). It logs
// in like the other operator commands; there is no request to sign.
func cmdActivity(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "get" {
		fmt.Fprintln(stderr, "usage: processor activity get <fingerprint> [--url URL] [--nkey FILE] [--creds FILE] [--prefix P] [--config FILE]")
		return 2
	}
	fs := newFlags("activity get", stderr)
	var c conn
	c.register(fs)
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return 2
	}
	fp, ok := fingerprintArg(stderr, "activity get", pos)
	if !ok {
		return 2
	}
	if err := c.resolve(fs); err != nil {
		return fail(stderr, "activity get", err)
	}
	sess, err := c.open()
	if err != nil {
		return fail(stderr, "activity get", err)
	}
	defer sess.close()
	subj := sess.subj
	// Stream info of the bucket's stream and a direct get: all an
	// operator may ask of JetStream (SPEC §2.8). No consumer is created.
	js, err := jetstream.New(sess.nc)
	if err != nil {
		return fail(stderr, "activity get", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	bucket, err := js.KeyValue(ctx, subj.ActivityBucket())
	if err != nil {
		return fail(stderr, "activity get", fmt.Errorf("bucket %s: %w", subj.ActivityBucket(), err))
	}
	e, err := bucket.Get(ctx, activity.Key(fp))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return fail(stderr, "activity get", fmt.Errorf("no activity for %s", fp))
	}
	if err != nil {
		return fail(stderr, "activity get", err)
	}
	var out bytes.Buffer
	if err := stdjson.Indent(&out, e.Value(), "", "  "); err != nil {
		return fail(stderr, "activity get", fmt.Errorf("the snapshot is not JSON: %w", err))
	}
	out.WriteByte('\n')
	_, _ = stdout.Write(out.Bytes())
	return 0
}
