// Package demo is `processor demo`: the seed scenarios played end to end
// against a real processor on a throwaway embedded NATS server with
// authentication on, narrated as a timeline. cmd/processor parses the flags
// and calls Run; the proposal fixtures it shares with testenv live in
// internal/fixtures.
//
// It owns the demo's scenarios and narration; it assembles a processor
// through internal/engine and imports no stage.
package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/keyfile"
	"github.com/portcullis/portcullis/schema/trust"
	"github.com/portcullis/portcullis/stages/policy"
	"github.com/portcullis/portcullis/subjects"
)

// hostName is the demo's one host: its name is the <h> of its subjects.
const hostName = "demo-host"

// The demo's roles besides its host: an operator, the airline's connector
// and the host's protected-profile resolver.
const (
	operatorName  = "ops"
	connectorName = "duffel-connector"
	resolverName  = "profiles"
)

// Demo timing: short enough that the whole story takes seconds.
const (
	reconcileInterval = 300 * time.Millisecond
	reconcileAttempts = 3
	connectorTimeout  = time.Second
	waitTimeout       = 30 * time.Second
)

// The demo's fictional protected profile. The resolver hands these to the
// connector in memory; the demo checks afterwards that none of them (nor
// the payload) was stored anywhere it can see.
var profile = map[string]string{
	schema.ClassLegalIdentity:  `{"given_name":"Testy","family_name":"Fixturesson","gender":"f"}`,
	schema.ClassBirthDate:      `"1990-01-01"`,
	schema.ClassContactDetails: `{"email":"testy.fixturesson@example.invalid","phone":"+1 555 0100"}`,
}

var secrets = []string{"Testy", "Fixturesson", "1990-01-01", "testy.fixturesson@example.invalid", "+1 555 0100", "off_0000SEAJFK0805"}

// Options configure Run.
type Options struct {
	// Stdout receives the timeline.
	Stdout io.Writer
	// Log receives the processor's log; nil: none.
	Log *slog.Logger
	// CLI runs a `processor` command line, returning its exit status: the
	// operator's commands the last scene shows, run as a user would.
	CLI func(args []string, stdout, stderr io.Writer) int
	// Keep, when not nil, keeps the demo running until it is done (`processor
	// demo --keep`, until Ctrl-C): the last scene's indeterminate action
	// is left for an operator to settle — in `processor console` or with
	// `processor reconcile resolve`, signed with the demo operator's key,
	// whose seed file the demo prints with the command lines — and one more
	// proposal is left waiting for approval. Run returns once Keep is done.
	Keep context.Context
}

// Run plays the seed scenarios end to end on a throwaway embedded server
// (random loopback port, temporary data directory) with in-process
// provider connectors and disclosure resolver, prints a timeline, and
// leaves nothing behind. It returns an error if the demo could not start,
// or (after a blank line on Stdout) "FAILED: ..." if a scene did not end
// as it should.
func Run(o Options) error {
	d, err := start(o)
	if err != nil {
		return err
	}
	err = d.play()
	if cerr := d.close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(o.Stdout)
		return fmt.Errorf("FAILED: %w", err)
	}
	if o.Keep != nil {
		fmt.Fprintln(o.Stdout, "\nThe demo server is stopped and its temporary data directory removed.")
		return nil
	}
	fmt.Fprintln(o.Stdout, "\nEvery scenario ended as it should. The demo server is stopped and its temporary data directory removed.")
	fmt.Fprintln(o.Stdout, "Next: `processor run --dev` runs Portcullis for real on 127.0.0.1:4222 (see docs/running.md);")
	fmt.Fprintln(o.Stdout, "`processor demo --keep` leaves the last scene's action for you to settle in `processor console`.")
	return nil
}

// Secrets are the fictional protected values and the payload's offer id:
// nothing the demo prints or stores may contain one.
func Secrets() []string { return slices.Clone(secrets) }

type demo struct {
	out    io.Writer
	runCLI func(args []string, stdout, stderr io.Writer) int
	keep   context.Context // Options.Keep
	start  time.Time
	dir    string
	host   nkeys.KeyPair
	keys   map[string]nkeys.KeyPair // every role's key, by name
	// opSeed is the seed file of the operator "ops" who settles the
	// indeterminate payment; the CLI signs with it (--nkey).
	opSeed string
	proc   *engine.Processor
	nc     *nats.Conn
	js     jetstream.JetStream
	subj   subjects.Subjects
	outs   *outcomes

	inventory, infra, ledger, duffel *adapters.Fake
	stops                            []func()
	resolverAsked                    atomic.Int32
	connectorClasses                 atomic.Value // string
}

func start(o Options) (*demo, error) {
	d := &demo{out: o.Stdout, start: time.Now(), runCLI: o.CLI, keep: o.Keep}
	if err := d.setUp(o.Log); err != nil {
		_ = d.close()
		return nil, err
	}
	return d, nil
}

func (d *demo) setUp(log *slog.Logger) (err error) {
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
	d.keys = map[string]nkeys.KeyPair{hostName: d.host}
	for _, name := range []string{connectorName, resolverName} {
		if d.keys[name], err = nkeys.CreateUser(); err != nil {
			return err
		}
	}
	connPub, _ := d.keys[connectorName].PublicKey()
	resPub, _ := d.keys[resolverName].PublicKey()
	cfg.Connectors = []config.Connector{{Name: connectorName, PublicKey: connPub, Providers: []string{"duffel"}}}
	cfg.Resolvers = []config.Role{{Name: resolverName, PublicKey: resPub}}
	cfg.Hosts = []trust.Host{{Name: hostName, PublicKey: pub, Tenants: []string{"tenant:demo", "tenant:acme", "tenant:traveler"}}}
	cfg.Tenants = []trust.Tenant{
		{Ref: "tenant:demo", SecurityDomains: []string{"security-domain:demo"}},
		{Ref: "tenant:acme", SecurityDomains: []string{"security-domain:acme-infra"}},
		{Ref: "tenant:traveler", SecurityDomains: []string{"security-domain:traveler"}},
	}
	cfg.Operators = []config.Role{{Name: operatorName, PublicKey: opPub}}
	d.keys[operatorName] = op
	fake := func(name string) config.Provider {
		return config.Provider{Name: name, Adapter: adapters.KindFake, Timeout: connectorTimeout, UnavailableRetry: 5 * time.Second, MaxInFlight: config.DefaultMaxInFlight}
	}
	cfg.Providers = []config.Provider{fake("inventory"), fake("infra"), fake("ledger"),
		{Name: "duffel", Adapter: adapters.KindNATS, Timeout: connectorTimeout, UnavailableRetry: 5 * time.Second, MaxInFlight: config.DefaultMaxInFlight}}
	cfg.Policies = []policy.ManagedPolicy{{ // seed 003's organization policy, for the traveler's domain
		Name: "travel", SecurityDomains: []string{"security-domain:traveler"},
		AutomaticApprovalForbidden: true, LiveActionsForbidden: true,
		AllowedProviders: []string{"duffel"}, AllowedCapabilities: []string{"flights.book"}, AllowedEnvironments: []string{"test"},
		MinimumAuthenticationAssurance: schema.AssuranceBiometric, MaxExternalSpend: map[string]int64{"USD": 50000},
	}}
	cfg.Reconciliation.Interval = reconcileInterval
	cfg.Reconciliation.MaxAttempts = reconcileAttempts

	d.inventory = adapters.NewFake("inventory", adapters.FakeScript{})
	d.infra = adapters.NewFake("infra", adapters.FakeScript{})
	d.ledger = adapters.NewFake("ledger", adapters.FakeScript{})
	d.ledger.OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{}, fmt.Errorf("ledger: connection reset after sending: %w", adapters.ErrTimeout)
	})
	d.ledger.OnReconcile(func(context.Context, schema.ReconcileRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: schema.ReplyIndeterminate, ErrorCode: "LEDGER_SEARCH_UNAVAILABLE"}, nil
	})

	if log == nil {
		log = slog.New(slog.DiscardHandler)
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
	if d.nc, err = d.connect(hostName); err != nil {
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
	for c, v := range profile {
		values[c] = jsontext.Value(v)
	}
	nc, err := d.connect(resolverName)
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
	d.duffel = adapters.NewFake("duffel", adapters.FakeScript{})
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
		case <-time.After(connectorTimeout + 500*time.Millisecond):
		case <-ctx.Done():
		}
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "ord_0000demo"}, nil
	})
	d.duffel.OnReconcile(func(context.Context, schema.ReconcileRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "ord_0000demo", EvidenceRefs: []string{"duffel:orders/ord_0000demo"}}, nil
	})
	nc, err := d.connect(connectorName)
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
	d.printf("log in: the host %q, the connector %q, the resolver %q and the operator %q\n", hostName, connectorName, resolverName, operatorName)
	d.printf("each have a throwaway key and their own NATS account; the host signs proposals and grants with its key.\n")
	d.printf("Reconciliation polls every %s (doubling), at most %d times.\n", reconcileInterval, reconcileAttempts)
	for _, step := range []func() error{d.doors, d.lumber, d.payments, d.flight, d.operator} {
		if err := step(); err != nil {
			return err
		}
	}
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
	return d.publish(d.subj.Proposal(hostName), p)
}

// wait waits for the n-th (1-based) outcome of a proposal.
func (d *demo) wait(pid string, n int) (schema.Outcome, error) {
	return d.outs.wait(pid, n, waitTimeout)
}

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

func (d *demo) streamMsgs(stream string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := d.proc.StreamInfo(ctx, stream) // an internal stream: only the processor reads it

	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
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
	code := d.runCLI(args, &out, &errb)
	for _, line := range strings.Split(strings.TrimRight(out.String()+errb.String(), "\n"), "\n") {
		d.printf("%s\n", strings.TrimRight("    "+line, " "))
	}
	if code != 0 {
		return fmt.Errorf("processor %s: exit %d", args[0], code)
	}
	return nil
}
