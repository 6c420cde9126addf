// Package testenv runs Portcullis in integration tests of a host or a
// provider connector: an embedded nats-server with JetStream on a
// temporary directory (or a three-server cluster), a processor in process
// against it with fake providers, signing hosts, proposal fixtures, and a
// recorder of every outcome and incident event.
//
//	env := testenv.New(t)
//	env.PublishSigned(t, testenv.Lumber("prop-1"), env.Host)
//	out := env.Recorder.Wait(t, "prop-1", testenv.Terminal)
//
// Wait for what should happen with the Recorder (Wait, WaitAll,
// WaitEvent); to assert that something did not happen, call Env.Quiesce
// first, never time.Sleep: it returns once the pipeline has nothing left to
// do at the clock's current time, so whatever has not happened then will
// not.
//
// Every type here is this package's own or a public one (schema, subjects,
// stages' Clock, nats.go, nats-server, nkeys): nothing a user cannot name.
// Portcullis's own tests use a larger harness with hooks into the
// processor's internals, internal/testenv, which this package wraps.
//
// It owns only this facade; the harness is internal/testenv.
package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/adapters"
	inner "github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// Tenants and hosts of the default test configuration.
const (
	// HostName is the host Env.Host signs for; it proposes for Tenant.
	HostName       = inner.HostName
	OtherHostName  = inner.OtherHostName
	Tenant         = inner.Tenant
	SecurityDomain = inner.SecurityDomain
	OtherTenant    = inner.OtherTenant
	// OtherSecurityDomain is OtherTenant's security domain.
	OtherSecurityDomain = inner.OtherSecurityDomain
	// OperatorName is the configured operator whose key is Env.Operator.
	OperatorName = inner.OperatorName
	// ConnectorName and ResolverName are the configured connector and
	// resolver whose keys are Env.Connector and Env.Resolver.
	ConnectorName = inner.ConnectorName
	ResolverName  = inner.ResolverName
)

// Env is a running test deployment.
type Env struct {
	Server   *server.Server
	NC       *nats.Conn
	JS       jetstream.JetStream
	Subjects subjects.Subjects
	Clock    stages.Clock
	Recorder *Recorder
	// Host signs for Tenant; OtherHost signs for OtherTenant only.
	Host, OtherHost nkeys.KeyPair
	// Operator is the key of the configured operator OperatorName.
	Operator nkeys.KeyPair
	// Connector and Resolver are the keys of ConnectorName and ResolverName.
	Connector, Resolver nkeys.KeyPair
	// Fakes are the fake providers, by provider name ("demo" confirms,
	// the default test configuration's others as it names them). They
	// outlive restarts: their counters tell how often a provider was really
	// called.
	Fakes map[string]*Fake
	// ApprovalTTL is how long a proposal waits for approval before it is
	// DENIED with APPROVAL_TIMED_OUT.
	ApprovalTTL time.Duration

	env *inner.Env
}

// Option adjusts an Env before it starts.
type Option struct{ apply inner.Option }

// WithClock runs the processor on c: a stages.ManualClock makes time pass
// only when the test says so.
func WithClock(c stages.Clock) Option { return Option{inner.WithClock(c)} }

// WithAuth makes the server require every client to log in with its
// role's key (SPEC §2.8); NC and JS are then the processor's identity.
func WithAuth() Option { return Option{inner.WithAuth()} }

// Clustered runs the Env on three servers in process, with the state
// replicated as on a cluster (SPEC §6).
func Clustered() Option { return Option{inner.Clustered()} }

// NotStarted leaves the processor stopped until Env.Start.
func NotStarted() Option { return Option{inner.NotStarted()} }

// New starts a deployment stopped when the test ends.
func New(t testing.TB, opts ...Option) *Env {
	t.Helper()
	in := make([]inner.Option, len(opts))
	for i, o := range opts {
		in[i] = o.apply
	}
	e := inner.New(t, in...)
	fakes := make(map[string]*Fake, len(e.Fakes))
	for name, f := range e.Fakes {
		fakes[name] = &Fake{f: f}
	}
	return &Env{
		Server: e.Server, NC: e.NC, JS: e.JS, Subjects: e.Subjects, Clock: e.Clock,
		Recorder: &Recorder{r: e.Recorder},
		Host:     e.Host, OtherHost: e.OtherHost, Operator: e.Operator,
		Connector: e.Connector, Resolver: e.Resolver,
		Fakes:       fakes,
		ApprovalTTL: e.Config.Approval.TTL,
		env:         e,
	}
}

// Start starts the processor (after NotStarted or Stop).
func (e *Env) Start(t testing.TB) { t.Helper(); e.env.Start(t) }

// Stop stops the processor, as a deployment's shutdown does.
func (e *Env) Stop(t testing.TB) { t.Helper(); e.env.Stop(t) }

// Restart stops the processor and starts it again on the same store.
func (e *Env) Restart(t testing.TB) { t.Helper(); e.env.Restart(t) }

// Quiesce waits until the pipeline has nothing left to do at the clock's
// current time: no timer due, every stage's consumer drained and
// acknowledged, every outcome and event recorded. It fails the test after
// 20 seconds, naming what is still busy.
func (e *Env) Quiesce(t testing.TB) { t.Helper(); e.env.Quiesce(t) }

// QuiesceWithin is Quiesce with its own timeout.
func (e *Env) QuiesceWithin(t testing.TB, timeout time.Duration) {
	t.Helper()
	e.env.QuiesceWithin(t, timeout)
}

// Publish publishes v (JSON-encoded) as an unsigned proposal of HostName.
func (e *Env) Publish(t testing.TB, v any) { t.Helper(); e.env.Publish(t, v) }

// PublishSigned publishes v as a proposal signed by kp, on the proposals
// subject of the host kp signs for (SPEC §2.7).
func (e *Env) PublishSigned(t testing.TB, v any, kp nkeys.KeyPair) {
	t.Helper()
	e.env.PublishSigned(t, v, kp)
}

// PublishGrant publishes v as a grant signed by kp (SPEC §2.2).
func (e *Env) PublishGrant(t testing.TB, v any, kp nkeys.KeyPair) {
	t.Helper()
	e.env.PublishGrant(t, v, kp)
}

// PublishWith publishes body on subject with headers hdr and waits for
// the stream's acknowledgement.
func (e *Env) PublishWith(t testing.TB, subject string, body []byte, hdr nats.Header) {
	t.Helper()
	e.env.PublishWith(t, subject, body, hdr)
}

// HostOf returns the configured name of the host kp signs for.
func (e *Env) HostOf(t testing.TB, kp nkeys.KeyPair) string {
	t.Helper()
	return e.env.HostOf(t, kp)
}

// Logs returns everything the processor has logged so far, for checks that
// no protected value reached a log.
func (e *Env) Logs() []byte { return e.env.Logs.Bytes() }

// Fake is a fake provider (SPEC's `fake` adapter): it answers dispatches
// and reconciliations as configured and counts what it received.
type Fake struct{ f *adapters.Fake }

// Dispatches is how many dispatch requests it received in all.
func (f *Fake) Dispatches() int { return f.f.Dispatches() }

// DispatchesFor is how many dispatch requests it received for one
// idempotency key.
func (f *Fake) DispatchesFor(key string) int { return f.f.DispatchesFor(key) }

// Reconciles is how many reconcile requests it received in all.
func (f *Fake) Reconciles() int { return f.f.Reconciles() }

// ReconcilesFor is how many reconcile requests it received for one key.
func (f *Fake) ReconcilesFor(key string) int { return f.f.ReconcilesFor(key) }

// DeliveredFor is how many times the effect of one key was applied.
func (f *Fake) DeliveredFor(key string) int { return f.f.DeliveredFor(key) }

// AtMostOnce returns an error naming a key whose effect was applied more
// than once, or nil.
func (f *Fake) AtMostOnce() error { return f.f.AtMostOnce() }

// TimeOut makes every later request time out, its result unknown.
func (f *Fake) TimeOut() { f.f.TimeOut() }

// Recorder holds every outcome and incident event the processor published,
// each decoded strictly and validated against its JSON Schema (an outcome
// with a field the contract does not name fails the test).
type Recorder struct{ r *inner.Recorder }

// A Cond selects outcomes to wait for.
type Cond func(outs []schema.Outcome) bool

// Terminal is met once an outcome is terminal.
func Terminal(outs []schema.Outcome) bool { return inner.Terminal(outs) }

// Kind is met once an outcome of that kind arrived.
func Kind(kind schema.Kind) Cond { return Cond(inner.Kind(kind)) }

// Count is met once n outcomes arrived.
func Count(n int) Cond { return Cond(inner.Count(n)) }

// Wait waits until the outcomes of proposal id ("<host>/<proposal_id>",
// or a bare proposal id of HostName) meet cond and returns the last.
func (r *Recorder) Wait(t testing.TB, id string, cond Cond) schema.Outcome {
	t.Helper()
	return r.r.Wait(t, id, inner.Cond(cond))
}

// WaitAll is Wait returning every outcome so far.
func (r *Recorder) WaitAll(t testing.TB, id string, cond Cond) []schema.Outcome {
	t.Helper()
	return r.r.WaitAll(t, id, inner.Cond(cond))
}

// Outcomes returns the outcomes of proposal id recorded so far.
func (r *Recorder) Outcomes(id string) []schema.Outcome { return r.r.Outcomes(id) }

// Events returns every incident event recorded so far.
func (r *Recorder) Events() []schema.IncidentEvent { return r.r.Events() }

// WaitEvent waits for an incident event of phase and code.
func (r *Recorder) WaitEvent(t testing.TB, phase schema.Phase, code schema.Code) schema.IncidentEvent {
	t.Helper()
	return r.r.WaitEvent(t, phase, code)
}

// CountEvents is how many incident events of phase and code were recorded.
func (r *Recorder) CountEvents(phase schema.Phase, code schema.Code) int {
	return r.r.CountEvents(phase, code)
}

// Flush waits until every outcome and event published so far is recorded.
func (r *Recorder) Flush(t testing.TB) { t.Helper(); r.r.Flush(t) }

// Lumber is the SPEC §2.1 proposal with its proposal_id set.
func Lumber(proposalID string) map[string]any { return inner.Lumber(proposalID) }

// Set sets a value at a dotted path in a fixture map ("intent.payload"),
// creating objects on the way; it returns m.
func Set(m map[string]any, path string, v any) map[string]any { return inner.Set(m, path, v) }

// Delete removes the value at a dotted path; it returns m.
func Delete(m map[string]any, path string) map[string]any { return inner.Delete(m, path) }

// FingerprintOf is the fingerprint (SPEC §2.3) proposal grounds to when
// its target resolves to referent.
func FingerprintOf(t testing.TB, proposal any, referent string) string {
	t.Helper()
	return inner.FingerprintOf(t, proposal, referent)
}

// Grant returns a grant (SPEC §2.2) for a fingerprint: manual, biometric,
// valid from now for five minutes, with a spend ceiling when spend is not
// nil.
func Grant(fp string, now time.Time, spend map[string]any) map[string]any {
	return inner.Grant(fp, now, spend)
}

// Granted puts an inline grant into a proposal fixture, bound to the
// fingerprint it grounds to (referent), valid from now. It returns p.
func Granted(t testing.TB, p map[string]any, referent string, now time.Time) map[string]any {
	t.Helper()
	return inner.Granted(t, p, referent, now)
}

// Body encodes a fixture (a map from Lumber and friends, or any value) as
// JSON; []byte passes through unchanged.
func Body(t testing.TB, v any) []byte { t.Helper(); return inner.Body(t, v) }

// Sign returns the headers that sign body as kp's host (SPEC §2.7).
func Sign(t testing.TB, kp nkeys.KeyPair, body []byte) nats.Header {
	t.Helper()
	return inner.Sign(t, kp, body)
}

// WaitFor waits until cond holds, failing the test after 20 seconds with
// what it waited for.
func WaitFor(t testing.TB, what string, cond func() bool) { t.Helper(); inner.WaitFor(t, what, cond) }

// Retry calls f with a fresh two-second context until it succeeds, for at
// most 20 seconds: a JetStream API call on a cluster may find no leader
// (right after a start, during an election).
func Retry(t testing.TB, f func(ctx context.Context) error) { t.Helper(); inner.Retry(t, f) }

// StartServer starts an embedded nats-server with JetStream, storing under
// dir ("" for a new t.TempDir()), on a random loopback port. It is shut
// down when the test ends.
func StartServer(t testing.TB, dir string) *server.Server {
	t.Helper()
	return inner.StartServer(t, dir)
}

// Connect connects to s, closed when the test ends.
func Connect(t testing.TB, s *server.Server) *nats.Conn { t.Helper(); return inner.Connect(t, s) }

// Standalone returns a testing.TB for an example or a main function, and
// the function that ends it (running its cleanups).
func Standalone() (tb testing.TB, stop func()) { return inner.Standalone() }
