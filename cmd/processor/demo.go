package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/keyfile"
	"github.com/portcullis/portcullis/internal/trust"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// demoHost is the demo's one host: its name is the <h> of its subjects.
const demoHost = "demo-host"

// The demo's roles besides its host: an operator, the airline's connector
// and the host's protected-profile resolver.
const (
	demoOperator  = "ops"
	demoConnector = "duffel-connector"
	demoResolver  = "profiles"
)

// Demo timing: short enough that the whole story takes seconds.
const (
	demoReconcileInterval = 300 * time.Millisecond
	demoReconcileAttempts = 3
	demoConnectorTimeout  = time.Second
	demoWait              = 30 * time.Second
)

// The demo's fictional protected profile. The resolver hands these to the
// connector in memory; the demo checks afterwards that none of them (nor
// the payload) was stored anywhere it can see.
var demoProfile = map[string]string{
	schema.ClassLegalIdentity:  `{"given_name":"Testy","family_name":"Fixturesson","gender":"f"}`,
	schema.ClassBirthDate:      `"1990-01-01"`,
	schema.ClassContactDetails: `{"email":"testy.fixturesson@example.invalid","phone":"+1 555 0100"}`,
}

var demoSecrets = []string{"Testy", "Fixturesson", "1990-01-01", "testy.fixturesson@example.invalid", "+1 555 0100", "off_0000SEAJFK0805"}

// cmdDemo plays the seed scenarios end to end on a throwaway embedded
// server (random loopback port, temporary data directory) with in-process
// provider connectors and disclosure resolver, prints a timeline, and
// leaves nothing behind.
func cmdDemo(c *cmdline, args []string, _ io.Reader) int {
	stdout, stderr := c.stdout, c.stderr
	verbose := c.fs.Bool("verbose", false, "also print the processor's JSON log on standard error")
	var level levelFlag
	level.register(c, "with --verbose (which it implies): the least severe `LEVEL` logged: debug, info, warn or error")
	if _, code, done := c.parse(args); done {
		return code
	}
	var logLevel slog.Leveler // nil: no log
	if *verbose || c.set("log-level") {
		logLevel = &level
	}
	d, err := startDemo(stdout, stderr, logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "processor demo:", err)
		return 1
	}
	err = d.play()
	if cerr := d.close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(stdout)
		fmt.Fprintln(stderr, "processor demo: FAILED:", err)
		return 1
	}
	fmt.Fprintln(stdout, "\nEvery scenario ended as it should. The demo server is stopped and its temporary data directory removed.")
	fmt.Fprintln(stdout, "Next: `processor run --dev` runs Portcullis for real on 127.0.0.1:4222 (see README.md).")
	return 0
}

type demo struct {
	out   io.Writer
	start time.Time
	dir   string
	host  nkeys.KeyPair
	keys  map[string]nkeys.KeyPair // every role's key, by name
	// opSeed is the seed file of the operator "ops" who settles the
	// indeterminate payment; the CLI signs with it (--nkey).
	opSeed string
	proc   *engine.Processor
	nc     *nats.Conn
	js     jetstream.JetStream
	subj   subjects.Subjects
	outs   *demoOutcomes

	inventory, infra, ledger, duffel *adapters.Fake
	stops                            []func()
	resolverAsked                    atomic.Int32
	connectorClasses                 atomic.Value // string
}

func startDemo(stdout, stderr io.Writer, logLevel slog.Leveler) (*demo, error) {
	d := &demo{out: stdout, start: time.Now()}
	if err := d.setUp(stderr, logLevel); err != nil {
		_ = d.close()
		return nil, err
	}
	return d, nil
}

func (d *demo) setUp(stderr io.Writer, logLevel slog.Leveler) (err error) {
	if d.dir, err = os.MkdirTemp("", "portcullis-demo-"); err != nil {
		return err
	}
	if d.host, err = nkeys.CreateUser(); err != nil {
		return err
	}
	pub, _ := d.host.PublicKey()
	op, err := nkeys.CreateUser()
	if err != nil {
		return err
	}
	opPub, _ := op.PublicKey()
	d.opSeed = filepath.Join(d.dir, "operator.nk")
	if err := keyfile.WriteSeed(d.opSeed, op); err != nil {
		return err
	}
	cfg := config.Defaults()
	cfg.NATS.Listen = "127.0.0.1:0"
	cfg.NATS.StoreDir = filepath.Join(d.dir, "nats")
	cfg.Store.Dir = filepath.Join(d.dir, "store")
	cfg.Metrics.Listen = ""
	// Authentication on, as outside --dev: each role logs in with its key.
	d.keys = map[string]nkeys.KeyPair{demoHost: d.host}
	for _, name := range []string{demoConnector, demoResolver} {
		if d.keys[name], err = nkeys.CreateUser(); err != nil {
			return err
		}
	}
	connPub, _ := d.keys[demoConnector].PublicKey()
	resPub, _ := d.keys[demoResolver].PublicKey()
	cfg.Connectors = []config.Connector{{Name: demoConnector, PublicKey: connPub, Providers: []string{"duffel"}}}
	cfg.Resolvers = []config.Role{{Name: demoResolver, PublicKey: resPub}}
	cfg.Hosts = []config.Host{{Name: demoHost, PublicKey: pub, Tenants: []string{"tenant:demo", "tenant:acme", "tenant:traveler"}}}
	cfg.Tenants = []config.Tenant{
		{Ref: "tenant:demo", SecurityDomains: []string{"security-domain:demo"}},
		{Ref: "tenant:acme", SecurityDomains: []string{"security-domain:acme-infra"}},
		{Ref: "tenant:traveler", SecurityDomains: []string{"security-domain:traveler"}},
	}
	cfg.Operators = []config.Role{{Name: demoOperator, PublicKey: opPub}}
	d.keys[demoOperator] = op
	fake := func(name string) config.Provider {
		return config.Provider{Name: name, Adapter: config.AdapterFake, Timeout: demoConnectorTimeout, UnavailableRetry: 5 * time.Second, MaxInFlight: config.DefaultMaxInFlight}
	}
	cfg.Providers = []config.Provider{fake("inventory"), fake("infra"), fake("ledger"),
		{Name: "duffel", Adapter: config.AdapterNATS, Timeout: demoConnectorTimeout, UnavailableRetry: 5 * time.Second, MaxInFlight: config.DefaultMaxInFlight}}
	cfg.Policies = []config.ManagedPolicy{{ // seed 003's organization policy, for the traveler's domain
		Name: "travel", SecurityDomains: []string{"security-domain:traveler"},
		AutomaticApprovalForbidden: true, LiveActionsForbidden: true,
		AllowedProviders: []string{"duffel"}, AllowedCapabilities: []string{"flights.book"}, AllowedEnvironments: []string{"test"},
		MinimumAuthenticationAssurance: schema.AssuranceBiometric, MaxExternalSpend: map[string]int64{"USD": 50000},
	}}
	cfg.Reconciliation.Interval = demoReconcileInterval
	cfg.Reconciliation.MaxAttempts = demoReconcileAttempts

	d.inventory = adapters.NewFake("inventory", config.FakeScript{})
	d.infra = adapters.NewFake("infra", config.FakeScript{})
	d.ledger = adapters.NewFake("ledger", config.FakeScript{})
	d.ledger.OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{}, fmt.Errorf("ledger: connection reset after sending: %w", adapters.ErrTimeout)
	})
	d.ledger.OnReconcile(func(context.Context, schema.ReconcileRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: schema.ReplyIndeterminate, ErrorCode: "LEDGER_SEARCH_UNAVAILABLE"}, nil
	})

	log := slog.New(slog.DiscardHandler)
	if logLevel != nil {
		log = newLog(stderr, logLevel)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d.proc, err = engine.Start(ctx, engine.Options{
		Config: cfg, Log: log, DrainTimeout: 10 * time.Second,
		Adapters: map[string]adapters.Adapter{"inventory": d.inventory, "infra": d.infra, "ledger": d.ledger},
	})
	if err != nil {
		return err
	}
	d.subj = d.proc.Subjects()
	if d.nc, err = d.connect(demoHost); err != nil {
		return err
	}
	if d.js, err = jetstream.New(d.nc); err != nil {
		return err
	}
	if d.outs, err = recordOutcomes(d.nc, d.subj); err != nil {
		return err
	}
	if err := d.serveResolver(); err != nil {
		return err
	}
	if err := d.serveDuffel(); err != nil {
		return err
	}
	return nil
}

// connect logs in to the demo's server as one of its roles, with replies
// under the role's own inbox.
func (d *demo) connect(role string) (*nats.Conn, error) {
	kp := d.keys[role]
	pub, _ := kp.PublicKey()
	nc, err := nats.Connect(d.proc.NATSURL(), nats.Name("portcullis-demo-"+role),
		nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(subjects.Inbox(pub)))
	if err != nil {
		return nil, fmt.Errorf("connect as %s: %w", role, err)
	}
	d.stops = append(d.stops, nc.Close)
	return nc, nil
}

func (d *demo) close() error {
	for i := len(d.stops) - 1; i >= 0; i-- {
		d.stops[i]()
	}
	d.stops = nil
	if d.nc != nil {
		d.nc.Close()
	}
	var err error
	if d.proc != nil {
		err = d.proc.Close()
		d.proc = nil
	}
	if d.dir != "" {
		if rerr := os.RemoveAll(d.dir); err == nil {
			err = rerr
		}
		d.dir = ""
	}
	return err
}

// serveResolver is the host's protected-profile resolver: it echoes the
// request's bindings and releases the fictional profile at biometric
// assurance (the traveler just reauthenticated).
func (d *demo) serveResolver() error {
	values := map[string]jsontext.Value{}
	for c, v := range demoProfile {
		values[c] = jsontext.Value(v)
	}
	nc, err := d.connect(demoResolver)
	if err != nil {
		return err
	}
	sub, err := nc.Subscribe(d.subj.DisclosureResolve(), func(m *nats.Msg) {
		var req schema.DisclosureRequest
		if schema.Decode(m.Data, &req) != nil {
			return
		}
		d.resolverAsked.Add(1)
		reauth := req.RequireReauthentication
		vals := map[string]jsontext.Value{}
		for _, c := range req.FieldClasses {
			vals[c] = values[c]
		}
		_ = m.Respond(schema.MustMarshal(schema.DisclosureReply{
			Schema: req.Schema, Fingerprint: req.Fingerprint, Provider: req.Provider, Operation: req.Operation,
			Environment: req.Environment, Recipient: req.Recipient, Purpose: req.Purpose, FieldClasses: req.FieldClasses,
			Source: req.Source, RequireReauthentication: &reauth, AuthorizationMethod: req.AuthorizationMethod,
			GrantAuthenticationAssurance: req.GrantAuthenticationAssurance,
			AuthenticationAssurance:      schema.AssuranceBiometric, ProtectedValues: vals,
		}))
	})
	if err != nil {
		return err
	}
	d.stops = append(d.stops, func() { _ = sub.Unsubscribe() })
	return nc.Flush()
}

// serveDuffel is the airline connector, a separate NATS responder: it books
// the order, but its answer comes after the processor's timeout. Asked
// later (read-only), it finds the order.
func (d *demo) serveDuffel() error {
	d.duffel = adapters.NewFake("duffel", config.FakeScript{})
	d.duffel.OnDispatch(func(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
		var classes []string
		if pd := req.ProtectedDisclosure; pd != nil {
			for _, c := range pd.FieldClasses {
				if len(pd.Values[c]) > 0 {
					classes = append(classes, c)
				}
			}
		}
		d.connectorClasses.Store(strings.Join(classes, ", "))
		select { // the order is placed; the reply is slower than the timeout
		case <-time.After(demoConnectorTimeout + 500*time.Millisecond):
		case <-ctx.Done():
		}
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "ord_0000demo"}, nil
	})
	d.duffel.OnReconcile(func(context.Context, schema.ReconcileRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "ord_0000demo", EvidenceRefs: []string{"duffel:orders/ord_0000demo"}}, nil
	})
	nc, err := d.connect(demoConnector)
	if err != nil {
		return err
	}
	stop, err := d.duffel.Serve(nc, d.subj)
	if err != nil {
		return err
	}
	d.stops = append(d.stops, stop)
	return nil
}

func (d *demo) printf(format string, args ...any) { fmt.Fprintf(d.out, format, args...) }

// event prints a timeline line.
func (d *demo) event(format string, args ...any) {
	fmt.Fprintf(d.out, "  %7s  %s\n", fmt.Sprintf("+%.2fs", time.Since(d.start).Seconds()), fmt.Sprintf(format, args...))
}

func (d *demo) section(title string) {
	d.printf("\n%s\n%s\n", title, strings.Repeat("─", len([]rune(title))))
}

func (d *demo) play() error {
	d.printf("Portcullis demo: an embedded NATS JetStream server on %s, a temporary data directory,\n", d.proc.NATSURL())
	d.printf("in-process provider connectors and a disclosure resolver. The server requires every client to\n")
	d.printf("log in: the host %q, the connector %q, the resolver %q and the operator %q\n", demoHost, demoConnector, demoResolver, demoOperator)
	d.printf("each have a throwaway key and their own NATS account; the host signs proposals and grants with its key.\n")
	d.printf("Reconciliation polls every %s (doubling), at most %d times.\n", demoReconcileInterval, demoReconcileAttempts)
	for _, step := range []func() error{d.doors, d.lumber, d.payments, d.flight, d.operator} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// doors shows that the server admits only configured roles, each to its
// own subjects.
func (d *demo) doors() error {
	d.section("0. Who may connect (SPEC §2.8)")
	if _, err := nats.Connect(d.proc.NATSURL()); err == nil {
		return errors.New("doors: an anonymous client connected")
	} else {
		d.event("an anonymous client connects           → refused: %v", err)
	}
	errs := make(chan error, 4)
	kp := d.keys[demoHost]
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
	d.printf("           Internal hand-offs are sealed too (HMAC): a forged one would be rejected unread.\n")
	return nil
}

// publish signs and publishes a proposal (or grant) body.
func (d *demo) publish(subject string, v any) error {
	body := schema.MustMarshal(v)
	hdr, err := trust.Sign(d.host, body)
	if err != nil {
		return err
	}
	m := nats.NewMsg(subject)
	m.Data, m.Header = body, hdr
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = d.js.PublishMsg(ctx, m)
	return err
}

func (d *demo) propose(p map[string]any) error {
	return d.publish(d.subj.Proposal(demoHost), p)
}

// fingerprintOf is the fingerprint a proposal grounds to with referent.
func fingerprintOf(p map[string]any, referent string) (string, error) {
	pr, err := schema.DecodeProposal(schema.MustMarshal(p), 0)
	if err != nil {
		return "", err
	}
	r, err := fingerprint.Of(pr, referent)
	return r.Fingerprint, err
}

// wait waits for the n-th (1-based) outcome of a proposal.
func (d *demo) wait(pid string, n int) (schema.Outcome, error) { return d.outs.wait(pid, n, demoWait) }

// expect waits for the n-th outcome and checks its kind (and first code).
func (d *demo) expect(pid string, n int, kind schema.Kind, code schema.Code) (schema.Outcome, error) {
	o, err := d.wait(pid, n)
	if err != nil {
		return o, err
	}
	if o.Kind != kind || (code != "" && (len(o.Incidents) == 0 || o.Incidents[0].Code != code)) {
		return o, fmt.Errorf("%s: got %s %v, want %s %s", pid, o.Kind, codes(o), kind, code)
	}
	return o, nil
}

func codes(o schema.Outcome) []string {
	var out []string
	for _, i := range o.Incidents {
		out = append(out, string(i.Code))
	}
	return out
}

// describe is one outcome as a timeline line.
func describe(pid string, o schema.Outcome) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-22s → %-23s", pid, o.Kind)
	if c := codes(o); len(c) > 0 {
		fmt.Fprintf(&b, " %s", strings.Join(c, " + "))
	}
	if o.Terminal && o.Kind == schema.KindReconciliationRequired {
		b.WriteString(" (terminal)")
	}
	if o.Referent != nil {
		fmt.Fprintf(&b, "  referent %s", *o.Referent)
	}
	if r := o.Receipt; r != nil {
		fmt.Fprintf(&b, "  receipt %s %s", r.ReceiptID, r.Status)
	}
	return b.String()
}

func short(fp string) string {
	if len(fp) > 19 {
		return fp[:19] + "…"
	}
	return fp
}

// lumberProposal is seed 000's lumber adjustment with a grounding case.
func lumberProposal(pid, scope string, candidates []any) map[string]any {
	return map[string]any{
		"schema": schema.SchemaProposal, "proposal_id": pid,
		"context": map[string]any{
			"tenant":          map[string]any{"tenant_ref": "tenant:demo", "security_domain_ref": "security-domain:demo"},
			"actor":           map[string]any{"actor_ref": "actor:demo", "assurance": "host-session"},
			"authorization":   map[string]any{"scope_ref": "policy-scope:inventory", "policy_revision": "policy:7"},
			"provider":        map[string]any{"account_ref": "inventory:fixture"},
			"delivery":        map[string]any{"delivery_id": "delivery:" + pid, "source": "test"},
			"host_invocation": map[string]any{"invocation_id": "invocation:diagnostics"},
		},
		"intent": map[string]any{
			"provider": "inventory", "capability": "inventory.adjust", "operation": "adjust_stock", "environment": "test",
			"payload": map[string]any{"quantity": 20}, "external_spend": nil, "protected_disclosure": nil,
			"display": map[string]any{"summary": "Add 20 boards of cedar 8ft grade A"},
		},
		"grounding": map[string]any{"subject": "lumber: cedar-8ft-gradea", "scope": scope, "observation_ref": "catalog:12", "candidates": candidates},
		"grant":     nil,
	}
}

func candidate(referent string, attrs map[string]any) map[string]any {
	return map[string]any{"referent": referent, "source": "authoritative", "attributes": attrs, "evidence_refs": []string{}}
}

func (d *demo) lumber() error {
	d.section("1. Grounding failure matrix (seed 000): \"lumber: cedar-8ft-gradea\"")
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
	d.printf("  All four fail closed before authorization: authorization saw 0 of them, the provider 0 dispatches.\n")
	return nil
}

func (d *demo) streamMsgs(stream string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := d.proc.StreamInfo(ctx, stream) // an internal stream: only the processor reads it

	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// paymentsProposal is seed 000's "restart the payments API" (the
// fingerprint test vector's proposal) with a subject.
func paymentsProposal(pid, subject string) map[string]any {
	return map[string]any{
		"schema": schema.SchemaProposal, "proposal_id": pid,
		"context": map[string]any{
			"tenant":          map[string]any{"tenant_ref": "tenant:acme", "security_domain_ref": "security-domain:acme-infra"},
			"actor":           map[string]any{"actor_ref": "actor:oncall-7", "assurance": "host-session"},
			"authorization":   map[string]any{"scope_ref": "policy-scope:ops", "policy_revision": "policy:7"},
			"provider":        map[string]any{"account_ref": "inventory:fixture"},
			"delivery":        map[string]any{"delivery_id": "delivery:" + pid, "source": "voice"},
			"host_invocation": map[string]any{"invocation_id": "invocation:42"},
		},
		"intent": map[string]any{
			"provider": "infra", "capability": "service.restart", "operation": "restart", "environment": "live",
			"payload": map[string]any{"service": "payments-api", "drain_seconds": 30}, "external_spend": nil, "protected_disclosure": nil,
			"display": map[string]any{"summary": "Restart the payments API (production)"},
		},
		"grounding": map[string]any{
			"subject": subject, "scope": "security-domain:acme-infra", "observation_ref": "catalog:svc@r981",
			"candidates": []any{
				map[string]any{"referent": "svc:payments-prod", "source": "service-catalog",
					"attributes":    map[string]any{"resource": "payments-api (production)", "environment": "production"},
					"evidence_refs": []string{"catalog:svc@r981#payments-prod"}},
				map[string]any{"referent": "svc:payments-staging", "source": "service-catalog",
					"attributes":    map[string]any{"resource": "payments-api (staging)", "environment": "staging"},
					"evidence_refs": []string{"catalog:svc@r981#payments-staging"}},
			},
		},
		"grant": nil,
	}
}

func grantFor(fp, pid string, assurance string, spend any) map[string]any {
	now := time.Now().UnixMilli()
	g := map[string]any{
		"schema": schema.SchemaGrant, "intent_fingerprint": fp, "authorized_by": "actor:demo-approver",
		"authorization_method": schema.MethodManual, "authentication_assurance": assurance,
		"issued_at_ms": now, "expires_at_ms": now + 300_000, "max_external_spend": spend,
	}
	if pid != "" {
		g["proposal_id"] = pid
	}
	return g
}

func (d *demo) payments() error {
	d.section("2. \"Restart the payments API\" (seed 000): production and staging look alike")
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
	fp, err := fingerprintOf(exact, "svc:payments-prod")
	if err != nil {
		return err
	}
	staging, err := fingerprintOf(exact, "svc:payments-staging")
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

func flightProposal(pid string) map[string]any {
	return map[string]any{
		"schema": schema.SchemaProposal, "proposal_id": pid,
		"context": map[string]any{
			"tenant":          map[string]any{"tenant_ref": "tenant:traveler", "security_domain_ref": "security-domain:traveler"},
			"actor":           map[string]any{"actor_ref": "actor:traveler-1", "assurance": "host-session"},
			"authorization":   map[string]any{"scope_ref": "policy-scope:travel", "policy_revision": "policy:3"},
			"provider":        map[string]any{"account_ref": "duffel:test-account"},
			"delivery":        map[string]any{"delivery_id": "delivery:" + pid, "source": "chat"},
			"host_invocation": map[string]any{"invocation_id": "invocation:book-1"},
		},
		"intent": map[string]any{
			"provider": "duffel", "capability": "flights.book", "operation": "create_order", "environment": "test",
			"payload":        map[string]any{"offer_id": "off_0000SEAJFK0805", "passengers": 1},
			"external_spend": map[string]any{"currency": "USD", "amount_minor": 24567},
			"protected_disclosure": map[string]any{
				"field_classes": []string{"legal_identity", "birth_date", "contact_details"},
				"recipient":     "Duffel", "purpose": "Create the exact approved order.",
				"source": schema.SourceFictionalTestFixture, "require_reauthentication": true,
			},
			"display": map[string]any{"summary": "Book SEA→JFK for $245.67?"},
		},
		"grounding": map[string]any{
			"subject": "offer: sea-jfk 08:05", "scope": "security-domain:traveler", "observation_ref": "offers:search-7",
			"candidates": []any{map[string]any{"referent": "offer:sea-jfk-0805", "source": "authoritative",
				"attributes": map[string]any{"resource": "Offer: SEA-JFK 08:05"}, "evidence_refs": []string{"offers:search-7#0"}}},
		},
		"grant":     nil,
		"requester": map[string]any{"agent_id": "agent:travel-assistant", "model_provider": "example", "model_id": "m-1", "session_id": "s-1", "run_id": "r-1"},
	}
}

func (d *demo) flight() error {
	d.section("3. Book a flight (seed 003): spend, approval, protected disclosure, a timeout, reconciliation")
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
	if err := d.publish(d.subj.Grant(demoHost), grant); err != nil {
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
	d.printf("           the connector booked it but answered after the %s timeout: the effect is unknown,\n", demoConnectorTimeout)
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
	nc, err := d.connect(demoOperator)
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
	deadline := time.Now().Add(demoWait)
	for { // the snapshot is written right after the outcome
		e, err := bucket.Get(ctx, schema.FingerprintKey(fp))
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
	for _, s := range demoSecrets {
		if bytes.Contains(all.Bytes(), []byte(s)) {
			return fmt.Errorf("flight: a protected value or the payload was stored")
		}
	}
	d.printf("           activity record %s[%s]: status %s, spend USD %d.%02d, decision %s by %s/%s,\n", d.subj.ActivityBucket(), short(schema.FingerprintKey(fp)),
		snap.Status, snap.ExternalSpend.AmountMinor/100, snap.ExternalSpend.AmountMinor%100, snap.Decision.Outcome, snap.Authorization.Method, snap.Authorization.Assurance)
	d.printf("           disclosure of %s, %d reconciliation attempt(s); no payload or protected value\n", strings.Join(snap.Disclosure.FieldClasses, ","), snap.Reconciliation.Attempts)
	d.printf("           in it or in any stored record (checked).\n")
	return nil
}

func (d *demo) operator() error {
	d.section("4. When nobody can tell: reconciliation gives up and an operator settles it")
	const pid = "pay-invoice-42"
	p := lumberProposal(pid, "security-domain:demo", []any{candidate("invoice:INV-0042", map[string]any{"resource": "Invoice INV-0042"})})
	in := p["intent"].(map[string]any)
	in["provider"], in["capability"], in["operation"] = "ledger", "payments.send", "pay_invoice"
	in["payload"] = map[string]any{"invoice": "INV-0042"}
	in["display"] = map[string]any{"summary": "Pay invoice INV-0042"}
	p["grounding"].(map[string]any)["subject"] = "invoice inv-0042"
	fp, err := fingerprintOf(p, "invoice:INV-0042")
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
	for n := 1; n <= demoReconcileAttempts; n++ {
		o, err := d.expect(pid, n+1, schema.KindReconciliationRequired, schema.CodeProviderIndeterminate)
		if err != nil {
			return err
		}
		d.event("%s", describe(pid, o))
	}
	d.printf("           the ledger cannot say whether it paid; after %d polls the outcome is terminal\n", demoReconcileAttempts)
	d.printf("           and the action waits for a person.\n")
	url := d.proc.NATSURL()
	d.printf("           The operator %q signs each request with its key (--nkey).\n", demoOperator)
	if err := d.cli("reconcile", "list", "--nkey", d.opSeed, "--url", url); err != nil {
		return err
	}
	if err := d.cli("reconcile", "resolve", fp, "--absent", "--evidence", "ledger-console:payments?invoice=INV-0042", "--nkey", d.opSeed, "--url", url); err != nil {
		return err
	}
	o, err = d.expect(pid, demoReconcileAttempts+2, schema.KindRejected, "")
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

// cli runs an operator command as a user would, printing it and its output.
func (d *demo) cli(args ...string) error {
	shown := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--url" || (i > 0 && args[i-1] == "--url") {
			continue
		}
		if i > 0 && args[i-1] == "--nkey" {
			a = filepath.Base(a)
		}
		if strings.ContainsAny(a, "?&") {
			a = "'" + a + "'"
		}
		shown = append(shown, a)
	}
	d.printf("\n  $ processor %s\n", strings.Join(shown, " "))
	var out, errb bytes.Buffer
	code := run(args, nil, &out, &errb)
	for _, line := range strings.Split(strings.TrimRight(out.String()+errb.String(), "\n"), "\n") {
		d.printf("%s\n", strings.TrimRight("    "+line, " "))
	}
	if code != 0 {
		return fmt.Errorf("processor %s: exit %d", args[0], code)
	}
	return nil
}

// demoOutcomes records every outcome by proposal.
type demoOutcomes struct {
	mu   sync.Mutex
	cond *sync.Cond
	by   map[string][]schema.Outcome
}

func recordOutcomes(nc *nats.Conn, s subjects.Subjects) (*demoOutcomes, error) {
	r := &demoOutcomes{by: map[string][]schema.Outcome{}}
	r.cond = sync.NewCond(&r.mu)
	_, err := nc.Subscribe(s.HostOutcomes(demoHost), func(m *nats.Msg) { // the host hears its own outcomes
		var o schema.Outcome
		if schema.Decode(m.Data, &o) != nil {
			return
		}
		r.mu.Lock()
		r.by[o.ProposalID] = append(r.by[o.ProposalID], o)
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	return r, nc.Flush()
}

func (r *demoOutcomes) wait(pid string, n int, timeout time.Duration) (schema.Outcome, error) {
	deadline := time.Now().Add(timeout)
	t := time.AfterFunc(timeout, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
	defer t.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.by[pid]) < n {
		if time.Now().After(deadline) {
			return schema.Outcome{}, fmt.Errorf("%s: outcome %d did not arrive within %s (got %d)", pid, n, timeout, len(r.by[pid]))
		}
		r.cond.Wait()
	}
	return r.by[pid][n-1], nil
}
