package console

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// The live parts: the console receives `<prefix>.outcomes.>` and
// `<prefix>.incidents.>` as an operator may (core NATS subscriptions, no
// consumer), keeps the latest incident events for the overview, and tells
// every open page over server-sent events that something changed; the
// page's script then fetches its live fragment again. The events carry
// only closed codes and kinds.

const (
	// recentIncidents is how many incident events the overview shows.
	recentIncidents = 25
	// clientBuffer bounds the events waiting for one slow browser; more
	// are dropped (the next one, or the page's periodic refresh, catches
	// up: every event means only "refresh").
	clientBuffer = 16
	// heartbeat keeps idle event streams open through proxies.
	heartbeat = 15 * time.Second
)

// liveEvent is one server-sent event.
type liveEvent struct {
	name string // "outcome" or "incident"
	data []byte // JSON
}

type hub struct {
	log  *slog.Logger
	subs []*nats.Subscription
	done chan struct{}

	mu        sync.Mutex
	closed    bool
	clients   map[chan liveEvent]struct{}
	incidents []schema.IncidentEvent // newest last, at most recentIncidents
}

func startHub(nc *nats.Conn, subj subjects.Subjects, log *slog.Logger) (*hub, error) {
	h := &hub{log: log, done: make(chan struct{}), clients: map[chan liveEvent]struct{}{}}
	for _, s := range []struct {
		subject string
		handle  nats.MsgHandler
	}{{subj.Outcomes(), h.outcome}, {subj.Incidents(), h.incident}} {
		sub, err := nc.Subscribe(s.subject, s.handle)
		if err != nil {
			h.close()
			return nil, fmt.Errorf("console: subscribe %s: %w", s.subject, err)
		}
		h.subs = append(h.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		h.close()
		return nil, fmt.Errorf("console: subscribe: %w", err)
	}
	return h, nil
}

// preload fills the recent incidents from the stream (older than any
// received live), so the overview is not empty after a restart.
func (h *hub) preload(read func() ([]schema.IncidentEvent, error)) {
	evs, err := read()
	if err != nil {
		h.log.Warn("console: recent incident events unavailable", "err", err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.incidents = append(evs, h.incidents...)
	if n := len(h.incidents); n > recentIncidents {
		h.incidents = h.incidents[n-recentIncidents:]
	}
}

func (h *hub) outcome(m *nats.Msg) {
	var o schema.Outcome
	if schema.Decode(m.Data, &o) != nil {
		return
	}
	h.broadcast(liveEvent{name: "outcome", data: mustJSON(map[string]any{"kind": o.Kind, "terminal": o.Terminal, "at_ms": o.AtMs})})
}

func (h *hub) incident(m *nats.Msg) {
	var e schema.IncidentEvent
	if schema.Decode(m.Data, &e) != nil {
		return
	}
	h.mu.Lock()
	h.incidents = append(h.incidents, e)
	if len(h.incidents) > recentIncidents {
		h.incidents = h.incidents[1:]
	}
	h.mu.Unlock()
	h.broadcast(liveEvent{name: "incident", data: mustJSON(e)})
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// recent returns the latest incident events, newest first.
func (h *hub) recent() []schema.IncidentEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]schema.IncidentEvent, len(h.incidents))
	for i, e := range h.incidents {
		out[len(out)-1-i] = e
	}
	return out
}

func (h *hub) broadcast(e liveEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.clients {
		select {
		case c <- e:
		default: // a slow browser misses a "refresh": the next one will do
		}
	}
}

// join registers a browser; leave must follow. ok is false once the hub
// is closed.
func (h *hub) join() (chan liveEvent, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, false
	}
	c := make(chan liveEvent, clientBuffer)
	h.clients[c] = struct{}{}
	return c, true
}

func (h *hub) leave(c chan liveEvent) {
	h.mu.Lock()
	delete(h.clients, c)
	h.mu.Unlock()
}

// close ends the subscriptions and every event stream.
func (h *hub) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	close(h.done)
	h.mu.Unlock()
	for _, s := range h.subs {
		_ = s.Unsubscribe()
	}
}

// serveEvents is GET /events: a server-sent event stream of "outcome" and
// "incident" events until the browser leaves or the console closes.
func (h *hub) serveEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	c, ok := h.join()
	if !ok {
		http.Error(w, "the console is stopping", http.StatusServiceUnavailable)
		return
	}
	defer h.leave(c)
	// A stream outlives the server's ReadTimeout, which would otherwise
	// end it (and cancel its request) after 30 s.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprint(w, "retry: 3000\n: live\n\n")
	fl.Flush()
	t := time.NewTicker(heartbeat)
	defer t.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-h.done:
			return
		case <-t.C:
			_, _ = fmt.Fprint(w, ": ping\n\n")
		case e := <-c:
			_, _ = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.name, e.data)
		}
		fl.Flush()
	}
}
