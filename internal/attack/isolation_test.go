package attack_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// SPEC §3, Isolation: "a provider, candidate source or resolver that is
// slow, hangs or is down delays only the proposals that use it". Each
// provider (dispatch, and reconciliation's polls) and each candidate source
// (grounding) is a bulkhead of its stage's runner: at most its
// max_in_flight requests at once, and its further proposals wait without
// holding anything another provider or source needs.
//
// Timing never fails a test: each test shows isolation by causality — the
// other provider's (or source's) proposal is answered while every request
// to the stuck one is still unanswered, which no amount of waiting could
// produce if the stuck one held the capacity — and logs how long it took.
// The stage under test runs with fewer workers than there are stuck
// proposals, so that stuck proposals holding workers would starve the
// others; and the stuck provider or source receives exactly its limit.

// fewWorkers runs stage with n workers (stages.RunnerConfig.MaxInFlight).
func fewWorkers(stage string, n int) testenv.Option {
	return testenv.WithEngine(func(o *engine.Options) {
		o.Pipeline = engine.Pipeline()
		for i := range o.Pipeline {
			if o.Pipeline[i].Name == stage {
				o.Pipeline[i].MaxInFlight = n
			}
		}
	})
}

// held is a connector or candidate source that never answers until
// released: it keeps the requests it received (their reply subjects) and
// answers them all with reply on release, and any later ones at once.
type held struct {
	mu       sync.Mutex
	pending  []*nats.Msg
	received int
	released bool
	reply    []byte
}

func hold(t *testing.T, nc *nats.Conn, subject string, reply string) *held {
	t.Helper()
	h := &held{reply: []byte(reply)}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.received++
		if h.released {
			_ = m.Respond(h.reply)
			return
		}
		h.pending = append(h.pending, m)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.release(); _ = sub.Unsubscribe() })
	return h
}

func (h *held) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.received
}

func (h *held) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return
	}
	h.released = true
	for _, m := range h.pending {
		_ = m.Respond(h.reply)
	}
	h.pending = nil
}

// waitCount waits until h has received n requests.
func waitCount(t *testing.T, h *held, n int) {
	t.Helper()
	if !testenv.Poll(testenv.WaitTimeout, func() bool { return h.count() >= n }) {
		t.Fatalf("%d of %d requests reached the held subject", h.count(), n)
	}
}

const confirmedReply = `{"outcome":"confirmed","provider_action_id":"inv:held"}`

// TestDownProviderCannotStarveAnother: B's proposals for a provider whose
// connector is down (NATS "no responders": dispatch retries each for the
// provider's unavailable_retry, by delayed redelivery) delay only
// proposals for that provider; A's proposal for another provider is
// answered while they are all still retrying.
func TestDownProviderCannotStarveAnother(t *testing.T) {
	env := testenv.New(t, testenv.WithConfig(func(c *config.Config) {
		for i := range c.Providers {
			if c.Providers[i].Name == "inventory" {
				c.Providers[i].UnavailableRetry = 20 * time.Second
			}
		}
	}))
	now := time.Now()
	for i := range dispatchWorkers {
		p := testenv.Set(testenv.AsOtherTenant(intentOf(fmt.Sprintf("down-%02d", i), i)), "intent.provider", "inventory")
		env.PublishSigned(t, testenv.Granted(t, p, "sku-1001", now), env.OtherHost)
	}
	// Every one of them has reached dispatch and is being retried.
	ctx := context.Background()
	testenv.WaitFor(t, "every one of B's proposals retried in dispatch", func() bool {
		cons, err := env.JS.Consumer(ctx, env.Subjects.StageStream(subjects.StageDispatch), subjects.HostConsumer(subjects.StageDispatch, hostB))
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.NumAckPending >= dispatchWorkers
	})
	a := grantedA(t, "not-starved", 71, now)
	start := time.Now()
	env.PublishSigned(t, a, env.Host)
	confirmed(t, env.Recorder.Wait(t, "not-starved", testenv.Terminal), testenv.FingerprintOf(t, a, "sku-1001"))
	t.Logf("A's proposal answered in %s while B's %d proposals to a provider that is down retried", time.Since(start), dispatchWorkers)
	for i := range dispatchWorkers {
		if outs := env.Recorder.Outcomes(refB(fmt.Sprintf("down-%02d", i))); len(outs) != 0 {
			t.Fatalf("A's demo proposal waited until B's inventory proposals gave up: %+v", outs)
		}
	}
}

// TestHangingProviderCannotStarveAnother: forty dispatches to a provider
// whose connector receives requests and never answers (its timeout far
// longer than the test) reach it only max_in_flight at a time; a proposal
// for another provider is dispatched and answered while all of them hang.
// Released, every one of the forty is answered, each dispatched once.
func TestHangingProviderCannotStarveAnother(t *testing.T) {
	const hanging, limit = 40, 16
	env := testenv.New(t, fewWorkers(subjects.StageDispatch, 24), testenv.WithConfig(func(c *config.Config) {
		for i := range c.Providers {
			if c.Providers[i].Name == "inventory" {
				c.Providers[i].Timeout = 5 * time.Minute
				c.Providers[i].MaxInFlight = limit
			}
		}
	}))
	connector := hold(t, env.NC, env.Subjects.ProviderDispatch("inventory"), confirmedReply)
	now := time.Now()
	for i := range hanging {
		p := testenv.Set(testenv.AsOtherTenant(intentOf(fmt.Sprintf("hang-%02d", i), 100+i)), "intent.provider", "inventory")
		env.PublishSigned(t, testenv.Granted(t, p, "sku-1001", now), env.OtherHost)
	}
	waitCount(t, connector, limit)

	a := grantedA(t, "beside-the-hang", 72, now)
	start := time.Now()
	env.PublishSigned(t, a, env.Host)
	confirmed(t, env.Recorder.Wait(t, "beside-the-hang", testenv.Terminal), testenv.FingerprintOf(t, a, "sku-1001"))
	t.Logf("A's proposal answered in %s while %d dispatches to a hanging provider waited", time.Since(start), hanging)
	if n := connector.count(); n != limit {
		t.Fatalf("the hanging provider received %d requests, want its max_in_flight %d", n, limit)
	}
	for i := range hanging {
		if outs := env.Recorder.Outcomes(refB(fmt.Sprintf("hang-%02d", i))); len(outs) != 0 {
			t.Fatalf("hang-%02d answered before its provider did: %+v", i, outs)
		}
	}

	connector.release()
	for i := range hanging {
		checkOutcome(t, env.Recorder.Wait(t, refB(fmt.Sprintf("hang-%02d", i)), testenv.Terminal), schema.KindConfirmed)
	}
	if n := connector.count(); n != hanging {
		t.Errorf("the provider received %d requests, want each of the %d proposals once", n, hanging)
	}
}

// sourced is A's lumber proposal grounded by candidate source src instead
// of inline candidates.
func sourced(id string, quantity int, src string) map[string]any {
	p := intentOf(id, quantity)
	g := p["grounding"].(map[string]any)
	delete(g, "candidates")
	g["candidate_source"] = src
	return p
}

const lumberCandidates = `{"candidates":[{"referent":"sku-1001","source":"authoritative",` +
	`"attributes":{"resource":"Lumber: Cedar-8ft-GradeA"},"evidence_refs":["catalog:12#sku-1001"]}],"observation_ref":"catalog:12"}`

// TestSilentSourceCannotStarveGrounding: forty-eight proposals naming a
// candidate source that never answers reach it only
// source_max_in_flight at a time; proposals with inline candidates and
// proposals naming another source are grounded and answered meanwhile.
func TestSilentSourceCannotStarveGrounding(t *testing.T) {
	const silentN, limit = 48, 16
	env := testenv.New(t, fewWorkers(subjects.StageGrounding, 24), testenv.WithConfig(func(c *config.Config) {
		c.Grounding.SourceTimeout = 5 * time.Minute
		c.Grounding.SourceMaxInFlight = limit
	}))
	silent := hold(t, env.NC, env.Subjects.Candidates("silent"), lumberCandidates)
	catalog := hold(t, env.NC, env.Subjects.Candidates("catalog"), lumberCandidates)
	catalog.release() // answers at once
	now := time.Now()
	for i := range silentN {
		env.PublishSigned(t, testenv.Granted(t, sourced(fmt.Sprintf("silent-%02d", i), 200+i, "silent"), "sku-1001", now), env.Host)
	}
	waitCount(t, silent, limit)

	start := time.Now()
	inline := grantedA(t, "inline-beside", 73, now)
	viaCatalog := testenv.Granted(t, sourced("catalog-beside", 74, "catalog"), "sku-1001", now)
	env.PublishSigned(t, inline, env.Host)
	env.PublishSigned(t, viaCatalog, env.Host)
	confirmed(t, env.Recorder.Wait(t, "inline-beside", testenv.Terminal), testenv.FingerprintOf(t, inline, "sku-1001"))
	confirmed(t, env.Recorder.Wait(t, "catalog-beside", testenv.Terminal), testenv.FingerprintOf(t, viaCatalog, "sku-1001"))
	t.Logf("inline and other-source proposals answered in %s while %d requests to a silent source waited", time.Since(start), silentN)
	if n := silent.count(); n != limit {
		t.Fatalf("the silent source received %d requests, want source_max_in_flight %d", n, limit)
	}

	silent.release()
	for i := range silentN {
		checkOutcome(t, env.Recorder.Wait(t, fmt.Sprintf("silent-%02d", i), testenv.Terminal), schema.KindConfirmed)
	}
	if n := silent.count(); n != silentN {
		t.Errorf("the source was asked %d times, want once per proposal (%d)", n, silentN)
	}
}

// TestHangingReconcileCannotStarveAnother: a provider acknowledges its
// dispatches and then never answers a reconcile; its polls reach it only
// max_in_flight at a time, and another provider's acknowledged dispatch is
// verified meanwhile.
func TestHangingReconcileCannotStarveAnother(t *testing.T) {
	const hanging, limit = 24, 4
	env := testenv.New(t, fewWorkers(subjects.StageReconciliation, 12), testenv.WithConfig(func(c *config.Config) {
		c.Reconciliation.Interval = 50 * time.Millisecond
		for i := range c.Providers {
			if c.Providers[i].Name == "inventory" {
				c.Providers[i].Timeout = 5 * time.Minute
				c.Providers[i].MaxInFlight = limit
			}
		}
	}))
	acknowledge := hold(t, env.NC, env.Subjects.ProviderDispatch("inventory"), `{"outcome":"acknowledged","provider_action_id":"inv:ack"}`)
	acknowledge.release()
	reconciles := hold(t, env.NC, env.Subjects.ProviderReconcile("inventory"), confirmedReply)
	now := time.Now()
	for i := range hanging {
		p := testenv.Set(testenv.AsOtherTenant(intentOf(fmt.Sprintf("poll-%02d", i), 300+i)), "intent.provider", "inventory")
		env.PublishSigned(t, testenv.Granted(t, p, "sku-1001", now), env.OtherHost)
	}
	for i := range hanging {
		checkOutcome(t, env.Recorder.Wait(t, refB(fmt.Sprintf("poll-%02d", i)), testenv.Kind(schema.KindAcknowledged)), schema.KindAcknowledged)
	}
	waitCount(t, reconciles, limit)

	demo := env.Fakes["demo"]
	demo.OnDispatch(func(_ context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{Outcome: schema.ReplyAcknowledged, ProviderActionID: "demo:" + req.IdempotencyKey[:8]}, nil
	})
	a := grantedA(t, "verified-beside", 75, now)
	start := time.Now()
	env.PublishSigned(t, a, env.Host)
	confirmed(t, env.Recorder.Wait(t, "verified-beside", testenv.Terminal), testenv.FingerprintOf(t, a, "sku-1001"))
	t.Logf("A's acknowledged dispatch verified in %s while %d polls to a hanging provider waited", time.Since(start), hanging)
	if n := reconciles.count(); n != limit {
		t.Fatalf("the hanging provider received %d reconcile requests, want its max_in_flight %d", n, limit)
	}

	reconciles.release()
	for i := range hanging {
		checkOutcome(t, env.Recorder.Wait(t, refB(fmt.Sprintf("poll-%02d", i)), testenv.Terminal), schema.KindConfirmed)
	}
}
