package metrics

import _ "embed"

// Dashboard is the Grafana dashboard shipped with Portcullis
// (metrics/dashboard.json; import it in Grafana, pick the Prometheus data
// source). Tests check that every metric it queries exists.
//
//go:embed dashboard.json
var Dashboard []byte
