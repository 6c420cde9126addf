package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/schema"
)

// cmdBench measures the whole pipeline on the embedded default: N distinct
// granted proposals through admission, grounding, authorization and
// dispatch to a fake provider, timed from publish to the terminal outcome.
func cmdBench(c *cmdline, args []string, _ io.Reader) int {
	fs, stdout, stderr := c.fs, c.stdout, c.stderr
	n := fs.Int("n", 2000, "proposals to send")
	window := fs.Int("inflight", 500, "proposals in flight at most")
	syncAlways := fs.Bool("sync-always", false, "embedded server fsyncs every write (nats.sync_always)")
	dir := fs.String("data", "", "data directory (default: a temporary one, removed afterwards)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	if _, code, done := c.parse(args); done {
		return code
	}
	if *n < 1 || *window < 1 {
		return c.usageError("-n and -inflight must be positive")
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "portcullis-bench-")
		if err != nil {
			fmt.Fprintln(stderr, "processor bench:", err)
			return 1
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	cfg := config.Dev(*dir)
	cfg.NATS.Listen = "127.0.0.1:0"
	cfg.NATS.SyncAlways = *syncAlways
	cfg.Metrics.Listen = ""
	ctx := context.Background()
	p, err := engine.Start(ctx, engine.Options{Config: cfg, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(stderr, "processor bench:", err)
		return 1
	}
	defer p.Close()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "processor bench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "processor bench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	res, err := runBench(ctx, p, *n, *window)
	if err != nil {
		fmt.Fprintln(stderr, "processor bench:", err)
		return 1
	}
	fmt.Fprintf(stdout, "proposals   %d (distinct intents, inline grants, fake provider)\n", *n)
	fmt.Fprintf(stdout, "in flight   ≤ %d\n", *window)
	fmt.Fprintf(stdout, "sync_always %v\n", *syncAlways)
	fmt.Fprintf(stdout, "elapsed     %s\n", res.elapsed.Round(time.Millisecond))
	fmt.Fprintf(stdout, "throughput  %.0f proposals/s (each crosses 4 stages: admission, grounding, authorization, dispatch)\n", float64(*n)/res.elapsed.Seconds())
	fmt.Fprintf(stdout, "latency     p50 %s  p90 %s  p99 %s  max %s (publish → CONFIRMED)\n",
		res.pct(0.50), res.pct(0.90), res.pct(0.99), res.pct(1))
	if res.other > 0 {
		fmt.Fprintf(stdout, "NOT CONFIRMED %d\n", res.other)
		return 1
	}
	return 0
}

type benchResult struct {
	elapsed   time.Duration
	latencies []time.Duration
	other     int
}

func (r benchResult) pct(q float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	i := min(int(q*float64(len(r.latencies))), len(r.latencies)-1)
	return r.latencies[i].Round(10 * time.Microsecond)
}

func runBench(ctx context.Context, p *engine.Processor, n, window int) (benchResult, error) {
	nc, err := nats.Connect(p.NATSURL())
	if err != nil {
		return benchResult{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(window))
	if err != nil {
		return benchResult{}, err
	}
	subj := p.Subjects()
	var mu sync.Mutex
	sent := make(map[string]time.Time, n)
	var res benchResult
	done := make(chan struct{})
	slots := make(chan struct{}, window)
	sub, err := nc.Subscribe(subj.Outcomes(), func(m *nats.Msg) {
		var o schema.Outcome
		if err := schema.Decode(m.Data, &o); err != nil || !o.Terminal {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		t0, ok := sent[o.ProposalID]
		if !ok {
			return
		}
		delete(sent, o.ProposalID)
		if o.Kind == schema.KindConfirmed {
			res.latencies = append(res.latencies, time.Since(t0))
		} else {
			res.other++
		}
		<-slots
		if len(res.latencies)+res.other == n {
			close(done)
		}
	})
	if err != nil {
		return benchResult{}, err
	}
	defer sub.Unsubscribe()
	bodies := make([][]byte, n)
	for i := range n {
		if bodies[i], err = benchProposal(i); err != nil {
			return benchResult{}, err
		}
	}
	start := time.Now()
	for i, body := range bodies {
		slots <- struct{}{}
		id := fmt.Sprintf("bench-%06d", i)
		mu.Lock()
		sent[id] = time.Now()
		mu.Unlock()
		if _, err := js.PublishAsync(subj.Proposal("bench"), body, jetstream.WithMsgID(id)); err != nil {
			return benchResult{}, err
		}
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		return benchResult{}, fmt.Errorf("timed out; %d outcomes of %d", len(res.latencies)+res.other, n)
	}
	res.elapsed = time.Since(start)
	slices.Sort(res.latencies)
	return res, nil
}

// benchProposal is the SPEC §2.1 lumber proposal, made a distinct intent by
// its payload, with an inline grant for its fingerprint.
func benchProposal(i int) ([]byte, error) {
	id := fmt.Sprintf("bench-%06d", i)
	p := schema.Proposal{
		Schema:     schema.SchemaProposal,
		ProposalID: id,
		Context: schema.Context{
			Tenant:         schema.TenantContext{TenantRef: "tenant:bench", SecurityDomainRef: "security-domain:bench"},
			Actor:          schema.ActorContext{ActorRef: "actor:bench", Assurance: "host-session"},
			Authorization:  schema.AuthorizationContext{ScopeRef: "policy-scope:inventory", PolicyRevision: "policy:7"},
			Provider:       schema.ProviderContext{AccountRef: "inventory:bench"},
			Delivery:       schema.DeliveryContext{DeliveryID: "delivery:" + id, Source: "bench"},
			HostInvocation: schema.HostInvocation{InvocationID: "invocation:" + id},
		},
		Intent: schema.Intent{
			Provider: "demo", Capability: "inventory.adjust", Operation: "adjust_stock", Environment: "test",
			Payload: []byte(fmt.Sprintf(`{"quantity":%d}`, i+1)),
			Display: schema.Display{Summary: "bench"},
		},
		Grounding: schema.Grounding{
			Subject: []byte(`"lumber: cedar-8ft-gradea"`), Scope: "security-domain:bench", ObservationRef: "catalog:12",
			Candidates: []schema.Candidate{{Referent: "sku-1001", Source: "authoritative",
				Attributes: []byte(`{"resource":"Lumber: Cedar-8ft-GradeA"}`), EvidenceRefs: []string{"catalog:12#sku-1001"}}},
		},
	}
	fp, err := fingerprint.Of(&p, "sku-1001")
	if err != nil {
		return nil, err
	}
	now := time.Now()
	p.Grant = &schema.Grant{
		Schema: schema.SchemaGrant, IntentFingerprint: fp.Fingerprint, AuthorizedBy: "actor:bench",
		AuthorizationMethod: schema.MethodManual, AuthenticationAssurance: schema.AssuranceBiometric,
		IssuedAtMs: now.UnixMilli(), ExpiresAtMs: now.Add(time.Hour).UnixMilli(),
	}
	return schema.Marshal(p)
}
