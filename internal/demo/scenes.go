package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/fixtures"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// doors shows that the server admits only configured roles, each to its
// own subjects.
func (d *demo) doors() error {
	d.section("0. Only known clients connect, each to its own subjects only (SPEC §2.8)")
	if _, err := nats.Connect(d.proc.NATSURL()); err == nil {
		return errors.New("doors: an anonymous client connected")
	} else {
		d.event("an anonymous client connects           → refused: %v", err)
	}
	errs := make(chan error, 4)
	kp := d.keys[hostName]
	pub, _ := kp.PublicKey()
	nc, err := nats.Connect(d.proc.NATSURL(), nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(subjects.Inbox(pub)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		return err
	}
	defer nc.Close()
	internal := d.subj.Stage(subjects.StageDispatch, subjects.KindProposal, ">")
	if _, err := nc.SubscribeSync(internal); err != nil {
		return err
	}
	select {
	case err := <-errs:
		d.event("the host subscribes to %s → refused: %v", internal, err)
	case <-time.After(5 * time.Second):
		return errors.New("doors: the host could subscribe to an internal subject")
	}
	d.printf("           Messages between Portcullis's own stages carry a secret signature: a forged one would be rejected unread.\n")
	return nil
}

func (d *demo) lumber() error {
	d.section("1. A target is never guessed: four ways \"lumber: cedar-8ft-gradea\" fails to name one record (SPEC §3)")
	subject := "lumber: cedar-8ft-gradea"
	cases := []struct {
		pid  string
		kind schema.Kind
		code schema.Code
		p    map[string]any
	}{
		{"lumber-wrong-scope", schema.KindDenied, schema.CodeGroundingScopeMismatch,
			lumberProposal("lumber-wrong-scope", "policy-scope:inventory", []any{candidate("one", map[string]any{"resource": subject})})},
		{"lumber-missing", schema.KindNeedsClarification, schema.CodeDiscriminatorMissing,
			lumberProposal("lumber-missing", "security-domain:demo", []any{candidate("one", map[string]any{})})},
		{"lumber-mismatch", schema.KindNeedsClarification, schema.CodeDiscriminatorMismatch,
			lumberProposal("lumber-mismatch", "security-domain:demo", []any{candidate("one", map[string]any{"resource": "lumber:pine"})})},
		{"lumber-ambiguous", schema.KindNeedsClarification, schema.CodeDiscriminationAmbiguous,
			lumberProposal("lumber-ambiguous", "security-domain:demo", []any{
				candidate("one", map[string]any{"resource": " LUMBER:\tCEDAR-8FT-GRADEA "}),
				candidate("two", map[string]any{"resource": "lumber: cedar-8ft-gradea"}),
			})},
	}
	for _, c := range cases {
		if err := d.propose(c.p); err != nil {
			return err
		}
	}
	for _, c := range cases {
		o, err := d.expect(c.pid, 1, c.kind, c.code)
		if err != nil {
			return err
		}
		d.event("%s  (%s)", describe(c.pid, o), o.EffectTruth)
	}
	n, err := d.streamMsgs(d.subj.StageStream(subjects.StageAuthorization))
	if err != nil {
		return err
	}
	if n != 0 || d.inventory.Dispatches() != 0 {
		return fmt.Errorf("a grounding failure reached authorization (%d) or the provider (%d)", n, d.inventory.Dispatches())
	}
	d.printf("  All four stop before anything is authorized or sent: authorization saw 0 of them, the provider 0 dispatches.\n")
	return nil
}

func (d *demo) payments() error {
	d.section("2. \"Restart the payments API\": production and staging look alike, so it asks which")
	d.printf("  The service catalog offers two candidates: svc:payments-prod \"payments-api (production)\"\n")
	d.printf("  and svc:payments-staging \"payments-api (staging)\".\n")
	vague := paymentsProposal("restart-vague", "the payments API")
	if err := d.propose(vague); err != nil {
		return err
	}
	o, err := d.expect("restart-vague", 1, schema.KindNeedsClarification, schema.CodeDiscriminatorMismatch)
	if err != nil {
		return err
	}
	d.event("%s", describe("restart-vague", o))
	d.printf("           \"the payments API\" names neither record exactly: the assistant must ask which one;\n")
	d.printf("           a likelier-sounding production is never picked for the user.\n")

	exact := paymentsProposal("restart-exact", "payments-api (production)")
	fp, err := fixtures.FingerprintOf(exact, "svc:payments-prod")
	if err != nil {
		return err
	}
	staging, err := fixtures.FingerprintOf(exact, "svc:payments-staging")
	if err != nil {
		return err
	}
	exact["grant"] = grantFor(fp, "", schema.AssuranceSession, nil)
	if err := d.propose(exact); err != nil {
		return err
	}
	o, err = d.expect("restart-exact", 1, schema.KindConfirmed, "")
	if err != nil {
		return err
	}
	d.event("%s", describe("restart-exact", o))
	d.printf("           grounded to exactly one record; the inline grant is bound to fingerprint %s,\n", short(fp))
	d.printf("           which a grant for staging (%s) could never authorize. Provider dispatches: %d.\n", short(staging), d.infra.Dispatches())
	if d.infra.Dispatches() != 1 {
		return fmt.Errorf("payments: %d dispatches", d.infra.Dispatches())
	}
	return nil
}

func (d *demo) flight() error {
	d.section("3. Book a flight: the user approves the price, personal details go to the airline only, a timeout is settled by asking it")
	const pid = "book-sea-jfk"
	if err := d.propose(flightProposal(pid)); err != nil {
		return err
	}
	o, err := d.expect(pid, 1, schema.KindNeedsApproval, schema.CodeApprovalRequired)
	if err != nil {
		return err
	}
	ap := o.Approval
	if ap == nil || ap.ExternalSpend == nil {
		return errors.New("flight: NEEDS_APPROVAL without an approval request")
	}
	d.event("%s", describe(pid, o))
	d.printf("           approval prompt: %q  (%s %d.%02d; the request expires in %s)\n", ap.Summary, ap.ExternalSpend.Currency,
		ap.ExternalSpend.AmountMinor/100, ap.ExternalSpend.AmountMinor%100, time.Until(time.UnixMilli(ap.ExpiresAtMs)).Round(time.Second))
	grant := grantFor(ap.Fingerprint, pid, schema.AssuranceBiometric, map[string]any{"currency": "USD", "amount_minor": 24567})
	if err := d.publish(d.subj.Grant(hostName), grant); err != nil {
		return err
	}
	d.event("the traveler approves with Face ID: a signed grant (manual, biometric, ≤ USD 245.67) for %s", short(ap.Fingerprint))

	o, err = d.expect(pid, 2, schema.KindReconciliationRequired, schema.CodeAdapterTimeout)
	if err != nil {
		return err
	}
	disc := o.Receipt.Disclosure
	if disc == nil || d.resolverAsked.Load() != 1 {
		return errors.New("flight: the disclosure was not resolved once")
	}
	d.printf("           managed policy \"travel\" passed; the host's resolver released %s\n", strings.Join(disc.FieldClasses, ", "))
	d.printf("           (fictional test values, reauthenticated: %s); the connector received %s in memory.\n", disc.AuthenticationAssurance, d.connectorClasses.Load())
	d.event("%s", describe(pid, o))
	d.printf("           the connector booked it but answered after the %s timeout: the effect is unknown,\n", connectorTimeout)
	d.printf("           so Portcullis says so and never sends the order again.\n")

	o, err = d.expect(pid, 3, schema.KindConfirmed, "")
	if err != nil {
		return err
	}
	r := o.Receipt
	d.event("reconciliation %s asks duffel (read-only): confirmed, %s", r.Reconciliation.AttemptID, r.ProviderActionID)
	d.event("%s", describe(pid, o))
	d.printf("           receipt %s follows %s. Provider dispatches: %d.\n", r.ReceiptID, r.Reconciliation.PreviousReceiptID, d.duffel.Dispatches())
	if d.duffel.Dispatches() != 1 {
		return fmt.Errorf("flight: %d dispatches", d.duffel.Dispatches())
	}
	return d.checkActivity(ap.Fingerprint)
}

// checkActivity reads the flight's activity snapshot and checks that none
// of the protected values or the payload is in it, nor in any receipt.
func (d *demo) checkActivity(fp string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := d.connect(operatorName)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	bucket, err := js.KeyValue(ctx, d.subj.ActivityBucket())
	if err != nil {
		return err
	}
	var snap schema.Activity
	var raw []byte
	deadline := time.Now().Add(waitTimeout)
	for { // the snapshot is written right after the outcome
		e, err := bucket.Get(ctx, strings.TrimPrefix(fp, "sha256:"))
		if err == nil {
			raw = e.Value()
			if schema.Decode(raw, &snap) == nil && snap.Status == string(schema.StatusConfirmed) {
				break
			}
		}
		if time.Now().After(deadline) {
			return errors.New("flight: the activity record never showed the confirmation")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var all bytes.Buffer
	all.Write(raw)
	if err := d.proc.Store().ForEach(func(k, v []byte) error { all.Write(k); all.Write(v); return nil }); err != nil {
		return err
	}
	for _, s := range secrets {
		if bytes.Contains(all.Bytes(), []byte(s)) {
			return fmt.Errorf("flight: a protected value or the payload was stored")
		}
	}
	d.printf("           activity record %s[%s]: status %s, spend USD %d.%02d, decision %s by %s/%s,\n", d.subj.ActivityBucket(), short(strings.TrimPrefix(fp, "sha256:")),
		snap.Status, snap.ExternalSpend.AmountMinor/100, snap.ExternalSpend.AmountMinor%100, snap.Decision.Outcome, snap.Authorization.Method, snap.Authorization.Assurance)
	d.printf("           disclosure of %s, %d reconciliation attempt(s); no payload or protected value\n", strings.Join(snap.Disclosure.FieldClasses, ","), snap.Reconciliation.Attempts)
	d.printf("           in it or in any stored record (checked).\n")
	return nil
}

func (d *demo) operator() error {
	d.section("4. When nobody can tell whether it happened: a person checks and settles it")
	const pid = "pay-invoice-42"
	p := lumberProposal(pid, "security-domain:demo", []any{candidate("invoice:INV-0042", map[string]any{"resource": "Invoice INV-0042"})})
	in := p["intent"].(map[string]any)
	in["provider"], in["capability"], in["operation"] = "ledger", "payments.send", "pay_invoice"
	in["payload"] = map[string]any{"invoice": "INV-0042"}
	in["display"] = map[string]any{"summary": "Pay invoice INV-0042"}
	p["grounding"].(map[string]any)["subject"] = "invoice inv-0042"
	fp, err := fixtures.FingerprintOf(p, "invoice:INV-0042")
	if err != nil {
		return err
	}
	p["grant"] = grantFor(fp, "", schema.AssuranceSession, nil)
	if err := d.propose(p); err != nil {
		return err
	}
	o, err := d.expect(pid, 1, schema.KindReconciliationRequired, schema.CodeAdapterTimeout)
	if err != nil {
		return err
	}
	d.event("%s", describe(pid, o))
	for n := 1; n <= reconcileAttempts; n++ {
		o, err := d.expect(pid, n+1, schema.KindReconciliationRequired, schema.CodeProviderIndeterminate)
		if err != nil {
			return err
		}
		d.event("%s", describe(pid, o))
	}
	d.printf("           the ledger cannot say whether it paid; after %d polls the outcome is terminal\n", reconcileAttempts)
	d.printf("           and the action waits for a person.\n")
	if d.keep != nil {
		return d.leaveForOperator(pid, fp)
	}
	url := d.proc.NATSURL()
	d.printf("           The operator %q signs each request with its key (--nkey).\n", operatorName)
	if err := d.cli("reconcile", "list", "--nkey", d.opSeed, "--url", url); err != nil {
		return err
	}
	if err := d.cli("reconcile", "resolve", fp, "--absent", "--evidence", "ledger-console:payments?invoice=INV-0042", "--nkey", d.opSeed, "--url", url); err != nil {
		return err
	}
	o, err = d.expect(pid, reconcileAttempts+2, schema.KindRejected, "")
	if err != nil {
		return err
	}
	d.printf("\n")
	d.event("%s", describe(pid, o))
	if err := d.cli("receipts", "get", fp, "--nkey", d.opSeed, "--url", url); err != nil {
		return err
	}
	if d.ledger.Dispatches() != 1 {
		return fmt.Errorf("operator: %d dispatches", d.ledger.Dispatches())
	}
	return d.cli("reconcile", "list", "--nkey", d.opSeed, "--url", url)
}

// leaveForOperator is the last scene under --keep: the indeterminate
// payment and a proposal parked for approval wait for a person, who
// settles the payment in `processor console` (or with the CLI) as the
// operator "ops"; the demo reports the resolution and keeps running until
// Keep is done.
func (d *demo) leaveForOperator(pid, fp string) error {
	const parked = "restock-approval"
	p := lumberProposal(parked, "security-domain:demo", []any{candidate("sku-1001", map[string]any{"resource": "Lumber: Cedar-8ft-GradeA"})})
	fixtures.Set(p, "intent.payload", map[string]any{"quantity": 50})
	fixtures.Set(p, "intent.display", map[string]any{"summary": "Add 50 boards of cedar 8ft grade A"})
	if err := d.propose(p); err != nil {
		return err
	}
	o, err := d.expect(parked, 1, schema.KindNeedsApproval, schema.CodeApprovalRequired)
	if err != nil {
		return err
	}
	d.event("%s", describe(parked, o))
	url := d.proc.NATSURL()
	d.printf("\nThe demo keeps running (--keep) until Ctrl-C: %s waits for an operator and %s for approval.\n", pid, parked)
	d.printf("Settle the payment in the console, signed as the operator %q (open the URL it prints, then its Indeterminate page):\n\n", operatorName)
	d.printf("  processor console --url %s --nkey %s\n\n", url, d.opSeed)
	d.printf("or from the command line:\n\n")
	d.printf("  processor reconcile resolve %s --absent --evidence 'ledger-console:payments?invoice=INV-0042' \\\n      --url %s --nkey %s\n\n", fp, url, d.opSeed)
	d.printf("Waiting for the resolution…\n")
	o, err = d.outs.waitCtx(d.keep, pid, reconcileAttempts+2)
	if err != nil {
		d.printf("Stopped before %s was settled.\n", pid)
		return nil
	}
	d.event("%s", describe(pid, o))
	if r := o.Receipt; r != nil && r.Reconciliation != nil {
		d.printf("           settled by the operator %s, evidence %s. Provider dispatches: %d.\n", orUnnamed(r.Reconciliation.Operator), strings.Join(r.EvidenceRefs, " "), d.ledger.Dispatches())
	}
	d.printf("Still running: Ctrl-C stops the demo and removes its data.\n")
	<-d.keep.Done()
	return nil
}

func orUnnamed(operator string) string {
	if operator == "" {
		return "(unnamed: an unsigned request)"
	}
	return operator
}
