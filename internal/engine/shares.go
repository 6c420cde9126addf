package engine

import (
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/internal/shares"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// historyShares is the ledger of each host's share of the history streams
// (package shares): of the outcomes (by the host in each subject; at most
// streams.host_history_max_msgs messages too), of the incident events and
// of the activity snapshots (by their subjects.HostHeader), each within
// streams.host_history_max_bytes. Messages of an earlier version, which
// name no share, age out by the streams' own limits.
func (p *Processor) historyShares() *shares.Ledger {
	s, lim := p.subj, p.cfg.Streams
	maxBytes := min(lim.HostHistoryMaxBytes, lim.HistoryMaxBytes)
	byHeader := func(_ string, hdr nats.Header) (string, bool) {
		v := hdr.Get(subjects.HostHeader)
		return v, v != ""
	}
	return &shares.Ledger{
		JS:  p.js,
		Log: p.log.With("component", "history-shares"),
		Streams: []shares.Stream{
			{
				Name: s.OutcomesStream(),
				Share: func(subject string, _ nats.Header) (string, bool) {
					h, _, ok := s.ParseOutcome(subject)
					return h, ok
				},
				MaxBytes: maxBytes, MaxMsgs: lim.HostHistoryMaxMsgs,
				Filter: s.HostOutcomes,
			},
			{Name: s.IncidentsStream(), Share: byHeader, MaxBytes: maxBytes},
			{
				Name: "KV_" + s.ActivityBucket(), Share: byHeader, MaxBytes: maxBytes, Keyed: true,
			},
		},
	}
}

// share is the share host's history counts in: its own if it is a
// configured host, else the one for everything no configured host is
// known to have caused. With unsigned input allowed (local development),
// where any subject token is a host, each token is a share, as each is
// for the outcomes.
func (p *Processor) share(host string) string {
	if _, ok := p.cfg.Host(host); ok || !perHost(p.cfg) && subjects.ValidHost(host) {
		return host
	}
	return subjects.Unattributed
}

// eventShare is stages.Deps.EventShare: the share an incident event
// counts in — the host of the outcome it is part of; else the host the
// input names, if it is authenticated (an ingress stream is its host's
// alone; a sealed hand-off's token is the processor's word) — and whether
// that share may still publish one of that phase and code
// (streams.host_incident_rate). A suppressed event is counted in
// actions_incidents_suppressed_total, and in actions_incidents_total as
// every incident is.
func (p *Processor) eventShare(host string, in *stages.Input, inc schema.Incident) (string, bool) {
	share := subjects.Unattributed
	switch {
	case host != "":
		share = p.share(host)
	case in == nil || inc.Code == schema.CodeInternalMessageRejected:
		// Not authenticated: its subject names whom anyone likes.
	default:
		if h, ok := p.subj.IngressHost(in.Subject); ok {
			share = p.share(h)
		} else if _, _, id, ok := p.subj.ParseStage(in.Subject); ok {
			if h, _, ok := subjects.ParseProposalToken(id); ok {
				share = p.share(h)
			}
		}
	}
	if p.rations.allow(share, inc, time.Now()) {
		return share, true
	}
	p.metrics.IncidentsSuppressed.WithLabelValues(string(inc.Phase), string(inc.Code)).Inc()
	p.metrics.Incidents.WithLabelValues(string(inc.Phase), string(inc.Code)).Inc()
	return "", false
}

// rations are token buckets, one per share, phase and code: rate events
// a second, up to ten seconds' worth at once.
type rations struct {
	rate float64
	mu   sync.Mutex
	b    map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newRations(rate int) *rations {
	return &rations{rate: float64(rate), b: map[string]*bucket{}}
}

// allow takes a token of share's bucket for inc, if it has one.
func (r *rations) allow(share string, inc schema.Incident, now time.Time) bool {
	key := strings.Join([]string{share, string(inc.Phase), string(inc.Code)}, "/")
	burst := 10 * r.rate
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.b[key]
	if b == nil {
		b = &bucket{tokens: burst, at: now}
		r.b[key] = b
	}
	b.tokens = min(burst, b.tokens+now.Sub(b.at).Seconds()*r.rate)
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
