package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
)

// signedLumber publishes the lumber fixture (quantity q) with an inline
// grant and returns its fingerprint.
func signedLumber(t *testing.T, env *testenv.Env, clock stages.Clock, pid string, q int) string {
	t.Helper()
	m := testenv.Lumber(pid)
	testenv.Set(m, "intent.payload", map[string]any{"quantity": q})
	m = testenv.Granted(t, m, "sku-1001", clock.Now())
	env.PublishSigned(t, m, env.Host)
	return testenv.FingerprintOf(t, m, "sku-1001")
}

func lastKind(kind schema.Kind) testenv.Cond {
	return func(outs []schema.Outcome) bool { return outs[len(outs)-1].Kind == kind }
}

// TestOperatorCommands drives `processor receipts|activity|reconcile`
// against a running processor: one action exhausted, one still polling.
func TestOperatorCommands(t *testing.T) {
	clock := stages.NewManualClock(time.UnixMilli(1_764_424_800_000))
	env := testenv.New(t, testenv.WithClock(clock), testenv.WithConfig(func(c *config.Config) {
		c.Reconciliation.Interval = 5 * time.Second
		c.Reconciliation.MaxAttempts = 2
	}))
	fake := env.Fakes["demo"]
	fake.TimeOut()
	fpA := signedLumber(t, env, clock, "prop-a", 20)
	env.Recorder.Wait(t, "prop-a", lastKind(schema.KindReconciliationRequired))
	clock.Advance(5 * time.Second)
	env.Recorder.Wait(t, "prop-a", testenv.Count(2))
	clock.Advance(10 * time.Second)
	env.Recorder.Wait(t, "prop-a", testenv.Terminal) // exhausted
	fpB := signedLumber(t, env, clock, "prop-b", 30)
	env.Recorder.Wait(t, "prop-b", lastKind(schema.KindReconciliationRequired))
	clock.Advance(3 * time.Second) // B's first poll is due in 2s

	url := env.Server.ClientURL()
	cfgFile := testenv.WriteConfig(t, env.Config)
	useClock(t, clock)
	// Every command signs as the configured operator (the seed from the
	// environment; TestOperatorFlags covers --nkey and its precedence).
	t.Setenv(EnvOperatorNkey, writeSeed(t, env.Operator))
	unknown := "sha256:" + strings.Repeat("ab", 32)
	type step struct {
		name   string
		args   []string
		code   int
		stdout []string // substrings
		stderr []string
		after  func(t *testing.T, stdout string)
	}
	steps := []step{
		{name: "receipts", args: []string{"receipts", "get", fpA, "--url", url}, stdout: []string{fpA, "RECONCILIATION_REQUIRED (terminal)", "ADAPTER_TIMEOUT", "rcn_" + fpA[7:23] + "_1", "RECONCILE_EXHAUSTED", "prop-a"}},
		{name: "receipts by hex, flags first", args: []string{"receipts", "get", "--url", url, strings.ToUpper(fpA[7:])}, stdout: []string{fpA}},
		{name: "receipts json", args: []string{"receipts", "get", fpA, "--url", url, "--json"}, after: func(t *testing.T, out string) {
			var r admin.Receipts
			if err := schema.Decode([]byte(strings.TrimSpace(out)), &r); err != nil || len(r.Receipts) != 3 || !r.Terminal {
				t.Errorf("receipts json = %+v %v", r, err)
			}
		}},
		{name: "receipts unknown", args: []string{"receipts", "get", unknown, "--url", url}, code: 1, stderr: []string{"no receipt for " + unknown}},
		{name: "receipts bad fingerprint", args: []string{"receipts", "get", "sha256:xyz", "--url", url}, code: 2, stderr: []string{"not a fingerprint"}},
		{name: "receipts usage", args: []string{"receipts"}, code: 2, stderr: []string{"usage: processor receipts get"}},
		{name: "activity", args: []string{"activity", "get", fpA, "--url", url}, stdout: []string{`"status": "reconciliation_required"`, `"exhausted": true`, `"attempts": 2`}},
		{name: "activity unknown", args: []string{"activity", "get", unknown, "--url", url}, code: 1, stderr: []string{"no activity"}},
		{name: "list", args: []string{"reconcile", "list", "--url", url}, stdout: []string{"2 indeterminate actions", fpA, fpB, "exhausted", "next poll in 2s", "2/2", "0/2", "18s", "prop-a", "RECONCILE_EXHAUSTED", "ADAPTER_TIMEOUT"},
			after: func(t *testing.T, out string) {
				if strings.Index(out, fpA) > strings.Index(out, fpB) {
					t.Error("the older action is not listed first")
				}
			}},
		{name: "list json via config", args: []string{"reconcile", "list", "--config", cfgFile, "--json"}, after: func(t *testing.T, out string) {
			var l admin.List
			if err := schema.Decode([]byte(strings.TrimSpace(out)), &l); err != nil || len(l.Actions) != 2 || l.Actions[0].Fingerprint != fpA {
				t.Errorf("list json = %+v %v", l, err)
			}
		}},
		{name: "resolve without effect", args: []string{"reconcile", "resolve", fpA, "--evidence", "ticket:1", "--url", url}, code: 2, stderr: []string{"exactly one of --present and --absent"}},
		{name: "resolve both effects", args: []string{"reconcile", "resolve", fpA, "--present", "--absent", "--evidence", "ticket:1", "--url", url}, code: 2},
		{name: "resolve without evidence", args: []string{"reconcile", "resolve", fpA, "--present", "--url", url}, code: 2, stderr: []string{"--evidence"}},
		{name: "resolve bad evidence", args: []string{"reconcile", "resolve", fpA, "--present", "--evidence", "no colon", "--url", url}, code: 2},
		{name: "resolve two fingerprints", args: []string{"reconcile", "resolve", fpA, fpB, "--present", "--evidence", "t:1", "--url", url}, code: 2},
		{name: "resolve unknown", args: []string{"reconcile", "resolve", unknown, "--absent", "--evidence", "t:1", "--url", url}, code: 1, stderr: []string{"not_found"}},
		{name: "resolve bad observed-at", args: []string{"reconcile", "resolve", fpA, "--absent", "--evidence", "t:1", "--observed-at", "yesterday", "--url", url},
			code: 2, stderr: []string{"--observed-at must be RFC 3339"}},
		{name: "resolve bad receipt", args: []string{"reconcile", "resolve", fpA, "--absent", "--evidence", "t:1", "--receipt", "r-1", "--url", url},
			code: 1, stderr: []string{"receipt_id is not a receipt id", "bad_request"}},
		{name: "resolve another receipt than the latest", args: []string{"reconcile", "resolve", fpA, "--present", "--evidence", "t:1",
			"--receipt", "rcpt_" + strings.Repeat("0", 32), "--observed-at", "now", "--url", url},
			code: 1, stderr: []string{"no longer the latest", "not_indeterminate"}},
		{name: "resolve present", args: []string{"reconcile", "resolve", fpA, "--present", "--evidence", "ticket:OPS-9", "--url", url},
			stdout: []string{"resolved " + fpA, "effect present → CONFIRMED", "ticket:OPS-9", "prop-a", "operator   " + testenv.OperatorName},
			after: func(t *testing.T, _ string) {
				o := env.Recorder.Wait(t, "prop-a", lastKind(schema.KindConfirmed))
				if o.Receipt.ErrorCode != string(schema.CodeOperatorResolved) || !o.Terminal || o.Receipt.Reconciliation.Operator != testenv.OperatorName {
					t.Errorf("operator outcome = %+v", o)
				}
				waitActivity(t, env, fpA, func(a *schema.Activity) bool { return a.Status == string(schema.StatusConfirmed) })
			}},
		{name: "receipts after resolve", args: []string{"receipts", "get", fpA, "--url", url}, stdout: []string{"settled by the operator " + testenv.OperatorName}},
		{name: "activity after resolve", args: []string{"activity", "get", fpA, "--url", url}, stdout: []string{`"resolved_by": "` + testenv.OperatorName + `"`, `"operator": "` + testenv.OperatorName + `"`}},
		{name: "resolve again", args: []string{"reconcile", "resolve", fpA, "--absent", "--evidence", "ticket:OPS-10", "--url", url}, code: 1, stderr: []string{"not indeterminate", "confirmed"}},
		{name: "resolve polling, flags around", args: []string{"reconcile", "resolve", "--absent", fpB, "--evidence", "provider-console:search/none", "--url", url, "--json"}, after: func(t *testing.T, out string) {
			var r admin.Resolved
			if err := schema.Decode([]byte(strings.TrimSpace(out)), &r); err != nil || r.OutcomeKind != schema.KindRejected {
				t.Errorf("resolve json = %+v %v", r, err)
			}
			env.Recorder.Wait(t, "prop-b", lastKind(schema.KindRejected))
		}},
		{name: "list empty", args: []string{"reconcile", "list", "--url", url}, stdout: []string{"no indeterminate actions"}},
		{name: "another prefix", args: []string{"reconcile", "list", "--url", url, "--prefix", "elsewhere", "--timeout", "2s"}, code: 1, stderr: []string{"is a processor with this --prefix running"}},
		{name: "no server", args: []string{"reconcile", "list", "--url", "nats://127.0.0.1:1"}, code: 1, stderr: []string{"cannot reach NATS"}},
		{name: "reconcile usage", args: []string{"reconcile", "frob"}, code: 2, stderr: []string{"usage: processor reconcile list"}},
	}
	for _, s := range steps {
		var out, errb bytes.Buffer
		code := run(s.args, nil, &out, &errb)
		if code != s.code {
			t.Errorf("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", s.name, code, s.code, out.String(), errb.String())
			continue
		}
		for _, want := range s.stdout {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: stdout lacks %q:\n%s", s.name, want, out.String())
			}
		}
		for _, want := range s.stderr {
			if !strings.Contains(errb.String(), want) {
				t.Errorf("%s: stderr lacks %q:\n%s", s.name, want, errb.String())
			}
		}
		if s.after != nil {
			s.after(t, out.String())
		}
	}
	if g := testutil.ToFloat64(env.Processor().Metrics().Indeterminate); g != 0 {
		t.Errorf("indeterminate gauge = %v", g)
	}
	if n := fake.Dispatches(); n != 2 {
		t.Errorf("dispatches = %d", n)
	}
}

// TestOperatorReadCommands drives `processor approvals list`, `proposals
// get`, `activity list` and the <host>/<proposal_id> form of `receipts
// get`, `activity get` and `reconcile resolve` against a running processor.
func TestOperatorReadCommands(t *testing.T) {
	clock := stages.NewManualClock(time.UnixMilli(1_764_424_800_000))
	env := testenv.New(t, testenv.WithClock(clock), testenv.WithConfig(func(c *config.Config) {
		c.Reconciliation.MaxAttempts = 1
	}))
	useClock(t, clock)
	t.Setenv(EnvOperatorNkey, writeSeed(t, env.Operator))
	t.Setenv(EnvNATSURL, env.Server.ClientURL())

	parked := testenv.Lumber("prop-park")
	env.PublishSigned(t, parked, env.Host)
	env.Recorder.Wait(t, "prop-park", lastKind(schema.KindNeedsApproval))
	fpPark := testenv.FingerprintOf(t, parked, "sku-1001")
	fpOK := signedLumber(t, env, clock, "prop-ok", 30)
	env.Recorder.Wait(t, "prop-ok", lastKind(schema.KindConfirmed))
	waitActivity(t, env, fpPark, func(a *schema.Activity) bool { return a.Status == schema.ActivityAwaitingApproval })
	waitActivity(t, env, fpOK, func(a *schema.Activity) bool { return a.Status == string(schema.StatusConfirmed) })
	fake := env.Fakes["demo"]
	fake.OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{}, adapters.ErrTimeout
	})
	fpInd := signedLumber(t, env, clock, "prop-ind", 40)
	env.Recorder.Wait(t, "prop-ind", lastKind(schema.KindReconciliationRequired))

	decode := func(v any) func(t *testing.T, out string) {
		return func(t *testing.T, out string) {
			t.Helper()
			if err := schema.Decode([]byte(strings.TrimSpace(out)), v); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
		}
	}
	var approvals admin.Approvals
	var proposal admin.Proposal
	var page admin.ActivityList
	type step struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr []string
		after  func(t *testing.T, stdout string)
	}
	steps := []step{
		{name: "approvals", args: []string{"approvals", "list"},
			stdout: []string{"1 proposal waits for approval", "frontdesk", "prop-park", fpPark, "sku-1001", "demo", "2025-11-29T14:00:00.000Z", "(in 10m0s)"}},
		{name: "approvals json", args: []string{"approvals", "list", "-o", "json"}, after: func(t *testing.T, out string) {
			decode(&approvals)(t, out)
			if approvals.Total != 1 || approvals.Approvals[0].Fingerprint != fpPark || approvals.Approvals[0].Provider != "demo" {
				t.Errorf("approvals = %+v", approvals)
			}
		}},
		{name: "approvals bad limit", args: []string{"approvals", "list", "--limit", "0"}, code: 2, stderr: []string{"--limit"}},
		{name: "proposal", args: []string{"proposals", "get", "frontdesk", "prop-ok"},
			stdout: []string{"frontdesk/prop-ok", fpOK, "permitted", "confirmed (next none)", "CONFIRMED", "PRESENT"}},
		{name: "proposal parked, one argument, json", args: []string{"proposals", "get", "frontdesk/prop-park", "--output", "json"}, after: func(t *testing.T, out string) {
			decode(&proposal)(t, out)
			if proposal.Fingerprint != fpPark || proposal.Approval.State != "parked" || len(proposal.Outcomes) != 1 || proposal.Receipt != nil {
				t.Errorf("proposal = %+v", proposal)
			}
		}},
		{name: "proposal unknown", args: []string{"proposals", "get", "frontdesk", "prop-none"}, code: 1, stderr: []string{"not_found", "frontdesk/prop-none"}},
		{name: "proposal without id", args: []string{"proposals", "get", "frontdesk"}, code: 2, stderr: []string{"not <host>/<proposal_id>"}},
		{name: "proposal bad host", args: []string{"proposals", "get", "front.desk", "prop-ok"}, code: 2},
		{name: "receipts by proposal", args: []string{"receipts", "get", "frontdesk/prop-ok"}, stdout: []string{fpOK, "CONFIRMED (terminal)", "prop-ok"}},
		{name: "receipts of a parked proposal", args: []string{"receipts", "get", "frontdesk/prop-park"}, code: 1, stderr: []string{"no receipt for " + fpPark}},
		{name: "receipts bad proposal", args: []string{"receipts", "get", "front.desk/prop-ok"}, code: 2, stderr: []string{"not <host>/<proposal_id>"}},
		{name: "activity by proposal", args: []string{"activity", "get", "frontdesk/prop-park"}, stdout: []string{`"status": "awaiting_approval"`, fpPark}},
		{name: "activity of an unknown proposal", args: []string{"activity", "get", "frontdesk/prop-none"}, code: 1, stderr: []string{"not_found"}},
		{name: "activity list", args: []string{"activity", "list"}, stdout: []string{fpPark, fpOK, fpInd, "awaiting_approval", "confirmed", "frontdesk/prop-ok"}},
		{name: "activity list page", args: []string{"activity", "list", "--limit", "2", "--json"}, after: func(t *testing.T, out string) {
			decode(&page)(t, out)
			if len(page.Entries) != 2 || page.Next == 0 {
				t.Fatalf("page = %+v", page)
			}
		}},
		{name: "activity list bad format", args: []string{"activity", "list", "-o", "yaml"}, code: 2, stderr: []string{"text and json"}},
		{name: "resolve by proposal", args: []string{"reconcile", "resolve", "frontdesk/prop-ind", "--absent", "--evidence", "ticket:OPS-5"},
			stdout: []string{"resolved " + fpInd, "effect absent → REJECTED", "operator   " + testenv.OperatorName}},
	}
	for _, s := range steps {
		var out, errb bytes.Buffer
		code := run(s.args, nil, &out, &errb)
		if code != s.code {
			t.Errorf("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", s.name, code, s.code, out.String(), errb.String())
			continue
		}
		for _, want := range s.stdout {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: stdout lacks %q:\n%s", s.name, want, out.String())
			}
		}
		for _, want := range s.stderr {
			if !strings.Contains(errb.String(), want) {
				t.Errorf("%s: stderr lacks %q:\n%s", s.name, want, errb.String())
			}
		}
		if s.after != nil {
			s.after(t, out.String())
		}
	}
	// The next page carries on where the first ended.
	var out, errb bytes.Buffer
	if code := run([]string{"activity", "list", "--limit", "2", "--before", fmt.Sprint(page.Next)}, nil, &out, &errb); code != 0 {
		t.Fatalf("page 2: exit %d: %s", code, errb.String())
	}
	seen := strings.Count(out.String(), "sha256:")
	for _, e := range page.Entries {
		if strings.Contains(out.String(), e.Fingerprint) {
			t.Errorf("page 2 repeats %s", e.Fingerprint)
		}
	}
	if seen != 1 {
		t.Errorf("page 2 lists %d intents:\n%s", seen, out.String())
	}
}

// --observed-at takes RFC 3339, Unix milliseconds or now.
func TestObservedAt(t *testing.T) {
	now := time.UnixMilli(1_764_640_000_123)
	for in, want := range map[string]int64{
		"now":                         now.UnixMilli(),
		"1764630000000":               1_764_630_000_000,
		"2026-12-02T01:30:00Z":        time.Date(2026, 12, 2, 1, 30, 0, 0, time.UTC).UnixMilli(),
		"2026-12-02T02:30:00.5+01:00": time.Date(2026, 12, 2, 1, 30, 0, 500e6, time.UTC).UnixMilli(),
	} {
		if got, err := observedAt(in, now); err != nil || got != want {
			t.Errorf("observedAt(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "yesterday", "-5", "0", "2026-12-02"} {
		if _, err := observedAt(in, now); err == nil {
			t.Errorf("observedAt(%q) accepted", in)
		}
	}
}
