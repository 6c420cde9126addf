package admin

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// The status verb (status.get) is what an operator's overview needs and
// the rest of the API does not give: the indeterminate and pending-approval
// counts, and for every processor on the NATS system its readiness and,
// per stage, the messages it finished and its consumer's lag.
//
// One processor answers (the queue group, like every verb: a request is
// signed and its nonce used once), so it asks its peers for theirs the way
// `nats micro stats` does: the $SRV.STATS request of the service, which
// every processor answers with, as the status endpoint's statistics data,
// its own ProcessorStatus (Server.Self). $SRV lives in the processor's own
// account, which no role imports (SPEC §2.8): operators still reach only
// `<prefix>.admin.>`.

// StatusEndpoint is the micro endpoint name of status.get.
const StatusEndpoint = "status-get"

// Gathering the peers' statuses: the first answer is waited for up to
// gatherFirst, then answers are collected until none came for gatherQuiet
// (at most gatherMost in all). A processor that answers later is left out
// of this reply, not lost: the next request finds it.
const (
	gatherFirst = 2 * time.Second
	gatherQuiet = 250 * time.Millisecond
	gatherMost  = 3 * time.Second
)

// StatusRequest asks for the overview (verb status.get).
type StatusRequest struct {
	Stamp `json:",inline"`
}

// Status is the overview at the answering processor's time.
type Status struct {
	NowMs int64 `json:"now_ms"`
	// Indeterminate is the number of intents whose effect is unknown and
	// ApprovalsPending of proposals parked for a grant: cluster-wide, as
	// actions_indeterminate_actions and actions_approvals_pending.
	Indeterminate    int `json:"indeterminate"`
	ApprovalsPending int `json:"approvals_pending"`
	// Processors are the processors that answered, the answering one first.
	Processors []ProcessorStatus `json:"processors"`
	// Operator is the configured name of the operator block whose key
	// signed the request ("" for an unsigned one): who the asker acts as.
	Operator string `json:"operator,omitempty"`
}

// ProcessorStatus is one processor as it sees itself.
type ProcessorStatus struct {
	// ID is the processor's instance id (its store's), Version its module
	// version (SemVer).
	ID          string `json:"id"`
	Version     string `json:"version"`
	StartedAtMs int64  `json:"started_at_ms"`
	// Ready and Reason are what its /readyz says: Reason is the value-free
	// reason of a 503 ("" when ready).
	Ready  bool   `json:"ready"`
	Reason string `json:"reason"`
	// Stages are the stage consumers in the pipeline's order (a Scheduled
	// stage's timers have a consumer of their own, `<stage>_timers`).
	Stages []StageStatus `json:"stages"`
}

// StageStatus is one stage on one processor: the messages it finished
// since the processor started, by result (actions_stage_messages_total),
// and the stage consumer's lag as the processor last read it
// (actions_consumer_pending_messages and _ack_pending_messages; the
// consumer is shared by every processor, so they agree but for the moment
// of reading).
type StageStatus struct {
	// Stage is the consumer's name: the `stage` label of the metrics.
	Stage      string `json:"stage"`
	Consuming  bool   `json:"consuming"`
	Forwarded  uint64 `json:"forwarded"`
	Outcome    uint64 `json:"outcome"`
	Consumed   uint64 `json:"consumed"`
	Retry      uint64 `json:"retry"`
	GaveUp     uint64 `json:"gave_up"`
	Rejected   uint64 `json:"rejected"`
	Pending    uint64 `json:"pending"`
	AckPending uint64 `json:"ack_pending"`
}

// Finished is how many messages the stage is done with: every result but
// retry (a retried message is finished later, once).
func (s StageStatus) Finished() uint64 {
	return s.Forwarded + s.Outcome + s.Consumed + s.GaveUp + s.Rejected
}

// Status returns the overview: the counts and every processor's status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	return call[Status](ctx, c, subjects.AdminStatus, &StatusRequest{})
}

// statsData is what the service's $SRV.STATS carries for the status
// endpoint: this processor's status (nil for the other endpoints, or
// without Self).
func (s *Server) statsData(e *micro.Endpoint) any {
	if e == nil || e.Name != StatusEndpoint || s.Self == nil {
		return nil
	}
	st := s.Self()
	return &st
}

func (s *Server) status(operator string, _ *StatusRequest) (*Status, *Error) {
	n, err := s.Journal.CountIndeterminate()
	if err != nil {
		return nil, s.internal("counting indeterminate actions", err)
	}
	out := &Status{NowMs: stages.NowMs(s.Clock), Indeterminate: n, ApprovalsPending: s.Approvals.Count(), Processors: []ProcessorStatus{}, Operator: operator}
	if s.Self != nil {
		out.Processors = append(out.Processors, s.Self())
	}
	for _, p := range s.peers() {
		if !slices.ContainsFunc(out.Processors, func(q ProcessorStatus) bool { return q.ID == p.ID }) {
			out.Processors = append(out.Processors, p)
		}
	}
	return out, nil
}

// peers asks every processor's service for its statistics and returns the
// statuses they carry, in the order they came. Failures leave peers out:
// the overview is still worth having.
func (s *Server) peers() []ProcessorStatus {
	nc := s.nc.Load()
	if nc == nil {
		return nil
	}
	subject, err := micro.ControlSubject(micro.StatsVerb, ServiceName, "")
	if err != nil {
		return nil
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		s.log().Warn("admin: status: cannot gather processors", "err", err)
		return nil
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		s.log().Warn("admin: status: cannot gather processors", "err", err)
		return nil
	}
	var out []ProcessorStatus
	deadline := time.Now().Add(gatherMost)
	wait := gatherFirst
	for {
		wait = min(wait, time.Until(deadline))
		if wait <= 0 {
			return out
		}
		m, err := sub.NextMsg(wait)
		if err != nil {
			return out // quiet long enough, or the connection is gone
		}
		wait = gatherQuiet
		if p, ok := statusOf(m); ok {
			out = append(out, p)
		}
	}
}

// statusOf reads a processor's status from its $SRV.STATS answer.
func statusOf(m *nats.Msg) (ProcessorStatus, bool) {
	var st micro.Stats
	if err := json.Unmarshal(m.Data, &st); err != nil {
		return ProcessorStatus{}, false
	}
	for _, e := range st.Endpoints {
		if e == nil || e.Name != StatusEndpoint || len(e.Data) == 0 {
			continue
		}
		var p ProcessorStatus
		if json.Unmarshal(e.Data, &p) == nil && p.ID != "" {
			return p, true
		}
	}
	return ProcessorStatus{}, false
}
