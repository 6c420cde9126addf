// Package engine assembles Portcullis: NATS (embedded or remote), the
// streams, the Pebble store, every stage runner, the timer scheduler and the
// metrics endpoint. cmd/processor and testenv both start it through Start.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/portcullis/portcullis/kv"
	kvjs "github.com/portcullis/portcullis/kv/jetstream"

	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/seal"
	"github.com/portcullis/portcullis/kv/dirlock"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/reconciliation"
	"github.com/portcullis/portcullis/subjects"
)

// Options configure Start.
type Options struct {
	// Config is required and must be valid.
	Config *config.Config
	// Log receives structured, value-free logs. nil: slog.Default().
	Log *slog.Logger
	// Clock is the processor's time. nil: the wall clock.
	Clock stages.Clock
	// DrainTimeout bounds how long Close lets in-flight messages finish
	// before cancelling them (they are then redelivered after a restart).
	// Default 30s.
	DrainTimeout time.Duration
	// Adapters replaces the adapters of these providers (tests keep a
	// *adapters.Fake across restarts this way). Others are built from the
	// configuration.
	Adapters map[string]adapters.Adapter
	// StoreFS replaces the disk under the Pebble store, for fault-injection
	// tests (pebble's vfs/errorfs). nil: the disk.
	StoreFS vfs.FS
	// LagPoll is how often each stage consumer's pending counts are read
	// from JetStream (actions_consumer_*_messages; readiness). Default 5s.
	LagPoll time.Duration
	// Pipeline replaces the stage table (tests insert stages this way).
	// nil: Pipeline().
	Pipeline []Spec
}

// Processor is a running Portcullis.
type Processor struct {
	// rations ration each host's incident events of each phase and code.
	rations *rations
	// legacy are the Scheduled stages whose stream takes their timers
	// (legacyScheduled).
	legacy map[string]bool
	cfg    *config.Config
	log    *slog.Logger
	clock  stages.Clock
	subj   subjects.Subjects
	srv    *server.Server
	// srvKey is the processor's identity on the embedded server (its
	// restarts keep it: watchEmbedded).
	srvKey   string
	nc       *nats.Conn
	js       jetstream.JetStream
	wire     *stages.Wire // nc's write batching, for the stages
	store    *pebble.Store
	activity *kvjs.Activity
	metrics  *metrics.Metrics
	httpSrv  *http.Server
	httpLn   net.Listener
	natsErrs *natsErrors
	seal     *seal.Sealer
	adapters map[string]adapters.Adapter
	recon    *reconciliation.Stage
	// approvals is the authorization stage's state: on store (Pebble), or
	// with a replicated journal on the approvals bucket (openApprovals).
	approvals kv.Approvals
	// stopAdmin ends the operator API (admin.Server) before the store closes.
	stopAdmin func()
	// closeApprovals stops the replicated approvals' watcher (nil: none).
	closeApprovals func()
	// health is what /readyz reads (health.go).
	health health
	// natsLock holds the embedded server's nats.store_dir (nil: none).
	natsLock *dirlock.Lock
	// reach is each provider's reachability, as this processor's calls
	// showed it (reach.go): /readyz's detail, actions_provider_unreachable.
	reach *reach
	// consumers are the pipeline's runners and their durable consumers
	// (Consumers).
	consumers []Consumer
	// journal is the dispatch journal: Pebble (store), or the replicated
	// one on a JetStream bucket (store.journal); self is the processor's
	// instance id.
	journal kv.Journal
	self    string
	// admission are the admission records, nonces the operator request
	// nonces and proposals the proposal-to-fingerprint map the operator
	// API reads: the store, or with a replicated journal the buckets a
	// cluster shares.
	admission kv.Admissions
	nonces    kv.Nonces
	proposals admin.Proposals
	// replicatedNonces are nonces when they are the shared bucket's (nil
	// otherwise): the retention loop sweeps them.
	replicatedNonces *kvjs.Nonces

	stopFetch context.CancelFunc
	stopWork  context.CancelFunc
	drain     time.Duration
	startedAt time.Time
	wg        sync.WaitGroup
	done      chan struct{}
	closeOnce sync.Once
	errMu     sync.Mutex
	err       error
}

// Start brings up a processor and returns once every stage consumes. A
// failure is returned at once, as one error that says what failed (a port
// in use, an unreachable server, a bad key file), with everything started
// so far stopped again.
func Start(ctx context.Context, o Options) (*Processor, error) {
	cfg := o.Config
	if cfg == nil {
		return nil, errors.New("engine: no config")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.Pipeline != nil {
		if err := checkPipeline(o.Pipeline); err != nil {
			return nil, err
		}
	}
	subj, err := subjects.New(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	p := &Processor{
		cfg: cfg, log: o.Log, clock: o.Clock, subj: subj,
		drain: o.DrainTimeout, done: make(chan struct{}), startedAt: time.Now(),
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.clock == nil {
		p.clock = stages.SystemClock{}
	}
	if p.drain <= 0 {
		p.drain = 30 * time.Second
	}
	started := false
	defer func() {
		if !started {
			p.teardown()
		}
	}()
	if err := p.start(ctx, o); err != nil {
		return nil, err
	}
	started = true
	return p, nil
}

// loud logs a warning at every start whatever level the log is set to
// (SPEC §2.7: development mode "says so loudly in the log at every start",
// also under --log-level error): the record goes to the handler directly,
// past its level.
func loud(ctx context.Context, log *slog.Logger, msg string) {
	var pcs [1]uintptr
	runtime.Callers(2, pcs[:])
	_ = log.Handler().Handle(ctx, slog.NewRecord(time.Now(), slog.LevelWarn, msg, pcs[0]))
}

func (p *Processor) start(ctx context.Context, o Options) error {
	cfg, subj := p.cfg, p.subj
	if cfg.Admission.AllowUnsigned {
		loud(ctx, p.log, "!!! UNSIGNED PROPOSALS AND GRANTS ARE ADMITTED, AND UNSIGNED OPERATOR REQUESTS ANSWERED: anyone who can publish can act for any tenant and settle indeterminate actions. Development only; never in production. !!!")
	}
	if cfg.NATS.Embedded && !cfg.NATS.Auth {
		loud(ctx, p.log, "!!! NATS AUTHENTICATION IS OFF: any local client may publish on any subject, internal ones included. Development only. !!!")
	}
	for _, w := range cfg.BudgetWarnings() {
		p.log.Warn("configuration: " + w)
	}
	// The store first: its directory lock says whether another processor
	// runs on this store.dir, before an embedded server is started on
	// what would be that processor's NATS store too.
	// A disk already short of room would hang Pebble's open.
	if err := p.checkRoom(); err != nil {
		return err
	}
	var err error
	p.store, err = pebble.Open(cfg.Store.Dir, pebble.Options{FS: o.StoreFS, Logger: p.log.With("component", "pebble"), Now: func() int64 { return stages.NowMs(p.clock) }})
	if err != nil {
		return err
	}
	key, err := loadInternalKey(cfg.InternalKeyFile())
	if err != nil {
		return err
	}
	if p.seal, err = seal.New(key); err != nil {
		return fmt.Errorf("engine: internal key: %w", err)
	}
	// The metrics listener first: a bad or busy address fails at once.
	if err := p.listenMetrics(); err != nil {
		return err
	}
	if err := p.connect(); err != nil {
		return err
	}
	if err := p.checkRights(ctx); err != nil {
		return err
	}
	pipeline := o.Pipeline
	if pipeline == nil {
		pipeline = Pipeline()
	}
	bucket, legacy, deferred, err := ensureStreams(ctx, p.js, subj, cfg, pipeline, p.log)
	p.legacy = legacy
	if err != nil {
		return err
	}
	p.activity = &kvjs.Activity{KV: bucket, Now: func() int64 { return stages.NowMs(p.clock) }, JS: p.js, Share: p.share, Linger: ActivityLinger}
	var providers []string
	for _, pr := range cfg.Providers {
		providers = append(providers, pr.Name)
	}
	if err := p.openJournal(ctx); err != nil {
		return err
	}
	if err := p.openApprovals(ctx); err != nil {
		return err
	}
	if err := upgradeStreams(ctx, p.js, subj, deferred, p.approvals.Count(), p.log); err != nil {
		return err
	}
	consumers := Consumers(subj, cfg, pipeline, legacy)
	p.consumers = consumers
	p.metrics = metrics.New(consumerNames(consumers), providers)
	for _, st := range pipeline {
		// A stage's phase of its own (Spec.Codes) has its series too.
		for _, c := range st.Codes {
			p.metrics.Incidents.WithLabelValues(string(c.Phase), string(c.Code))
		}
	}
	p.metrics.SetApprovalsPending(p.approvals.Count)
	retry := map[string]time.Duration{}
	for _, pr := range cfg.Providers {
		retry[pr.Name] = pr.UnavailableRetry
	}
	p.reach = newReach(p.log, p.metrics, p.clock.Now, retry) // before /readyz is served
	p.serveMetrics()

	p.adapters = map[string]adapters.Adapter{}
	for _, pr := range cfg.Providers {
		a, ok := o.Adapters[pr.Name]
		if !ok {
			var err error
			a, err = adapters.Build(pr.Adapter, pr.Settings, adapters.Provider{Name: pr.Name, Timeout: pr.Timeout}, adapters.Env{NC: p.nc, Subjects: subj, Now: p.clock.Now})
			if err != nil {
				return err
			}
		}
		p.adapters[pr.Name] = p.reach.watch(pr.Name, a)
	}
	p.rations = newRations(cfg.Streams.HostIncidentRate)
	deps := stages.Deps{JS: p.js, Wire: p.wire, Seal: p.seal, Subjects: subj, Metrics: p.metrics, Outcomes: p.store,
		History: &kvjs.OutcomeHistory{JS: p.js, Subjects: subj}, Clock: p.clock, Log: p.log,
		EventShare: p.eventShare, OnFull: p.stageFull, Last: stages.NewLastOutcomes(0), Room: p.room}
	jr := p.journal
	parked, held := KeptEnvelopes(p.js, p.seal, subj, cfg)
	parts := &Parts{
		Config: cfg, Subjects: subj, Clock: p.clock, Metrics: p.metrics, Log: p.log, NC: p.nc, JS: p.js, Seal: p.seal,
		Self: p.self, Store: p.store, Journal: jr, Admission: p.admission, Approvals: p.approvals, Activity: p.activity, Adapters: p.adapters,
		Parked: parked, Held: held,
	}
	runners, err := p.runners(pipeline, consumers, parts, deps)
	if err != nil {
		return err
	}
	p.recon = parts.recon
	p.metrics.SetIndeterminateSource(jr.CountIndeterminate)
	p.metrics.SetExhaustedSource(func() (int, error) { return countExhausted(jr) })
	// The operator's API (processor receipts, processor reconcile).
	adm := &admin.Server{Journal: jr, Approvals: p.approvals, Nonces: p.nonces, Store: p.proposals, Reconciliation: Resolver{p.recon}, ReconcileMaxAttempts: cfg.Reconciliation.MaxAttempts, Subjects: subj, Clock: p.clock,
		Log: p.log.With("component", "admin"), JS: p.js, Operators: cfg.Operators, AllowUnsigned: cfg.Admission.AllowUnsigned, Self: p.status}
	if p.stopAdmin, err = adm.Serve(p.nc); err != nil {
		return err
	}
	for _, r := range runners {
		if err := retryJS(ctx, func(ctx context.Context) error { _, err := r.EnsureConsumers(ctx); return err }); err != nil {
			return err
		}
	}
	fetchCtx, stopFetch := context.WithCancel(context.Background())
	workCtx, stopWork := context.WithCancel(context.Background())
	p.stopFetch, p.stopWork = stopFetch, stopWork
	for _, r := range runners {
		p.wg.Go(func() {
			if err := r.Run(fetchCtx, workCtx); err != nil {
				p.fail(err)
			}
		})
	}
	p.wg.Go(func() { p.watchStore(fetchCtx) })
	p.wg.Go(func() { p.watchDisks(fetchCtx) })
	if cfg.NATS.Embedded {
		p.wg.Go(func() { p.watchEmbedded(fetchCtx) })
	}
	p.watchStages(fetchCtx, runners, o.LagPoll)
	sched := &stages.Scheduler{Store: p.store, JS: p.js, Seal: p.seal, Clock: p.clock, Log: p.log}
	p.wg.Go(func() { _ = sched.Run(fetchCtx) })
	sweeper := p.sweeper(jr)
	p.wg.Go(func() { sweeper.Run(fetchCtx, cfg.Retention.SweepInterval) })
	// Each host's share of the history streams, kept within its budget.
	ledger := p.historyShares()
	p.wg.Go(func() { ledger.Run(fetchCtx) })
	p.log.Info("processor started", "nats", p.NATSURL(), "metrics", p.MetricsAddr(), "store", cfg.Store.Dir, "prefix", subj.Prefix(),
		"journal", journalKind(cfg), "instance", p.self)
	return nil
}

// openJournal opens the dispatch journal store.journal names: Pebble, or
// the replicated bucket with its timers as message schedules.
func (p *Processor) openJournal(ctx context.Context) error {
	id, err := p.store.InstanceID()
	if err != nil {
		return err
	}
	p.self = id
	migrated, moved, err := p.store.Migrated()
	if err != nil {
		return err
	}
	if !p.cfg.ReplicatedJournal() {
		if moved {
			// Its timers went with it: a local journal here is out of date.
			return fmt.Errorf("engine: store.dir %s was moved into the buckets of a cluster by processor migrate (%s): set store.journal = \"replicated\" (its local journal is out of date)", p.cfg.Store.Dir, time.UnixMilli(migrated.AtMs).UTC().Format(time.RFC3339))
		}
		if !p.cfg.NATS.Embedded {
			p.log.Warn("store.journal is local: the dispatch journal is in this processor's store, so no other processor may use this NATS and subject prefix (set store.journal = \"replicated\" to share it)")
		}
		p.journal = pebble.NewJournal(p.store)
		p.admission, p.proposals = pebble.AdmissionRecords{Store: p.store}, p.store
		p.nonces = pebble.Nonces{Store: p.store, Window: admin.NonceWindow(p.clockMargin())}
		return nil
	}
	// A processor that used a local journal has dispatched intents the
	// replicated one does not know — on it, it could dispatch them again —
	// unless processor migrate moved them into the bucket.
	local, err := p.store.HasIntents()
	if err != nil {
		return err
	}
	if local && !moved {
		return fmt.Errorf("engine: store.dir %s holds a local dispatch journal, which a replicated journal would not see: move it into the cluster's buckets with processor migrate --config FILE (processor stopped), or set store.journal = \"local\" to keep using it (this processor alone on its NATS)", p.cfg.Store.Dir)
	}
	// EnsureStreams made its stream (StreamConfigs).
	bucket, err := p.bind(ctx, p.subj.JournalBucket())
	if err != nil {
		return err
	}
	p.journal = kvjs.NewJournal(kvjs.JournalOptions{
		KV: bucket, JS: p.js, Writer: id, Log: p.log.With("component", "journal"),
		Timers: &kvjs.Schedules{JS: p.js, Subjects: p.subj, Seal: p.seal, Legacy: p.legacy},
	})
	// The admission records and operator nonces are shared too (SPEC §6):
	// a reused proposal id, a repeated delivery id or a replayed operator
	// request is refused whichever processor sees it.
	var adm, nonces jetstream.KeyValue
	err = retryJS(ctx, func(ctx context.Context) (err error) {
		if adm, err = kvjs.Bind(ctx, p.js, p.subj.AdmissionBucket()); err != nil {
			return err
		}
		nonces, err = kvjs.Bind(ctx, p.js, p.subj.NonceBucket())
		return err
	})
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	rec := kvjs.NewAdmissions(kvjs.AdmissionsOptions{KV: adm, JS: p.js, Local: p.store, Subjects: p.subj})
	p.admission, p.proposals = rec, rec
	p.replicatedNonces = &kvjs.Nonces{KV: nonces, JS: p.js, Window: admin.NonceWindow(p.clockMargin())}
	p.nonces = p.replicatedNonces
	return nil
}

// clockMargin is how far the clocks of the processors (and of an operator
// and a processor) are taken to disagree beyond the limits SPEC §2.8 sets:
// approval.clock_skew, at least 30s.
func (p *Processor) clockMargin() time.Duration { return max(p.cfg.Approval.ClockSkew, 30*time.Second) }

// bind binds a shared bucket EnsureStreams made (kvjs.Bind), retried
// while JetStream does not answer.
func (p *Processor) bind(ctx context.Context, name string) (jetstream.KeyValue, error) {
	var bucket jetstream.KeyValue
	err := retryJS(ctx, func(ctx context.Context) (err error) {
		bucket, err = kvjs.Bind(ctx, p.js, name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	return bucket, nil
}

// openApprovals opens the authorization stage's approval records: in the
// store (Pebble, its expiry timers fired by the scheduler) with a local
// journal; on the approvals bucket, shared by every processor, with a
// replicated one, its expiry timers message schedules in the
// authorization stream.
func (p *Processor) openApprovals(ctx context.Context) error {
	local, err := pebble.NewApprovals(p.store)
	if err != nil {
		return err
	}
	if !p.cfg.ReplicatedJournal() {
		p.approvals = local
		return nil
	}
	// Proposals parked in this store would wait for timers and grants that
	// the replicated approvals do not know, unless processor migrate moved
	// them into the bucket.
	_, moved, err := p.store.Migrated()
	if err != nil {
		return err
	}
	if n := local.Count(); n > 0 && !moved {
		return fmt.Errorf("engine: store.dir %s holds %d proposals parked for approval in a local store, which replicated approvals would not see: move them with processor migrate --config FILE (processor stopped), or set store.journal = \"local\" until they are decided", p.cfg.Store.Dir, n)
	}
	bucket, err := p.bind(ctx, p.subj.ApprovalsBucket())
	if err != nil {
		return err
	}
	r, err := kvjs.NewApprovals(ctx, kvjs.ApprovalsOptions{
		KV: bucket, Writer: p.self, Log: p.log.With("component", "approvals"),
		Timers: &kvjs.Schedules{JS: p.js, Subjects: p.subj, Seal: p.seal, Legacy: p.legacy},
	})
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	p.approvals, p.closeApprovals = r, r.Close
	return nil
}

func journalKind(c *config.Config) string {
	if c.ReplicatedJournal() {
		return config.JournalReplicated
	}
	return config.JournalLocal
}

// watchStore stops the processor once Pebble reported a fatal error (a
// failed WAL write or sync): nothing can be checkpointed any more, and a
// restart replays the WAL into a consistent store.
func (p *Processor) watchStore(ctx context.Context) {
	every(ctx, 250*time.Millisecond, func() bool {
		if err := p.store.Failed(); err != nil {
			p.fail(fmt.Errorf("processor: store failed: %w", err))
			return false
		}
		return true
	})
}

// every calls f every d until ctx ends or f returns false.
func every(ctx context.Context, d time.Duration, f func() bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if !f() {
				return
			}
		}
	}
}

func (p *Processor) fail(err error) {
	p.errMu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.errMu.Unlock()
	p.log.Error("processor failing", "err", err)
	go p.Close()
}

// Err returns the error that stopped the processor, if any.
func (p *Processor) Err() error {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	return p.err
}

// Done is closed once the processor has stopped.
func (p *Processor) Done() <-chan struct{} { return p.done }

// Close drains the processor: stop fetching, let in-flight messages finish
// (up to the drain timeout), flush publishes, close Pebble, then NATS.
// It is idempotent and returns the error that stopped the processor, if any.
func (p *Processor) Close() error {
	p.closeOnce.Do(func() {
		p.health.stopping.Store(true)
		if p.stopAdmin != nil {
			p.stopAdmin()
		}
		if p.stopFetch != nil {
			p.stopFetch()
			drained := make(chan struct{})
			go func() { p.wg.Wait(); close(drained) }()
			select {
			case <-drained:
			case <-time.After(p.drain):
				p.log.Warn("drain timeout: cancelling in-flight messages; they are redelivered after restart")
				p.stopWork()
				<-drained
			}
			p.stopWork()
		}
		if p.activity != nil {
			// The activity edits still waiting for the edit expected to
			// follow them are written now.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := p.activity.Close(ctx); err != nil {
				p.log.Warn("activity edits still waiting at stop were not written: dispatch applies the permits it is handed again", "err", err)
			}
			cancel()
		}
		p.teardown()
		close(p.done)
		p.log.Info("processor stopped")
	})
	return p.Err()
}

func (p *Processor) teardown() {
	if p.closeApprovals != nil {
		p.closeApprovals()
	}
	if p.nc != nil {
		_ = p.nc.FlushTimeout(5 * time.Second)
	}
	if p.store != nil {
		if err := p.store.Close(); err != nil {
			p.log.Error("closing store", "err", err)
		}
	}
	if p.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = p.httpSrv.Shutdown(ctx)
		cancel()
	} else if p.httpLn != nil {
		_ = p.httpLn.Close() // opened, never served: a start that failed
	}
	if p.nc != nil {
		p.nc.Close()
	}
	if p.srv != nil {
		p.srv.Shutdown()
		p.srv.WaitForShutdown()
	}
	if err := p.natsLock.Release(); err != nil {
		p.log.Error("releasing the nats store_dir lock", "err", err)
	}
}

// countExhausted counts the indeterminate intents whose reconciliation is
// exhausted (actions_indeterminate_exhausted): the journal's index, then
// each record, read as the operator API's queue reads them.
func countExhausted(jr kv.Journal) (int, error) {
	idx, err := jr.Indeterminates()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range idx {
		rec, found, err := jr.Load(e.Fingerprint)
		if err != nil {
			return 0, err
		}
		if found && kv.IndeterminateReceipt(rec.Receipt) && rec.ReconcileExhausted {
			n++
		}
	}
	return n, nil
}

// NATSURL is the client URL of the server the processor uses.
func (p *Processor) NATSURL() string {
	if p.nc == nil {
		return ""
	}
	return p.nc.ConnectedUrl()
}

// MetricsAddr is the metrics endpoint's address ("" when disabled).
func (p *Processor) MetricsAddr() string {
	if p.httpLn == nil {
		return ""
	}
	return p.httpLn.Addr().String()
}

// Metrics returns the processor's metrics.
func (p *Processor) Metrics() *metrics.Metrics { return p.metrics }

// Consumers are the processor's runners and the durable consumers they
// read, from its pipeline (Consumers), in pipeline order: what testenv's
// Quiesce waits on. A new slice each call.
func (p *Processor) Consumers() []Consumer { return slices.Clone(p.consumers) }

// Store returns the processor's Pebble store (for tests and tools running
// in the same process).
func (p *Processor) Store() *pebble.Store { return p.store }

// Approvals returns the authorization stage's approval records (tests).
func (p *Processor) Approvals() kv.Approvals { return p.approvals }

// Journal returns the processor's dispatch journal (for tests and tools
// running in the same process).
func (p *Processor) Journal() kv.Journal { return p.journal }

// InstanceID is the processor's instance id (pebble.Store.InstanceID).
func (p *Processor) InstanceID() string { return p.self }

// Activity returns the activity bucket's store.
func (p *Processor) Activity() *kvjs.Activity { return p.activity }

// StreamInfo describes one of the processor's streams, as the processor
// sees it (internal streams included), for tools in the same process.
func (p *Processor) StreamInfo(ctx context.Context, name string) (*jetstream.StreamInfo, error) {
	s, err := p.js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("engine: stream %s: %w", name, err)
	}
	return s.Info(ctx)
}

// Subjects returns the processor's subjects.
func (p *Processor) Subjects() subjects.Subjects { return p.subj }
