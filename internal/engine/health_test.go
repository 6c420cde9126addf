package engine_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// fastLag reads consumer info often, so that tests see it move quickly.
var fastLag = testenv.WithEngine(func(o *engine.Options) { o.LagPoll = 50 * time.Millisecond })

// client keeps no idle connections (goleak).
var client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func get(t *testing.T, method, url string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body), resp.Header
}

// waitFor polls cond until it holds; the test fails after
// testenv.WaitTimeout with what was last seen.
func waitFor(t *testing.T, cond func() (bool, string)) {
	t.Helper()
	var seen string
	if !testenv.Poll(testenv.WaitTimeout, func() (ok bool) { ok, seen = cond(); return ok }) {
		t.Fatalf("timed out after %s; last seen: %s", testenv.WaitTimeout, seen)
	}
}

// waitReadyz polls /readyz until it answers code with body.
func waitReadyz(t *testing.T, addr string, code int, body string) {
	t.Helper()
	waitFor(t, func() (bool, string) {
		c, b, _ := get(t, http.MethodGet, "http://"+addr+"/readyz")
		return c == code && b == body, fmt.Sprintf("%d %q", c, b)
	})
}

func TestHealthzAndReadyz(t *testing.T) {
	env := testenv.New(t, fastLag)
	p := env.Processor()
	base := "http://" + p.MetricsAddr()

	code, body, hdr := get(t, http.MethodGet, base+"/healthz")
	if code != http.StatusOK || body != "ok\n" || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
		t.Errorf("/healthz: %d %q %v", code, body, hdr)
	}
	waitReadyz(t, p.MetricsAddr(), http.StatusOK, "ok\n")
	if v := testutil.ToFloat64(p.Metrics().Ready); v != 1 {
		t.Errorf("actions_ready = %v while /readyz answers 200", v)
	}
	if code, _, _ := get(t, http.MethodHead, base+"/readyz"); code != http.StatusOK {
		t.Errorf("HEAD /readyz: %d", code)
	}
	if code, _, _ := get(t, http.MethodPost, base+"/readyz"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /readyz: %d", code)
	}
	code, body, _ = get(t, http.MethodGet, base+"/metrics")
	if code != http.StatusOK || !strings.Contains(body, "\nactions_ready 1\n") {
		t.Errorf("/metrics: %d, actions_ready 1 missing", code)
	}
}

// NATS going away makes the processor not ready, and says so; it comes
// back by itself when the server does, and processes again.
func TestReadyzFollowsNATS(t *testing.T) {
	env := testenv.New(t, fastLag)
	p := env.Processor()
	addr := p.MetricsAddr()
	waitReadyz(t, addr, http.StatusOK, "ok\n")

	env.Server.Shutdown()
	waitReadyz(t, addr, http.StatusServiceUnavailable, "nats: disconnected\n")
	if v := testutil.ToFloat64(p.Metrics().Ready); v != 0 {
		t.Errorf("actions_ready = %v while /readyz answers 503", v)
	}
	if code, body, _ := get(t, http.MethodGet, "http://"+addr+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while NATS is down: %d %q", code, body)
	}

	env.RestartServer(t)
	waitReadyz(t, addr, http.StatusOK, "ok\n")
	// The log says what the connection did.
	env.Logs.Wait(t, `"msg":"nats disconnected; reconnecting"`)
	env.Logs.Wait(t, `"msg":"nats reconnected"`)
	if v := testutil.ToFloat64(p.Metrics().Ready); v != 1 {
		t.Errorf("actions_ready = %v after NATS came back", v)
	}
	env.PublishSigned(t, testenv.Granted(t, testenv.Lumber("after-outage"), "sku-1001", time.Now()), env.Host)
	if o := env.Recorder.Wait(t, "after-outage", testenv.Terminal); o.Kind != schema.KindConfirmed {
		t.Errorf("outcome after the outage: %+v", o)
	}
	select {
	case <-p.Done():
		t.Fatalf("the processor stopped: %v", p.Err())
	default:
	}
}

// The new series exist from the start and move: build info, outcomes by
// kind, and each stage consumer's pending and ack-pending counts.
func TestOperationsMetrics(t *testing.T) {
	env := testenv.New(t, fastLag, testenv.WithConfig(func(c *config.Config) {
		for i := range c.Providers {
			c.Providers[i].Timeout = time.Minute // held below, never timed out
		}
	}))
	p := env.Processor()
	m := p.Metrics()
	lint(t, m)
	version, revision, goVersion := metrics.Build()
	if v := testutil.ToFloat64(m.BuildInfo.WithLabelValues(version, revision, goVersion)); v != 1 {
		t.Errorf("actions_build_info = %v", v)
	}
	if n := testutil.CollectAndCount(m.ConsumerPending); n != len(stageNames(env.Config)) {
		t.Errorf("%d consumer pending series, want %d", n, len(stageNames(env.Config)))
	}
	if n := testutil.CollectAndCount(m.ConsumerAckPending); n != len(stageNames(env.Config)) {
		t.Errorf("%d consumer ack pending series, want %d", n, len(stageNames(env.Config)))
	}
	ackPending := func(stage string) float64 { return testutil.ToFloat64(m.ConsumerAckPending.WithLabelValues(stage)) }
	confirmed := func() float64 { return testutil.ToFloat64(m.Outcomes.WithLabelValues(string(schema.KindConfirmed))) }
	if v := confirmed(); v != 0 {
		t.Errorf("CONFIRMED outcomes = %v before any proposal", v)
	}

	// The provider holds every dispatch until released: the dispatch
	// consumer has messages delivered and not acknowledged meanwhile.
	release := make(chan struct{})
	var held atomic.Int32
	env.Fakes["demo"].OnDispatch(func(ctx context.Context, _ schema.DispatchRequest) (schema.AdapterReply, error) {
		held.Add(1)
		select {
		case <-release:
			return schema.AdapterReply{Outcome: schema.ReplyConfirmed}, nil
		case <-ctx.Done():
			return schema.AdapterReply{}, ctx.Err()
		}
	})
	const n = 3
	for i := range n {
		prop := testenv.Lumber(fmt.Sprintf("ops-%d", i))
		testenv.Set(prop, "intent.payload", map[string]any{"quantity": 20 + i}) // a fingerprint each
		env.PublishSigned(t, testenv.Granted(t, prop, "sku-1001", time.Now()), env.Host)
	}
	waitFor(t, func() (bool, string) {
		return ackPending(subjects.StageDispatch) >= 1, fmt.Sprintf("dispatch ack pending %v, held %d", ackPending(subjects.StageDispatch), held.Load())
	})
	close(release)
	for i := range n {
		if o := env.Recorder.Wait(t, fmt.Sprintf("ops-%d", i), testenv.Terminal); o.Kind != schema.KindConfirmed {
			t.Errorf("ops-%d: %+v", i, o)
		}
	}
	waitFor(t, func() (bool, string) {
		return confirmed() == n, fmt.Sprintf("CONFIRMED outcomes %v", confirmed())
	})
	waitFor(t, func() (bool, string) {
		var seen []string
		all := true
		for _, st := range stageNames(env.Config) {
			pending := testutil.ToFloat64(m.ConsumerPending.WithLabelValues(st))
			seen = append(seen, fmt.Sprintf("%s %v/%v", st, pending, ackPending(st)))
			all = all && pending == 0 && ackPending(st) == 0
		}
		return all, strings.Join(seen, ", ")
	})

	code, body, _ := get(t, http.MethodGet, "http://"+p.MetricsAddr()+"/metrics")
	for _, want := range []string{
		fmt.Sprintf("actions_build_info{go_version=%q,revision=%q,version=%q} 1", goVersion, revision, version),
		fmt.Sprintf(`actions_outcomes_total{kind="CONFIRMED"} %d`, n),
		`actions_outcomes_total{kind="DENIED"} 0`,
		`actions_consumer_pending_messages{stage="dispatch"} 0`,
		`actions_consumer_ack_pending_messages{stage="dispatch"} 0`,
	} {
		if code != http.StatusOK || !strings.Contains(body, "\n"+want+"\n") {
			t.Errorf("/metrics (%d) lacks %s", code, want)
		}
	}
	lint(t, m)
}

func lint(t *testing.T, m *metrics.Metrics) {
	t.Helper()
	problems, err := testutil.GatherAndLint(m.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// stageNames are the default pipeline's stage names.
// stageNames are the default pipeline's consumers: every `stage` label.
func stageNames(c *config.Config) []string {
	var out []string
	for _, c := range engine.Consumers(subjects.Default(), c, engine.Pipeline(), nil) {
		out = append(out, c.Name)
	}
	return out
}
