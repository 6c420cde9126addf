package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// Backlog is the result of Queued.
type Backlog struct {
	// Queue is the publishing of the backlog, before any processor runs.
	Queue Phase
	// Drain runs from the processor's start to the backlog's last
	// terminal outcome; its CPU is the process's (embedded server
	// included) and it has no latencies.
	Drain Phase
	// Start is how long engine.Start took (part of Drain).
	Start time.Duration
	// PeakRSS is the process's peak resident set during Drain (VmHWM,
	// embedded server included), as Side.PeakRSS; RSSReset as there.
	PeakRSS  int64
	RSSReset bool
	// ServerPeakRSS is the nats-server process's peak during Drain when
	// it runs apart (Options.Server), else 0.
	ServerPeakRSS int64
	// GoMemory is the Go runtime's peak during Drain.
	GoMemory GoMemory
	// ProposalBytes is the size of each proposal.
	ProposalBytes int
}

// Queued measures a backlog: it publishes count proposals to cfg's
// proposals stream while no processor runs, then starts the processor with
// cfg — a development configuration — and waits until every proposal has
// its terminal outcome. The caller closes the processor it returns.
//
// With o.Server the backlog goes to that server, which cfg's processor
// must use; else cfg must use the embedded server, and the backlog is
// published on a nats-server of its own with the embedded server's
// settings and store directory, stopped before the processor starts.
func Queued(ctx context.Context, cfg *config.Config, count int, o Options, start func(context.Context) (*engine.Processor, error)) (Backlog, *engine.Processor, error) {
	o.defaults()
	if cfg.NATS.Embedded == (o.Server != nil) {
		return Backlog{}, nil, errors.New("bench: queued: the processor must use the embedded server, or the server process it is given")
	}
	subj, err := subjects.New(cfg.Prefix)
	if err != nil {
		return Backlog{}, nil, err
	}
	var b Backlog
	if b.Queue, b.ProposalBytes, err = queue(ctx, cfg, subj, count, o); err != nil {
		return Backlog{}, nil, err
	}

	b.RSSReset = o.resetPeaks()
	stopMem := sampleMemory(o.OnHeapPeak)
	defer func() { stopMem() }()
	t := o.tracker(count, count)
	for i := range count {
		_ = t.send(ctx, queuedID(i))
	}
	t.start()
	p, err := start(ctx)
	if err != nil {
		return Backlog{}, nil, err
	}
	b.Start = time.Since(t.started)
	url := p.NATSURL()
	// The connector as soon as the processor runs: until it subscribes,
	// dispatch requests find no responder and wait out the provider's
	// unavailable_retry.
	_, stop, err := serveConnector(url, subj, o.AckShare)
	if err != nil {
		return Backlog{}, p, err
	}
	defer stop()
	// Outcomes from their stream, from its first message: a subscription
	// made now could miss the first ones.
	nc, err := nats.Connect(url)
	if err != nil {
		return Backlog{}, p, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return Backlog{}, p, err
	}
	oc, err := js.OrderedConsumer(ctx, subj.OutcomesStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj.Outcomes()}})
	if err != nil {
		return Backlog{}, p, err
	}
	cc, err := oc.Consume(func(m jetstream.Msg) {
		var out schema.Outcome
		if err := schema.Decode(m.Data(), &out); err != nil || !out.Terminal {
			return
		}
		t.end(out.ProposalID, out.Kind == schema.KindConfirmed)
	})
	if err != nil {
		return Backlog{}, p, err
	}
	defer cc.Stop()
	if b.Drain, err = t.wait(ctx, "drain", o.Progress); err != nil {
		return Backlog{}, p, err
	}
	b.Drain.Latencies = nil
	b.PeakRSS, b.ServerPeakRSS = o.peaks()
	b.GoMemory = stopMem()
	stopMem = func() GoMemory { return GoMemory{} }
	return b, p, nil
}

func queuedID(i int) string { return fmt.Sprintf("q-%07d", i) }

// queue creates the processor's streams and publishes count proposals: on
// o.Server, or on a nats-server started as the embedded one would run and
// stopped afterwards.
func queue(ctx context.Context, cfg *config.Config, subj subjects.Subjects, count int, o Options) (Phase, int, error) {
	var url string
	if o.Server != nil {
		url = o.Server.URL()
	} else {
		srv, err := server.NewServer(ServerOptions(cfg.NATS.StoreDir, cfg.NATS.SyncAlways, engine.EmbeddedMaxPayload(cfg)))
		if err != nil {
			return Phase{}, 0, err
		}
		go srv.Start()
		defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
		if !srv.ReadyForConnections(10 * time.Second) {
			return Phase{}, 0, errors.New("bench: queued: nats-server did not start")
		}
		url = srv.ClientURL()
	}
	nc, err := nats.Connect(url)
	if err != nil {
		return Phase{}, 0, err
	}
	defer nc.Close()
	var failed atomic.Int64
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(o.Window),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { failed.Add(1) }))
	if err != nil {
		return Phase{}, 0, err
	}
	if _, err := engine.EnsureStreams(ctx, js, subj, cfg); err != nil {
		return Phase{}, 0, err
	}
	started, cpu0 := time.Now(), CPUTime()
	size := 0
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for i := range count {
		id := queuedID(i)
		body, err := Proposal(id, o.PayloadBytes)
		if err != nil {
			return Phase{}, 0, err
		}
		size = len(body)
		if _, err := js.PublishAsync(subj.Proposal(Host), body, jetstream.WithMsgID(id)); err != nil {
			return Phase{}, 0, err
		}
		select {
		case <-tick.C:
			if o.Progress != nil {
				o.Progress(fmt.Sprintf("queue %d/%d", i, count))
			}
		default:
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return Phase{}, 0, ctx.Err()
	}
	if f := failed.Load(); f > 0 {
		return Phase{}, 0, fmt.Errorf("bench: queued: %d of %d proposals not stored", f, count)
	}
	return Phase{Count: count, Elapsed: time.Since(started), CPU: CPUTime() - cpu0}, size, nil
}
