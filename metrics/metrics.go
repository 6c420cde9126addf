// Package metrics defines Portcullis's Prometheus metrics on a dedicated
// registry. Every label value comes from a closed set (stages, results,
// phases, codes, statuses) or from configured provider names; every
// combination is created up front so series start at zero.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// Results of one stage message (label `result`).
const (
	ResultForwarded = "forwarded" // handed to the next stage
	ResultOutcome   = "outcome"   // ended (or parked) with an outcome
	ResultConsumed  = "consumed"  // nothing to publish: a duplicate, a no-op timer, an event-only incident
	ResultRetry     = "retry"     // failed transiently; redelivered later
	ResultGaveUp    = "gave_up"   // retries exhausted; ended with a closed-code outcome
	ResultRejected  = "rejected"  // an internal message that failed its seal; terminated unread
)

// Results lists the closed set of stage results.
var Results = []string{ResultForwarded, ResultOutcome, ResultConsumed, ResultRetry, ResultGaveUp, ResultRejected}

// Reconciliation attempt statuses (label `status`): the provider's answer,
// or why there was none.
const (
	AttemptConfirmed            = schema.ReplyConfirmed
	AttemptRejected             = schema.ReplyRejected
	AttemptFailedBeforeDispatch = schema.ReplyFailedBeforeDispatch
	AttemptIndeterminate        = schema.ReplyIndeterminate
	AttemptMalformed            = "malformed"
	AttemptUnavailable          = "unavailable"
	AttemptError                = "error"
	AttemptReplayed             = "replayed" // a checkpointed attempt seen again: not queried twice
)

// AttemptStatuses lists the closed set of attempt statuses.
var AttemptStatuses = []string{AttemptConfirmed, AttemptRejected, AttemptFailedBeforeDispatch, AttemptIndeterminate, AttemptMalformed, AttemptUnavailable, AttemptError, AttemptReplayed}

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
	// (reconciliation_required receipts, exhausted ones included).
	Indeterminate prometheus.Gauge
	// ApprovalsPending is the number of proposals parked for a grant.
	ApprovalsPending prometheus.Gauge
}

// New creates the metrics on a new registry, with series for the given
// provider names.
func New(providers []string) *Metrics {
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
		Indeterminate: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "actions_indeterminate_actions",
			Help: "Fingerprints whose provider effect is unknown (reconciliation required).",
		}),
		ApprovalsPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "actions_approvals_pending",
			Help: "Proposals parked waiting for a grant.",
		}),
	}
	m.Registry.MustRegister(
		m.StageMessages, m.StageDuration, m.Incidents, m.Dispatches, m.DispatchDuration,
		m.ReconcileAttempts, m.Indeterminate, m.ApprovalsPending,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	for _, st := range subjects.Stages {
		m.StageDuration.WithLabelValues(st)
		for _, r := range Results {
			m.StageMessages.WithLabelValues(st, r)
		}
	}
	for _, c := range schema.Codes {
		m.Incidents.WithLabelValues(c.Phase, c.Code)
	}
	for _, p := range providers {
		m.DispatchDuration.WithLabelValues(p)
		for _, s := range schema.ReceiptStatuses {
			m.Dispatches.WithLabelValues(p, s)
		}
		for _, s := range AttemptStatuses {
			m.ReconcileAttempts.WithLabelValues(p, s)
		}
	}
	return m
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}
