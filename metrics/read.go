package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// StageCounts returns how many messages a stage finished so far, by
// result (the closed set of Results), as actions_stage_messages_total
// counts them. The operator API's status reads it (no scrape needed).
func (m *Metrics) StageCounts(stage string) map[string]uint64 {
	out := make(map[string]uint64, len(Results()))
	for _, r := range Results() {
		out[r] = uint64(value(m.StageMessages.WithLabelValues(stage, r)))
	}
	return out
}

// ConsumerLag returns a stage consumer's pending and ack-pending messages
// as the background loop last read them (0 before the first read).
func (m *Metrics) ConsumerLag(stage string) (pending, ackPending uint64) {
	return uint64(value(m.ConsumerPending.WithLabelValues(stage))), uint64(value(m.ConsumerAckPending.WithLabelValues(stage)))
}

// value reads a counter's or gauge's current value.
func value(c prometheus.Metric) float64 {
	var d dto.Metric
	if c.Write(&d) != nil {
		return 0
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	}
	return 0
}
