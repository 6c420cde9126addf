package config

import (
	"fmt"
	"time"
)

// Retention defaults.
const (
	// DefaultProposalsMargin is what the default proposals horizon adds
	// to streams.max_age.
	DefaultProposalsMargin = 24 * time.Hour
	// DefaultReceipts is the default receipts horizon (when it is longer
	// than the least allowed).
	DefaultReceipts      = 30 * 24 * time.Hour
	DefaultSweepInterval = time.Minute
)

// Retention says how long the processor's store keeps records after their
// last change, and how often it sweeps (package retention).
type Retention struct {
	// Proposals bounds per-proposal records (delivery and admission
	// records, last outcomes, approval decisions, dispatch-time denials)
	// and grounding checkpoints. 0: streams.max_age + 24h. At least
	// streams.max_age: while a message is in its stream it can be
	// redelivered or replayed, and must be recognized.
	Proposals time.Duration
	// Receipts bounds finished intent journals with their receipts and
	// reconciliation attempts. 0: the longer of 30 days and the least
	// allowed. At least streams.max_age and approval.max_grant_lifetime +
	// approval.clock_skew: every replay that could still reach a provider
	// (a message in a stream, a host's retry under its grant) finds the
	// receipt. Unfinished journals (pending, indeterminate) are kept
	// whatever their age.
	Receipts time.Duration
	// SweepInterval is how often expired records are removed. Default 1m.
	SweepInterval time.Duration
}

// RetentionHorizons are the effective horizons: the configured ones, or
// their defaults derived from the streams and approval settings.
func (c *Config) RetentionHorizons() (proposals, receipts time.Duration) {
	proposals = c.Retention.Proposals
	if proposals == 0 {
		proposals = c.Streams.MaxAge + DefaultProposalsMargin
	}
	receipts = c.Retention.Receipts
	if receipts == 0 {
		receipts = max(DefaultReceipts, c.leastReceipts())
	}
	return proposals, receipts
}

// leastReceipts is the shortest receipts horizon allowed.
func (c *Config) leastReceipts() time.Duration {
	return max(c.Streams.MaxAge, c.Approval.MaxGrantLifetime+c.Approval.ClockSkew)
}

// retentionProblem explains what is wrong with the retention settings and
// names the key at fault, or returns "", "".
func (c *Config) retentionProblem() (attr, msg string) {
	r := c.Retention
	switch {
	case r.Proposals < 0:
		return "proposals", "must not be negative"
	case r.Receipts < 0:
		return "receipts", "must not be negative"
	case r.SweepInterval <= 0:
		return "sweep_interval", "must be positive"
	case r.Proposals != 0 && r.Proposals < c.Streams.MaxAge:
		return "proposals", fmt.Sprintf("%s must be at least streams.max_age (%s): a message still in its stream must be recognized", r.Proposals, c.Streams.MaxAge)
	case r.Receipts != 0 && r.Receipts < c.leastReceipts():
		return "receipts", fmt.Sprintf("%s must be at least streams.max_age and approval.max_grant_lifetime + clock_skew (%s): a replay must find its receipt", r.Receipts, c.leastReceipts())
	}
	return "", ""
}
