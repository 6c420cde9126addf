package engine

import (
	"errors"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/portcullis/portcullis/stages"
)

// health is what /readyz and actions_ready read. Everything in it is an
// atomic or a cheap check: a probe or a scrape never waits on the network.
type health struct {
	// stopping is set when Close begins (a fatal error included).
	stopping atomic.Bool
	// natsFull is set while the embedded server's store has no space
	// (watchEmbedded).
	natsFull atomic.Bool
	// lowDisk is the configuration key of a store directory whose disk is
	// below DiskReserve, "" while every one has room (watchDisks).
	lowDisk atomicString
	// stages is set once the stage runners run (watchStages).
	stages atomic.Pointer[[]*stageWatch]
	// refused counts, by stage, the inputs whose hand-off the stage's
	// stream refused because it is full and that still wait for room
	// (stages.Deps.OnFull): the stage is full while its count is above 0.
	mu      sync.Mutex
	refused map[string]int
}

// fullStages lists the stages whose stream is full, sorted.
func (h *health) fullStages() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for stage, n := range h.refused {
		if n > 0 {
			out = append(out, stage)
		}
	}
	slices.Sort(out)
	return out
}

// atomicString is a string read and swapped atomically.
type atomicString struct{ v atomic.Value }

func (a *atomicString) Load() string { s, _ := a.v.Load().(string); return s }

func (a *atomicString) Swap(s string) string { old, _ := a.v.Swap(s).(string); return old }

// refusal counts an input's refusal by stage's stream (full), or its end
// (not full), and calls changed, under its lock, when the stage became
// full or stopped being full with it.
func (h *health) refusal(stage string, full bool, changed func(full bool)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refused == nil {
		h.refused = map[string]int{}
	}
	n := h.refused[stage]
	switch {
	case full:
		n++
	case n > 0:
		n--
	}
	h.refused[stage] = n
	if full && n == 1 || !full && n == 0 {
		changed(full)
	}
}

// stageWatch is one stage runner and what the lag loop last learnt of its
// consumer.
type stageWatch struct {
	r *stages.Runner
	// infoFailed is set while the last read of the consumer's info failed
	// (JetStream without a leader, the consumer gone, a timeout).
	infoFailed atomic.Bool
}

// stageState is one stage as readiness sees it.
type stageState struct {
	name      string
	consuming bool // the runner's message iterator runs
	reachable bool // the last read of its consumer's info succeeded
}

// Reasons /readyz gives for 503. They name components and stages (a closed
// set), never a value.
const (
	reasonStopping     = "processor: stopping"
	reasonNATS         = "nats: disconnected"
	reasonNATSFull     = "nats: store full (no space left on device)"
	reasonStoreClosed  = "store: not open"
	reasonStoreFailed  = "store: failed"
	reasonStoreFull    = "store: failed: no space left on device"
	reasonLowDisk      = " nearly full" // after "disk: <store.dir or nats.store_dir>": below DiskReserve
	reasonStarting     = "stages: starting"
	reasonNotConsuming = ": not consuming"        // after "stage <name>"
	reasonNoConsumer   = ": consumer unavailable" // after "stage <name>"
	reasonFull         = " full"                  // after "stage <name>": its stream refuses hand-offs
)

// readiness decides readiness from what was observed: the first failing
// condition, in the order the processor depends on them, is the reason.
func readiness(stopping, natsConnected, natsFull, storeOpen bool, storeErr error, lowDisk string, sts []stageState, full []string) (ready bool, reason string) {
	switch {
	case stopping:
		return false, reasonStopping
	case !natsConnected:
		return false, reasonNATS
	case natsFull:
		return false, reasonNATSFull
	case !storeOpen:
		return false, reasonStoreClosed
	case errors.Is(storeErr, syscall.ENOSPC):
		return false, reasonStoreFull
	case storeErr != nil:
		return false, reasonStoreFailed
	case lowDisk != "":
		// Nothing lost: the stages take no new input until there is room.
		return false, "disk: " + lowDisk + reasonLowDisk
	case sts == nil:
		return false, reasonStarting
	}
	for _, s := range sts {
		if !s.consuming {
			return false, "stage " + s.name + reasonNotConsuming
		}
	}
	for _, s := range sts {
		if !s.reachable {
			return false, "stage " + s.name + reasonNoConsumer
		}
	}
	if len(full) > 0 {
		// Back-pressure: nothing is lost, but the pipeline waits.
		return false, "stage " + full[0] + reasonFull
	}
	return true, ""
}

// readiness reports whether the processor is ready and, if not, why:
// NATS connected, the store open and not failed, every stage runner
// consuming and its consumer reachable.
func (p *Processor) readiness() (bool, string) {
	var sts []stageState
	if ws := p.health.stages.Load(); ws != nil {
		sts = make([]stageState, 0, len(*ws))
		for _, w := range *ws {
			sts = append(sts, stageState{name: w.r.Stage(), consuming: w.r.Consuming(), reachable: !w.infoFailed.Load()})
		}
	}
	var storeErr error
	if p.store != nil {
		storeErr = p.store.Failed()
	}
	return readiness(p.health.stopping.Load(), p.nc != nil && p.nc.IsConnected(), p.health.natsFull.Load(), p.store != nil, storeErr, p.health.lowDisk.Load(), sts, p.health.fullStages())
}

// ready is readiness without the reason (actions_ready).
func (p *Processor) ready() bool {
	ok, _ := p.readiness()
	return ok
}

// serveHealthz answers 200 while the process runs.
func (p *Processor) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	plain(w, http.StatusOK, "ok")
}

// serveReadyz answers 200 while the processor is ready, else 503 with the
// reason; then a line for each provider nobody answers (the processor is
// ready, but that provider's dispatches wait).
func (p *Processor) serveReadyz(w http.ResponseWriter, _ *http.Request) {
	var detail string
	if p.reach != nil {
		for _, d := range p.reach.detail() {
			detail += "\n" + d
		}
	}
	if ok, reason := p.readiness(); !ok {
		plain(w, http.StatusServiceUnavailable, reason+detail)
		return
	}
	plain(w, http.StatusOK, "ok"+detail)
}

func plain(w http.ResponseWriter, code int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body + "\n"))
}

// stageFull counts an input whose hand-off stage's stream refused because
// it is full (full), or that no longer waits for it (stages.Deps.OnFull):
// readiness and actions_stage_full say the stage is full from its first
// refusal until none is outstanding.
func (p *Processor) stageFull(stage string, full bool) {
	p.health.refusal(stage, full, func(full bool) {
		if full {
			p.log.Warn("stage stream full: hand-offs wait until there is room", "stage", stage)
			p.metrics.StageFull.WithLabelValues(stage).Set(1)
			return
		}
		p.log.Info("stage stream takes hand-offs again", "stage", stage)
		p.metrics.StageFull.WithLabelValues(stage).Set(0)
	})
}
