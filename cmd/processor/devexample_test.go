package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// examples/proposal.json — SPEC §2.1's proposal, byte for byte — works on
// `processor run --dev` as it is: NEEDS_APPROVAL for the fingerprint
// `processor check` prints, then, granted, CONFIRMED by a connector for
// the dev provider "inventory". The same run checks --log-level warn: the
// info lines (a malformed proposal's refusal) are left out, the warnings
// (an id reused, the development-mode warnings) are not.
func TestRunDevTakesTheSpecExample(t *testing.T) {
	example, err := os.ReadFile("../../examples/proposal.json")
	if err != nil {
		t.Fatal(err)
	}
	// What `processor check` says of it, offline, against the dev configuration.
	code, checked, errs := runCheck(t, example, "--dev", "-o", "json")
	var want checkOutput
	if err := json.Unmarshal([]byte(checked), &want); err != nil || code != 0 || !want.Admissible {
		t.Fatalf("check --dev: exit %d %s%s", code, checked, errs)
	}

	dir := t.TempDir()
	cmd := exec.Command(testenv.ProcessorBinary(t), "run", "--dev", "--data", filepath.Join(dir, "d"),
		"--listen", "127.0.0.1:0", "--metrics-listen", "", "--log-level", "warn")
	var out testenv.LogBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if !testenv.Poll(30*time.Second, cond) {
			t.Fatalf("no %s:\n%s", what, out.Bytes())
		}
	}
	waitFor("banner", func() bool { return bytes.Contains(out.Bytes(), []byte("Ctrl-C stops")) })
	banner := string(out.Bytes())
	if !strings.Contains(banner, "providers:      demo (fake") || !strings.Contains(banner, "inventory (nats") {
		t.Errorf("the banner does not list the providers:\n%s", banner)
	}
	url := regexp.MustCompile(`NATS JetStream: (nats://\S+)`).FindStringSubmatch(banner)
	if url == nil {
		t.Fatalf("no URL in the banner:\n%s", banner)
	}
	nc, err := nats.Connect(url[1])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// A connector for "inventory": confirms every dispatch.
	dispatches := make(chan schema.DispatchRequest, 10)
	if _, err := nc.Subscribe("actions.provider.inventory.dispatch", func(m *nats.Msg) {
		var req schema.DispatchRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("dispatch request: %v", err)
		}
		dispatches <- req
		_ = m.Respond([]byte(`{"outcome":"confirmed","provider_action_id":"inv:adj-1","evidence_refs":["inventory:ledger#1"]}`))
	}); err != nil {
		t.Fatal(err)
	}
	outcomes, err := nc.SubscribeSync("actions.outcomes.frontdesk.>")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	publish := func(subject string, body []byte) {
		t.Helper()
		if _, err := js.Publish(ctx, subject, body); err != nil {
			t.Fatal(err)
		}
	}
	next := func(id string) schema.Outcome {
		t.Helper()
		for {
			m, err := outcomes.NextMsgWithContext(ctx)
			if err != nil {
				t.Fatalf("no outcome for %s: %v\n%s", id, err, out.Bytes())
			}
			var o schema.Outcome
			if err := json.Unmarshal(m.Data, &o); err != nil {
				t.Fatal(err)
			}
			if o.ProposalID == id {
				return o
			}
		}
	}

	publish("actions.proposals.frontdesk", example)
	o := next("prop-7f3a")
	if o.Kind != schema.KindNeedsApproval || o.Approval == nil || o.Approval.Fingerprint != want.Fingerprint {
		t.Fatalf("outcome %+v, want NEEDS_APPROVAL for %s", o, want.Fingerprint)
	}
	now := time.Now().UnixMilli()
	grant := schema.Grant{Schema: schema.SchemaGrant, ProposalID: "prop-7f3a", IntentFingerprint: want.Fingerprint,
		AuthorizedBy: "actor:demo", AuthorizationMethod: schema.MethodManual, AuthenticationAssurance: schema.AssuranceBiometric,
		IssuedAtMs: now, ExpiresAtMs: now + 5*60*1000}
	publish("actions.grants.frontdesk", schema.MustMarshal(grant))
	o = next("prop-7f3a")
	if o.Kind != schema.KindConfirmed || o.Receipt == nil || o.Receipt.ProviderActionID != "inv:adj-1" {
		t.Fatalf("outcome %+v, want CONFIRMED", o)
	}
	if d := <-dispatches; len(dispatches) != 0 || d.IdempotencyKey != want.IdempotencyKey || d.Referent != "sku-1001" {
		t.Errorf("dispatched %+v (and %d more)", d, len(dispatches))
	}

	// --log-level warn: a malformed proposal's refusal (info) is not
	// logged; an id reused (warn) is.
	publish("actions.proposals.frontdesk", bytes.Replace(
		bytes.Replace(example, []byte(`"environment": "test"`), []byte(`"environment": "prod"`), 1),
		[]byte(`"prop-7f3a"`), []byte(`"prop-bad"`), 1))
	if o := next("prop-bad"); o.Kind != schema.KindIntegrationFailure || o.Incidents[0].Code != schema.CodeAdmissionMalformed {
		t.Errorf("malformed: %+v", o)
	}
	reused := bytes.Replace(example, []byte(`"quantity": 20`), []byte(`"quantity": 21`), 1)
	publish("actions.proposals.frontdesk", bytes.Replace(reused, []byte(`"delivery:42"`), []byte(`"delivery:43"`), 1))
	waitFor("reuse warning", func() bool { return bytes.Contains(out.Bytes(), []byte(`"code":"ADMISSION_PROPOSAL_ID_REUSED"`)) })
	for _, line := range strings.Split(string(out.Bytes()), "\n") {
		if strings.Contains(line, `"level":"INFO"`) || strings.Contains(line, `"level":"DEBUG"`) {
			t.Errorf("--log-level warn logged %s", line)
		}
	}
	for _, want := range []string{"UNSIGNED PROPOSALS", "NATS AUTHENTICATION IS OFF", `"path":"/proposal_id"`} {
		if !bytes.Contains(out.Bytes(), []byte(want)) {
			t.Errorf("the log lacks %q:\n%s", want, out.Bytes())
		}
	}

	nc.Close()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		exited <- err // for the deferred wait
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, out.Bytes())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
}
