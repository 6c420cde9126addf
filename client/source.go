package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// CandidateRequest is what the grounding stage asks a candidate source on
// `<prefix>.candidates.<name>`, for a proposal that names the source in
// grounding.candidate_source. Grounding checked the subject (a non-empty
// string) and the scope (the proposal's security domain) before asking.
type CandidateRequest struct {
	// Subject is the proposal's grounding.subject, as the host sent it:
	// what the user referred to ("the payments API").
	Subject string `json:"subject"`
	// Scope is the security domain the candidates must come from.
	Scope string `json:"scope"`
}

// CandidateReply is a candidate source's answer: the bounded possible
// targets, and the reference of the observation they were read from.
// Grounding then applies its rules to them exactly as to inline candidates:
// exactly one whose attributes.resource matches the subject after
// normalization, or a clarification.
type CandidateReply struct {
	// Candidates may be empty (no match: NEEDS_CLARIFICATION). Each needs
	// a referent and its attributes.resource (a non-empty JSON string).
	Candidates []schema.Candidate `json:"candidates"`
	// ObservationRef names the read (a catalog version, a query id), at
	// most 512 bytes.
	ObservationRef string `json:"observation_ref"`
}

// CandidateHandler answers a candidate source's requests. It is called
// concurrently and should be read-only and quick: the processor waits at
// most grounding.source_timeout (default 2s).
type CandidateHandler interface {
	Candidates(ctx context.Context, req CandidateRequest) (CandidateReply, error)
}

// CandidateFunc adapts a function to a CandidateHandler.
type CandidateFunc func(ctx context.Context, req CandidateRequest) (CandidateReply, error)

// Candidates calls f.
func (f CandidateFunc) Candidates(ctx context.Context, req CandidateRequest) (CandidateReply, error) {
	return f(ctx, req)
}

// SourceConfig configures a CandidateSource.
type SourceConfig struct {
	// Name is the source's name: its `source "<name>"` block and the
	// proposals' grounding.candidate_source (^[a-z0-9_-]{1,64}$). Required.
	Name string
	// Prefix is the processor's subject prefix; empty means "actions".
	Prefix string
	// Queue is the NATS queue group; empty means DefaultQueue.
	Queue string
	// MaxConcurrent bounds handler calls running at once; zero means
	// DefaultMaxConcurrent.
	MaxConcurrent int
	// Logger receives a value-free line for each error reply. Nil discards.
	Logger *slog.Logger
}

// CandidateSource serves `<prefix>.candidates.<name>` with a
// CandidateHandler. Requests are decoded strictly. A handler's error or
// panic, an undecodable request, and a reply that grounding would refuse
// (an invalid candidate, an observation_ref over 512 bytes) are answered
// with an error reply (headers Nats-Service-Error-Code and
// Nats-Service-Error, no body): the proposal ends at once
// INTEGRATION_FAILURE/GROUNDING_SOURCE_UNAVAILABLE instead of waiting for
// the request to time out.
type CandidateSource struct {
	srv *server
}

// ServeCandidateSource subscribes to the source's subject and serves it
// with h until Drain or Stop. nc is the source's own connection.
func ServeCandidateSource(nc *nats.Conn, cfg SourceConfig, h CandidateHandler) (*CandidateSource, error) {
	if h == nil {
		return nil, errors.New("client: ServeCandidateSource: no handler")
	}
	if !schema.ValidCandidateSource(cfg.Name) {
		return nil, fmt.Errorf("client: ServeCandidateSource: invalid source name %q", cfg.Name)
	}
	subj, err := subjects.New(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("client: ServeCandidateSource: %w", err)
	}
	srv, err := newServer(nc, cfg.MaxConcurrent, cfg.Logger)
	if err != nil {
		return nil, err
	}
	s := source{name: cfg.Name, h: h, log: srv.log}
	if err := srv.subscribe(subj.Candidates(cfg.Name), cfg.Queue, s.serve); err != nil {
		srv.halt()
		return nil, err
	}
	if err := srv.ready(); err != nil {
		srv.halt()
		return nil, err
	}
	return &CandidateSource{srv: srv}, nil
}

// Drain stops taking requests, answers those already received, and
// returns when that is done (or, if ctx ends first, stops as Stop does).
func (s *CandidateSource) Drain(ctx context.Context) error { return s.srv.drain(ctx) }

// Stop stops at once: requests not yet handed to the handler get no reply;
// running handlers' contexts are cancelled and Stop waits for them.
func (s *CandidateSource) Stop() { s.srv.halt() }

type source struct {
	name string
	h    CandidateHandler
	log  *slog.Logger
}

func (s source) serve(ctx context.Context, m *nats.Msg) {
	var req CandidateRequest
	if err := schema.Decode(m.Data, &req); err != nil {
		s.fail(m, "400", "malformed request")
		return
	}
	reply, err := call(func() (CandidateReply, error) { return s.h.Candidates(ctx, req) })
	if err != nil {
		s.fail(m, "500", "handler error")
		return
	}
	if reply.Candidates == nil {
		reply.Candidates = []schema.Candidate{}
	}
	if len(reply.ObservationRef) > schema.MaxRefLen {
		s.fail(m, "500", "invalid reply")
		return
	}
	for i := range reply.Candidates {
		if !reply.Candidates[i].Valid() {
			s.fail(m, "500", "invalid reply")
			return
		}
	}
	body, err := schema.Marshal(reply)
	if err != nil {
		s.fail(m, "500", "invalid reply")
		return
	}
	respond(s.log, m, body)
}

// fail sends an error reply, which grounding reads as "the source failed".
func (s source) fail(m *nats.Msg, code, what string) {
	s.log.Warn("client: candidate source answered with an error", "source", s.name, "error", what)
	if m.Reply == "" {
		return
	}
	r := nats.NewMsg(m.Reply)
	r.Header.Set("Nats-Service-Error-Code", code)
	r.Header.Set("Nats-Service-Error", "candidate source: "+what)
	if err := m.RespondMsg(r); err != nil {
		s.log.Warn("client: reply not sent", "subject", m.Subject, "error", err)
	}
}
