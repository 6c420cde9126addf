package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/client"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

// The whole host flow with authentication on: a signed proposal parks for
// approval, the host checks the approval against its own fingerprint and
// grants it, a client Connector serves the dispatch, and the host reads
// CONFIRMED live and then again from the outcome stream.
func TestProposeGrantConfirmed(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	inv := &provider{}
	serveInventory(t, env, inv)
	host := newHost(t, env, client.HostConfig{})
	ctx := testContext(t)

	p := proposal(t, inventory("prop-grant"))
	tr, err := host.Propose(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	if ack := tr.PubAck(); ack.Stream != env.Subjects.HostProposalsStream(testenv.HostName) || ack.Sequence == 0 || ack.Duplicate {
		t.Errorf("PubAck %+v", ack)
	}
	parked, err := tr.Await(ctx, client.Kinds(schema.KindNeedsApproval))
	if err != nil {
		t.Fatal(err)
	}
	want, err := client.Fingerprint(p, "sku-1001")
	if err != nil {
		t.Fatal(err)
	}
	if parked.Approval == nil || parked.Approval.Fingerprint != want || parked.Host != testenv.HostName {
		t.Fatalf("parked outcome %+v, want approval of %s", parked, want)
	}
	g, err := host.Grant(ctx, parked, client.GrantOptions{
		AuthorizedBy: "actor:demo", Assurance: schema.AssuranceBiometric, ExpectFingerprint: want,
	})
	if err != nil {
		t.Fatal(err)
	}
	if g.ProposalID != "prop-grant" || g.AuthorizationMethod != schema.MethodManual ||
		g.ExpiresAtMs-g.IssuedAtMs != client.DefaultGrantLifetime.Milliseconds() {
		t.Errorf("grant sent %+v", g)
	}
	done, err := tr.Await(ctx, client.Terminal)
	if err != nil {
		t.Fatal(err)
	}
	key := want[len("sha256:"):]
	if done.Kind != schema.KindConfirmed || done.Receipt == nil || done.Receipt.ProviderActionID != "inv-"+key[:8] {
		t.Fatalf("terminal outcome %+v", done)
	}
	if n, _ := inv.counts(); n != 1 || inv.dispatches[0].Fingerprint != want || inv.dispatches[0].Referent != "sku-1001" {
		t.Errorf("the connector got %d dispatches: %+v", n, inv.dispatches)
	}

	// After the fact, from the outcome stream: once the processor is done
	// (the stream stores an outcome a moment after live delivery).
	env.Quiesce(t)
	last, err := host.Last(ctx, "prop-grant")
	if err != nil {
		t.Fatal(err)
	}
	if last.Kind != schema.KindConfirmed || last.Receipt == nil || last.Receipt.ReceiptID != done.Receipt.ReceiptID || last.Host != testenv.HostName {
		t.Errorf("Last = %+v, want the CONFIRMED outcome", last)
	}
	if _, err := host.Last(ctx, "prop-never-sent"); !errors.Is(err, client.ErrNoOutcome) {
		t.Errorf("Last of an unknown proposal: %v, want ErrNoOutcome", err)
	}
}

// A declined approval ends DENIED/APPROVAL_DECLINED, and nothing is
// dispatched.
func TestDecline(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	inv := &provider{}
	serveInventory(t, env, inv)
	host := newHost(t, env, client.HostConfig{})
	ctx := testContext(t)

	tr, err := host.Propose(ctx, proposal(t, inventory("prop-decline")))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	parked, err := tr.Await(ctx, client.Kinds(schema.KindNeedsApproval))
	if err != nil {
		t.Fatal(err)
	}
	d, err := host.Decline(ctx, parked, "actor:demo")
	if err != nil {
		t.Fatal(err)
	}
	if d.IntentFingerprint != parked.Approval.Fingerprint || d.ProposalID != "prop-decline" {
		t.Errorf("decline sent %+v", d)
	}
	o, err := tr.Await(ctx, client.Terminal)
	if err != nil {
		t.Fatal(err)
	}
	if o.Kind != schema.KindDenied || !hasIncident(o, schema.PhaseAuthorization, schema.CodeApprovalDeclined) || o.Receipt != nil {
		t.Errorf("outcome %+v, want DENIED/APPROVAL_DECLINED", o)
	}
	if n, _ := inv.counts(); n != 0 {
		t.Errorf("dispatched %d times", n)
	}
}

// The live subscription misses outcomes: Await reads the last one from the
// outcome stream.
func TestAwaitFallsBackToDirectGet(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	serveInventory(t, env, &provider{})
	host := newHost(t, env, client.HostConfig{PollInterval: 50 * time.Millisecond})
	ctx := testContext(t)

	t.Run("unsubscribed before the outcome", func(t *testing.T) {
		tr, err := host.Propose(ctx, proposal(t, inventory("prop-gap")))
		if err != nil {
			t.Fatal(err)
		}
		parked, err := tr.Await(ctx, client.Kinds(schema.KindNeedsApproval))
		if err != nil {
			t.Fatal(err)
		}
		// Nothing can arrive live any more.
		if err := tr.Stop(); err != nil {
			t.Fatal(err)
		}
		polls := tr.Polls()
		if _, err := host.Grant(ctx, parked, client.GrantOptions{AuthorizedBy: "actor:demo", Assurance: schema.AssuranceBiometric}); err != nil {
			t.Fatal(err)
		}
		o, err := tr.Await(ctx, client.Terminal)
		if err != nil {
			t.Fatal(err)
		}
		if o.Kind != schema.KindConfirmed || tr.Polls() == polls {
			t.Errorf("outcome %s after %d direct gets, want CONFIRMED from the stream", o.Kind, tr.Polls()-polls)
		}
		// The same outcome is not handed out twice.
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if o, err := tr.Next(short); !errors.Is(err, client.ErrTimeout) {
			t.Errorf("Next after the last outcome: %s, %v; want ErrTimeout", o.Kind, err)
		}
	})

	t.Run("tracked after the fact", func(t *testing.T) {
		p := testenv.Granted(t, testenv.Lumber("prop-later"), "sku-1001", time.Now())
		env.PublishSigned(t, p, env.Host)
		env.Recorder.Wait(t, "prop-later", testenv.Terminal)
		env.Quiesce(t) // stored, not only delivered live

		tr, err := host.Track(ctx, "prop-later")
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Stop()
		o, err := tr.Await(ctx, client.Terminal)
		if err != nil {
			t.Fatal(err)
		}
		if o.Kind != schema.KindConfirmed || o.ProposalID != "prop-later" || tr.Polls() != 1 {
			t.Errorf("outcome %+v after %d direct gets", o, tr.Polls())
		}
	})
}

// Await honours its context: cancelled is not a timeout, a deadline is.
func TestAwaitContext(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	host := newHost(t, env, client.HostConfig{PollInterval: 50 * time.Millisecond})
	ctx := testContext(t)
	tr, err := host.Propose(ctx, proposal(t, inventory("prop-ctx")))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	if _, err := tr.Await(ctx, client.Kinds(schema.KindNeedsApproval)); err != nil {
		t.Fatal(err)
	}

	cancelled, cancel := context.WithCancel(ctx)
	go cancel()
	_, err = tr.Await(cancelled, client.Terminal)
	if !errors.Is(err, context.Canceled) || errors.Is(err, client.ErrTimeout) {
		t.Errorf("cancelled: %v, want context.Canceled and not ErrTimeout", err)
	}

	short, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel2()
	_, err = tr.Await(short, client.Terminal)
	if !errors.Is(err, client.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline: %v, want ErrTimeout and context.DeadlineExceeded", err)
	}
	// The parked proposal is still parked: nothing was handed out.
	if o, err := host.Last(ctx, "prop-ctx"); err != nil || o.Kind != schema.KindNeedsApproval {
		t.Errorf("Last = %s, %v", o.Kind, err)
	}
}

// A terminal outcome that the condition does not accept ends the wait.
func TestAwaitEnded(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	host := newHost(t, env, client.HostConfig{})
	ctx := testContext(t)
	p := inventory("prop-vague")
	testenv.Set(p, "grounding.subject", "some lumber")
	tr, err := host.Propose(ctx, proposal(t, p))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	o, err := tr.Await(ctx, client.Kinds(schema.KindNeedsApproval))
	if !errors.Is(err, client.ErrEnded) || o.Kind != schema.KindNeedsClarification {
		t.Errorf("Await = %s, %v; want NEEDS_CLARIFICATION with ErrEnded", o.Kind, err)
	}
}

// A proposal carried as exact bytes (odd spacing, a trailing newline) is
// signed as sent and admitted; the same bytes again are a stream duplicate,
// and the second tracker still gets the outcome (from the stream).
func TestProposeRawSignsExactBytes(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	host := newHost(t, env, client.HostConfig{PollInterval: 50 * time.Millisecond})
	ctx := testContext(t)
	p := testenv.Granted(t, testenv.Lumber("prop-raw"), "sku-1001", time.Now())
	body := append([]byte("  "), testenv.Body(t, p)...)
	body = append(body, "\n"...)

	tr, err := host.ProposeRaw(ctx, body)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	o, err := tr.Await(ctx, client.Terminal)
	if err != nil || o.Kind != schema.KindConfirmed {
		t.Fatalf("outcome %s, %v", o.Kind, err)
	}

	again, err := host.ProposeRaw(ctx, body)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Stop()
	if ack := again.PubAck(); !ack.Duplicate || ack.Sequence != tr.PubAck().Sequence {
		t.Errorf("second PubAck %+v, want a duplicate of %+v", ack, tr.PubAck())
	}
	if o2, err := again.Await(ctx, client.Terminal); err != nil || o2.Receipt == nil || o2.Receipt.ReceiptID != o.Receipt.ReceiptID {
		t.Errorf("repeat: %+v, %v", o2, err)
	}
	if n := env.Fakes["demo"].Dispatches(); n != 1 {
		t.Errorf("dispatched %d times", n)
	}
}

// Propose refuses, before sending, what admission would call malformed.
func TestProposeChecksBeforeSending(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	host := newHost(t, env, client.HostConfig{})
	ctx := testContext(t)
	for name, tc := range map[string]struct {
		edit func(map[string]any)
		path string // the field the error names
	}{
		"environment": {func(p map[string]any) { testenv.Set(p, "intent.environment", "staging") }, "/intent/environment"},
		"context":     {func(p map[string]any) { testenv.Set(p, "context.actor.actor_ref", "") }, "/context/actor/actor_ref"},
		"proposal id": {func(p map[string]any) { testenv.Set(p, "proposal_id", "a b") }, "/proposal_id"},
		"inexact number": {func(p map[string]any) {
			testenv.Set(p, "intent.payload", map[string]any{"n": json.Number("9007199254740993")})
		}, "/intent/payload"},
		"candidate source": {func(p map[string]any) { testenv.Set(p, "grounding.candidate_source", "Not A Name") }, "/grounding/candidate_source"},
	} {
		p := testenv.Lumber("prop-bad")
		tc.edit(p)
		dp, err := schema.DecodeProposal(testenv.Body(t, p), 0)
		if err != nil {
			t.Fatalf("%s: the fixture does not decode: %v", name, err)
		}
		_, err = host.Propose(ctx, dp)
		var ve *schema.ValidationError
		if !errors.Is(err, client.ErrInvalid) || !errors.As(err, &ve) || ve.Problems[0].Path != tc.path {
			t.Errorf("%s: Propose = %v, want ErrInvalid naming %s", name, err, tc.path)
		}
	}
	if _, err := host.ProposeRaw(ctx, []byte(`{"proposal_id":"a","proposal_id":"b"}`)); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("ProposeRaw of an ambiguous id: %v, want ErrInvalid", err)
	}
	if n := env.Recorder.Count(); n != 0 {
		t.Errorf("%d outcomes published", n)
	}
}

// Grant and Decline check what they answer before sending anything.
func TestGrantChecks(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	host := newHost(t, env, client.HostConfig{})
	ctx := testContext(t)
	fp := "sha256:" + strings.Repeat("ab", 32)
	parked := schema.Outcome{Host: testenv.HostName, Schema: schema.SchemaOutcome, ProposalID: "prop-x", Kind: schema.KindNeedsApproval,
		Approval: &schema.Approval{Fingerprint: fp}}
	ok := client.GrantOptions{AuthorizedBy: "actor:demo", Assurance: schema.AssuranceSession}

	confirmed := parked
	confirmed.Kind, confirmed.Approval = schema.KindConfirmed, nil
	if _, err := host.Grant(ctx, confirmed, ok); !errors.Is(err, client.ErrNotParked) {
		t.Errorf("grant for CONFIRMED: %v", err)
	}
	if _, err := host.Decline(ctx, confirmed, "actor:demo"); !errors.Is(err, client.ErrNotParked) {
		t.Errorf("decline for CONFIRMED: %v", err)
	}
	other := parked
	other.Host = testenv.OtherHostName
	if _, err := host.Grant(ctx, other, ok); !errors.Is(err, client.ErrNotParked) {
		t.Errorf("grant for another host's outcome: %v", err)
	}
	mismatch := ok
	mismatch.ExpectFingerprint = "sha256:" + strings.Repeat("0", 64)
	if _, err := host.Grant(ctx, parked, mismatch); !errors.Is(err, client.ErrFingerprintMismatch) {
		t.Errorf("grant for another fingerprint: %v", err)
	}
	for name, opts := range map[string]client.GrantOptions{
		"no assurance":  {AuthorizedBy: "actor:demo"},
		"no approver":   {Assurance: schema.AssuranceSession},
		"bad method":    {AuthorizedBy: "actor:demo", Assurance: schema.AssuranceSession, Method: "vibes"},
		"two lines":     {AuthorizedBy: "actor:\ndemo", Assurance: schema.AssuranceSession},
		"bad ceiling":   {AuthorizedBy: "actor:demo", Assurance: schema.AssuranceSession, MaxExternalSpend: &schema.Spend{Currency: "usd"}},
		"bad assurance": {AuthorizedBy: "actor:demo", Assurance: "strong"},
	} {
		if _, err := host.Grant(ctx, parked, opts); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := host.Decline(ctx, parked, ""); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("decline without a name: %v", err)
	}
}

// An unsigned host against a development processor (allow_unsigned, no
// NATS authentication, an anonymous connection).
func TestUnsignedHostDev(t *testing.T) {
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) { c.Admission.AllowUnsigned = true }))
	nc := connect(t, env, nil)
	host, err := client.NewHost(nc, client.HostConfig{Name: testenv.HostName})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	tr, err := host.Propose(ctx, proposal(t, testenv.Granted(t, testenv.Lumber("prop-dev"), "sku-1001", time.Now())))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	if o, err := tr.Await(ctx, client.Terminal); err != nil || o.Kind != schema.KindConfirmed {
		t.Errorf("outcome %+v, %v", o, err)
	}
}

// Without allow_unsigned, a proposal the processor refuses for
// authentication is stored but never admitted: no outcome, only the
// incident event. The host learns it from Await, which says why no outcome
// came (issue 23: it only ever timed out): unsigned, or signed by a key
// that is not the host block's. (NATS authentication is off here, as with
// nats.auth = false, so such a login can publish at all.)
func TestAuthenticationRefusalExplained(t *testing.T) {
	env := testenv.New(t)
	stranger, _ := nkeys.CreateUser()
	strangerPub, _ := stranger.PublicKey()
	for _, c := range []struct {
		name string
		key  nkeys.KeyPair
		why  string
	}{
		{"unsigned", nil, "this one was sent unsigned: only a processor with admission.allow_unsigned"},
		{"a key that is not the host's", stranger, "this one was sent signed by " + strangerPub + `: is that the public_key of host "frontdesk"'s block?`},
	} {
		t.Run(c.name, func(t *testing.T) {
			host, err := client.NewHost(connect(t, env, c.key), client.HostConfig{Name: testenv.HostName, PollInterval: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx := testContext(t)
			id := "prop-refused-" + strings.NewReplacer(" ", "-", "'", "").Replace(c.name)
			tr, err := host.Propose(ctx, proposal(t, testenv.Granted(t, testenv.Lumber(id), "sku-1001", time.Now())))
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Stop()
			env.Recorder.WaitEvent(t, schema.PhaseAdmission, schema.CodeAdmissionUnauthenticated)
			env.Quiesce(t)
			short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			o, err := tr.Await(short, client.Terminal)
			if !errors.Is(err, client.ErrTimeout) || !errors.Is(err, client.ErrNoOutcome) || !strings.Contains(err.Error(), c.why) ||
				!strings.Contains(err.Error(), "refused for authentication") {
				t.Errorf("Await = %s, %v; want ErrTimeout and ErrNoOutcome saying %q", o.Kind, err, c.why)
			}
			if _, err := host.Last(ctx, id); !errors.Is(err, client.ErrNoOutcome) {
				t.Errorf("Last: %v, want ErrNoOutcome", err)
			}
		})
	}
}

// A host with an outcome that is not the one it waits for does not get the
// no-outcome explanation: only a timeout.
func TestAwaitTimeoutAfterAnOutcome(t *testing.T) {
	env := testenv.New(t)
	host := newHost(t, env, client.HostConfig{})
	ctx := testContext(t)
	tr, err := host.Propose(ctx, proposal(t, inventory("prop-parked")))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	if _, err := tr.Await(ctx, client.Kinds(schema.KindNeedsApproval)); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := tr.Await(short, client.Terminal); !errors.Is(err, client.ErrTimeout) || errors.Is(err, client.ErrNoOutcome) {
		t.Errorf("Await after NEEDS_APPROVAL: %v, want ErrTimeout only", err)
	}
}

// A host login may publish only on its own subjects: proposing as another
// host is refused by NATS, and nothing is stored.
func TestPublishRefused(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	nc := connect(t, env, env.Host)
	host, err := client.NewHost(nc, client.HostConfig{Name: testenv.OtherHostName})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	_, err = host.Propose(ctx, proposal(t, testenv.AsOtherTenant(testenv.Lumber("prop-elsewhere"))))
	if !errors.Is(err, client.ErrPublishRefused) || errors.Is(err, client.ErrTimeout) {
		t.Errorf("Propose on another host's subject: %v, want ErrPublishRefused", err)
	}

	// A grant does not subscribe: NATS drops the publish and says so only
	// asynchronously, to the connection's error handler, which ends the
	// wait for the PubAck at once (well under the host's 5 s timeout).
	parked := schema.Outcome{Host: testenv.OtherHostName, ProposalID: "prop-elsewhere", Kind: schema.KindNeedsApproval,
		Approval: &schema.Approval{Fingerprint: "sha256:" + strings.Repeat("ab", 32)}}
	start := time.Now()
	_, err = host.Grant(ctx, parked, client.GrantOptions{AuthorizedBy: "actor:other", Assurance: schema.AssuranceSession})
	took := time.Since(start)
	t.Logf("Grant refused after %s: %v", took, err)
	if !errors.Is(err, client.ErrPublishRefused) || !errors.Is(err, nats.ErrPermissionViolation) || errors.Is(err, client.ErrTimeout) {
		t.Errorf("Grant on another host's subject: %v, want ErrPublishRefused", err)
	}
	if took > client.DefaultTimeout/2 {
		t.Errorf("Grant refused after %s, want at once (the timeout is %s)", took, client.DefaultTimeout)
	}
	// So does a direct get of another host's outcome.
	start = time.Now()
	if _, err := host.Last(ctx, "prop-elsewhere"); !errors.Is(err, client.ErrPublishRefused) || time.Since(start) > client.DefaultTimeout/2 {
		t.Errorf("Last of another host's outcome: %v after %s, want ErrPublishRefused at once", err, time.Since(start))
	}

	// The proposals stream refuses a message over max_payload_bytes + 4 KiB.
	own := newHost(t, env, client.HostConfig{})
	big := []byte(`{"proposal_id":"prop-big","pad":"` + strings.Repeat("x", 80<<10) + `"}`)
	var apiErr *jetstream.APIError
	if _, err := own.ProposeRaw(ctx, big); !errors.Is(err, client.ErrPublishRefused) || !errors.As(err, &apiErr) {
		t.Errorf("ProposeRaw of %d bytes: %v, want ErrPublishRefused with the stream's error", len(big), err)
	}
	if _, err := own.Last(ctx, "prop-big"); !errors.Is(err, client.ErrNoOutcome) {
		t.Errorf("Last: %v", err)
	}
}

// A repeat of an intent says so (SPEC §2.4): the first proposal's
// CONFIRMED is its own dispatch's, with no recorded_earlier on the wire;
// the second proposal of the same intent gets the same receipt with
// "recorded_earlier": true, live and in the outcome stream, and the Go
// client reads it as Outcome.RecordedEarlier. The provider is called once.
func TestRepeatSaysRecordedEarlier(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	inv := &provider{}
	serveInventory(t, env, inv)
	host := newHost(t, env, client.HostConfig{})
	ctx := testContext(t)
	first, again := inventory("prop-first"), inventory("prop-again")
	testenv.Set(again, "intent.payload", first["intent"].(map[string]any)["payload"])
	if a, b := testenv.FingerprintOf(t, first, "sku-1001"), testenv.FingerprintOf(t, again, "sku-1001"); a != b {
		t.Fatalf("not one intent: %s, %s", a, b)
	}
	var outs []schema.Outcome
	for _, p := range []map[string]any{first, again} {
		tr, err := host.Propose(ctx, proposal(t, testenv.Granted(t, p, "sku-1001", time.Now())))
		if err != nil {
			t.Fatal(err)
		}
		o, err := tr.Await(ctx, client.Terminal)
		tr.Stop()
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, o)
	}
	if outs[0].Kind != schema.KindConfirmed || outs[1].Kind != schema.KindConfirmed || outs[0].Receipt == nil || outs[1].Receipt == nil ||
		outs[0].Receipt.ReceiptID != outs[1].Receipt.ReceiptID {
		t.Fatalf("outcomes %+v\n%+v, want CONFIRMED with one receipt", outs[0], outs[1])
	}
	if outs[0].RecordedEarlier || !outs[1].RecordedEarlier {
		t.Errorf("recorded_earlier: first %v, repeat %v; want false, true", outs[0].RecordedEarlier, outs[1].RecordedEarlier)
	}
	if n, _ := inv.counts(); n != 1 {
		t.Errorf("%d dispatches, want 1", n)
	}
	env.Quiesce(t)
	for id, want := range map[string]bool{"prop-first": false, "prop-again": true} {
		m, err := env.JS.Stream(ctx, env.Subjects.OutcomesStream())
		if err != nil {
			t.Fatal(err)
		}
		raw, err := m.GetLastMsgForSubject(ctx, env.Subjects.Outcome(testenv.HostName, id))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(raw.Data), `"recorded_earlier":true`); got != want {
			t.Errorf("%s on the wire: %s\nwant recorded_earlier %v", id, raw.Data, want)
		}
	}
}
