package engine

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// listenMetrics opens the metrics listener (metrics.listen; "" disables it).
func (p *Processor) listenMetrics() error {
	if p.cfg.Metrics.Listen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", p.cfg.Metrics.Listen)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			err = op.Err
		}
		return fmt.Errorf("engine: metrics.listen %s: %w", p.cfg.Metrics.Listen, err)
	}
	p.httpLn = ln
	return nil
}

// serveMetrics wires actions_ready to readiness and serves /metrics,
// /healthz and /readyz (health.go) on the listener opened at start.
func (p *Processor) serveMetrics() {
	p.metrics.SetReadiness(p.ready)
	if p.httpLn == nil {
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", p.metrics.Handler())
	mux.HandleFunc("GET /healthz", p.serveHealthz)
	mux.HandleFunc("GET /readyz", p.serveReadyz)
	p.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = p.httpSrv.Serve(p.httpLn) }()
}
