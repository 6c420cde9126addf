package dispatch_test

import (
	"context"
	"testing"

	"github.com/portcullis/portcullis/internal/testenv"
	kvjs "github.com/portcullis/portcullis/kv/jetstream"
	"github.com/portcullis/portcullis/schema"
)

// TestOneActivityWritePerConfirmedProposal: a proposal permitted and
// confirmed changes its intent's snapshot twice (authorized, then
// dispatched), close together: the snapshot is written once, holding
// both — authorization's permit and dispatch's result. Before, each
// stage wrote it (revision 2).
func TestOneActivityWritePerConfirmedProposal(t *testing.T) {
	env := testenv.New(t)
	p := proposal(t, "prop-once", "ok")
	env.PublishSigned(t, p, env.Host)
	o := env.Recorder.Wait(t, "prop-once", testenv.Terminal)
	if o.Kind != schema.KindConfirmed {
		t.Fatalf("outcome = %+v", o)
	}
	a := waitActivity(t, env, *o.Fingerprint, func(a *schema.Activity) bool {
		return a.Status == string(schema.StatusConfirmed) && a.Decision != nil && a.Decision.Outcome == "permit" &&
			len(a.PolicyEvaluations) > 0 && a.Summary != "" && a.Dispatch != nil && a.Receipt != nil
	})
	bucket := env.Processor().Activity().KV
	e, err := bucket.Get(context.Background(), kvjs.ActivityKey(*o.Fingerprint))
	if err != nil {
		t.Fatal(err)
	}
	if e.Revision() != 1 {
		t.Errorf("activity written %d times for one confirmed proposal, want 1: %+v", e.Revision(), a)
	}
}
