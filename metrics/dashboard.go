package metrics

import (
	_ "embed"
	"slices"
)

//go:embed dashboard.json
var dashboard []byte

// Dashboard returns the Grafana dashboard shipped with Portcullis
// (metrics/dashboard.json; import it in Grafana and pick the Prometheus data
// source, or provision it with metrics/grafana/provisioning). Tests check
// that every metric, label and label value it queries exists.
func Dashboard() []byte { return slices.Clone(dashboard) }
