// Package metrics defines Portcullis's Prometheus metrics on a dedicated
// registry. Every label value comes from a closed set (stages, results,
// phases, codes, statuses) or from configured provider names; every
// combination is created up front so series start at zero. The one
// exception, actions_build_info, carries the build's own version strings.
package metrics

import (
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	buildversion "github.com/portcullis/portcullis/metrics/version"
	"github.com/portcullis/portcullis/schema"
)

// The closed label sets that are not package schema's (Results,
// AttemptStatuses) are generated from the code table into labels_gen.go
// (`go generate ./schema/...`).

// Metrics holds every metric.
type Metrics struct {
	Registry *prometheus.Registry

	// StageMessages counts messages each stage finished, by result.
	StageMessages *prometheus.CounterVec
	// StageDuration times a stage's handling of one message.
	StageDuration *prometheus.HistogramVec
	// Incidents counts incident events by phase and closed code.
	Incidents *prometheus.CounterVec
	// Dispatches counts dispatch receipts by provider and receipt status.
	Dispatches *prometheus.CounterVec
	// DispatchDuration times provider dispatch calls.
	DispatchDuration *prometheus.HistogramVec
	// ReconcileAttempts counts reconciliation and verification queries.
	ReconcileAttempts *prometheus.CounterVec
	// Indeterminate is the number of fingerprints whose effect is unknown
	// (reconciliation_required receipts, exhausted ones included), read
	// from the journal at each scrape (SetIndeterminateSource).
	Indeterminate prometheus.GaugeFunc
	// IndeterminateExhausted is the part of Indeterminate whose
	// reconciliation is exhausted: terminal RECONCILIATION_REQUIRED,
	// waiting for an operator, read at each scrape
	// (SetExhaustedSource). Indeterminate less this is still polled.
	IndeterminateExhausted prometheus.GaugeFunc
	// ApprovalsPending is the number of proposals parked for a grant: at
	// each scrape, the count given to SetApprovalsPending (the approvals
	// store's), 0 until then.
	ApprovalsPending prometheus.GaugeFunc

	// Outcomes counts outcomes published, by kind (once per outcome: a
	// republished duplicate or a replayed earlier outcome is not counted).
	Outcomes *prometheus.CounterVec
	// ConsumerPending and ConsumerAckPending are each stage consumer's
	// NumPending (not yet delivered) and NumAckPending (delivered, not yet
	// acknowledged), as last read from JetStream by a background loop.
	ConsumerPending    *prometheus.GaugeVec
	ConsumerAckPending *prometheus.GaugeVec
	// StageFull is 1 while a stage's stream refuses hand-offs because it
	// is full (the stage before keeps them and tries again: back-pressure,
	// nothing lost), as this processor last saw it, else 0.
	StageFull *prometheus.GaugeVec
	// ProviderUnreachable is 1 while the provider's last dispatch or
	// reconcile call provably reached nobody (NATS "no responders": no
	// connector serves it; a refused connection), as this processor last
	// saw it, else 0: dispatches to it wait, then end ADAPTER_UNAVAILABLE.
	ProviderUnreachable *prometheus.GaugeVec
	// HostsAtPipelineBound is the number of hosts whose proposals inside
	// the pipeline are at streams.host_pipeline_max_msgs, as this processor
	// last saw: their next proposals and grants wait in their own ingress.
	HostsAtPipelineBound prometheus.Gauge
	// IncidentsSuppressed counts the incident events not published because
	// the host (or the input that named none) that caused them spent its
	// allowance of that phase and code (streams.host_incident_rate).
	IncidentsSuppressed *prometheus.CounterVec
	// BuildInfo is 1, labelled with the build's module version, VCS
	// revision and Go version.
	BuildInfo *prometheus.GaugeVec
	// Ready is 1 while the processor is ready (its /readyz answers 200),
	// else 0; it asks the function given to SetReadiness at each scrape.
	Ready prometheus.GaugeFunc

	ready             atomic.Pointer[func() bool]
	approvals         atomic.Pointer[func() int]
	indeterminate     atomic.Pointer[func() (int, error)]
	lastIndeterminate atomic.Int64
	exhausted         atomic.Pointer[func() (int, error)]
	lastExhausted     atomic.Int64
}

// New creates the metrics on a new registry, with every series of the
// given stages (the pipeline's names) and providers created at zero.
func New(stages, providers []string) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		StageMessages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "actions_stage_messages_total",
			Help: "Messages a stage finished, by result (forwarded, outcome, consumed, retry, gave_up).",
		}, []string{"stage", "result"}),
		StageDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "actions_stage_duration_seconds",
			Help:    "Time a stage spent on one message, publishing included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"stage"}),
		Incidents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "actions_incidents_total",
			Help: "Incident events by phase and closed code.",
		}, []string{"phase", "code"}),
		Dispatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "actions_dispatches_total",
			Help: "Dispatch receipts by provider and receipt status.",
		}, []string{"provider", "status"}),
		DispatchDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "actions_dispatch_duration_seconds",
			Help:    "Provider dispatch call latency, by provider.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"provider"}),
		ReconcileAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "actions_reconciliation_attempts_total",
			Help: "Reconciliation and verification attempts by provider and status.",
		}, []string{"provider", "status"}),
		Outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "actions_outcomes_total",
			Help: "Outcomes published, by kind; republished duplicates and replays of an earlier outcome are not counted.",
		}, []string{"kind"}),
		ConsumerPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "actions_consumer_pending_messages",
			Help: "Messages the stage's JetStream consumer has not delivered yet (NumPending), as last read; the consumer is shared by every processor.",
		}, []string{"stage"}),
		ConsumerAckPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "actions_consumer_ack_pending_messages",
			Help: "Messages the stage's JetStream consumer delivered and awaits acks for (NumAckPending), as last read; the consumer is shared by every processor.",
		}, []string{"stage"}),
		StageFull: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "actions_stage_full",
			Help: "1 while the stage's stream refuses hand-offs because it is full (they are kept and published again once there is room), as this processor last saw it.",
		}, []string{"stage"}),
		ProviderUnreachable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "actions_provider_unreachable",
			Help: "1 while the provider's last call reached nobody (no connector answers; dispatches to it wait, then end ADAPTER_UNAVAILABLE), as this processor last saw it.",
		}, []string{"provider"}),
		HostsAtPipelineBound: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "actions_hosts_at_pipeline_bound",
			Help: "Hosts whose proposals inside the pipeline are at streams.host_pipeline_max_msgs, as this processor last saw: their next proposals and grants wait in their own ingress streams.",
		}),
		IncidentsSuppressed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "actions_incidents_suppressed_total",
			Help: "Incident events not published, by phase and closed code: the host that caused them (or input that named no configured host) spent its allowance (streams.host_incident_rate). actions_incidents_total counts them too.",
		}, []string{"phase", "code"}),
		BuildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "actions_build_info",
			Help: "Always 1; labelled with the processor's module version, VCS revision and Go version.",
		}, []string{"version", "revision", "go_version"}),
	}
	m.Indeterminate = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "actions_indeterminate_actions",
		Help: "Fingerprints whose provider effect is unknown (reconciliation required).",
	}, func() float64 {
		if f := m.indeterminate.Load(); f != nil {
			if n, err := (*f)(); err == nil {
				m.lastIndeterminate.Store(int64(n))
			}
		}
		return float64(m.lastIndeterminate.Load())
	})
	m.IndeterminateExhausted = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "actions_indeterminate_exhausted",
		Help: "Of actions_indeterminate_actions, those whose reconciliation is exhausted: terminal RECONCILIATION_REQUIRED, waiting for an operator to settle them (processor reconcile resolve, the console).",
	}, func() float64 {
		if f := m.exhausted.Load(); f != nil {
			if n, err := (*f)(); err == nil {
				m.lastExhausted.Store(int64(n))
			}
		}
		return float64(m.lastExhausted.Load())
	})
	m.Ready = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "actions_ready",
		Help: "1 while the processor is ready (/readyz answers 200: NATS connected, store open, every stage consuming), else 0.",
	}, func() float64 {
		if f := m.ready.Load(); f != nil && (*f)() {
			return 1
		}
		return 0
	})
	m.ApprovalsPending = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "actions_approvals_pending",
		Help: "Proposals parked waiting for a grant.",
	}, func() float64 {
		if f := m.approvals.Load(); f != nil {
			return float64((*f)())
		}
		return 0
	})
	m.Registry.MustRegister(
		m.StageMessages, m.StageDuration, m.Incidents, m.Dispatches, m.DispatchDuration,
		m.ReconcileAttempts, m.Indeterminate, m.IndeterminateExhausted, m.ApprovalsPending,
		m.Outcomes, m.ConsumerPending, m.ConsumerAckPending, m.StageFull, m.ProviderUnreachable, m.HostsAtPipelineBound, m.IncidentsSuppressed, m.BuildInfo, m.Ready,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.BuildInfo.WithLabelValues(Build()).Set(1)
	for _, k := range schema.Kinds() {
		m.Outcomes.WithLabelValues(string(k))
	}
	for _, st := range stages {
		m.ConsumerPending.WithLabelValues(st)
		m.ConsumerAckPending.WithLabelValues(st)
		m.StageFull.WithLabelValues(st)
		m.StageDuration.WithLabelValues(st)
		for _, r := range Results() {
			m.StageMessages.WithLabelValues(st, r)
		}
	}
	for _, c := range schema.Codes() {
		m.Incidents.WithLabelValues(string(c.Phase), string(c.Code))
		m.IncidentsSuppressed.WithLabelValues(string(c.Phase), string(c.Code))
	}
	for _, p := range providers {
		m.DispatchDuration.WithLabelValues(p)
		m.ProviderUnreachable.WithLabelValues(p)
		for _, s := range schema.Statuses() {
			m.Dispatches.WithLabelValues(p, string(s))
		}
		for _, s := range AttemptStatuses() {
			m.ReconcileAttempts.WithLabelValues(p, s)
		}
	}
	return m
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// SetIndeterminateSource makes Indeterminate report f's count at each
// scrape (until then, and after a failed count, the last one; 0 at first).
// f reads the journal's own index: it must be cheap and must not wait on
// the network.
func (m *Metrics) SetIndeterminateSource(f func() (int, error)) { m.indeterminate.Store(&f) }

// SetExhaustedSource makes IndeterminateExhausted report f's count at
// each scrape (until then, and after a failed count, the last one; 0 at
// first), as SetIndeterminateSource.
func (m *Metrics) SetExhaustedSource(f func() (int, error)) { m.exhausted.Store(&f) }

// SetReadiness makes Ready report f's answer at each scrape (until then it
// reports 0). f must be cheap and must not block: no network calls.
func (m *Metrics) SetReadiness(f func() bool) { m.ready.Store(&f) }

// SetApprovalsPending makes ApprovalsPending report count's answer at each
// scrape (until then it reports 0). count must be cheap and must not block:
// the approvals store keeps it in memory.
func (m *Metrics) SetApprovalsPending(count func() int) { m.approvals.Store(&count) }

// Build returns the labels of actions_build_info: the main module's
// version, its VCS revision and the Go version, as `processor version`
// prints them ("devel" and "unknown" for what the build does not record).
func Build() (version, revision, goVersion string) {
	v := buildversion.Get()
	return v.Version, v.Revision, v.GoVersion
}
