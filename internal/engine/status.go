package engine

import (
	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/metrics/version"
)

// status is this processor's answer to the operator API's status.get
// (admin.Server.Self): what /readyz says, and per stage the messages it
// finished and its consumer's lag as last read. Like /readyz it never
// waits on the network: atomics and counters only.
func (p *Processor) status() admin.ProcessorStatus {
	ready, reason := p.readiness()
	st := admin.ProcessorStatus{
		ID: p.self, Version: version.Get().SemVer(), StartedAtMs: p.startedAt.UnixMilli(),
		Ready: ready, Reason: reason, Stages: []admin.StageStatus{},
	}
	ws := p.health.stages.Load()
	if ws == nil || p.metrics == nil {
		return st
	}
	for _, w := range *ws {
		name := w.r.Stage()
		n := p.metrics.StageCounts(name)
		pending, ackPending := p.metrics.ConsumerLag(name)
		st.Stages = append(st.Stages, admin.StageStatus{
			Stage: name, Consuming: w.r.Consuming(),
			Forwarded: n[metrics.ResultForwarded], Outcome: n[metrics.ResultOutcome], Consumed: n[metrics.ResultConsumed],
			Retry: n[metrics.ResultRetry], GaveUp: n[metrics.ResultGaveUp], Rejected: n[metrics.ResultRejected],
			Pending: pending, AckPending: ackPending,
		})
	}
	return st
}
