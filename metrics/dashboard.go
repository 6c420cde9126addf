package metrics

import _ "embed"

// Dashboard is the Grafana dashboard shipped with Portcullis
// (metrics/dashboard.json; import it in Grafana and pick the Prometheus data
// source, or provision it with metrics/grafana/provisioning). Tests check
// that every metric, label and label value it queries exists.
//
//go:embed dashboard.json
var Dashboard []byte
