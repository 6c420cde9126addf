package grounding

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// SourceRequest is what the stage sends to `<prefix>.candidates.<name>`.
type SourceRequest struct {
	// Subject is grounding.subject as the proposal carried it.
	Subject jsontext.Value `json:"subject"`
	Scope   string         `json:"scope"`
}

// SourceReply is a candidate source's answer. Both members are required.
type SourceReply struct {
	Candidates     []schema.Candidate `json:"candidates"`
	ObservationRef string             `json:"observation_ref"`
}

// Sentinel errors of candidate sources.
var (
	// ErrSourceUnavailable: nobody answered (no responders, timeout) or the
	// source said it failed. GROUNDING_SOURCE_UNAVAILABLE.
	ErrSourceUnavailable = errors.New("grounding: candidate source unavailable")
	// ErrSourceMalformed: the answer is not a strict SourceReply with valid
	// candidates. Also GROUNDING_SOURCE_UNAVAILABLE.
	ErrSourceMalformed = errors.New("grounding: candidate source reply malformed")
)

// wireReply detects absent members, which the strict decoder alone allows.
type wireReply struct {
	Candidates     jsontext.Value `json:"candidates"`
	ObservationRef *string        `json:"observation_ref"`
}

// DecodeSourceReply strictly decodes a candidate source's answer: one JSON
// object with exactly the members "candidates" (an array, possibly empty)
// and "observation_ref" (a string of at most schema.MaxRefLen bytes), no
// duplicate names anywhere, and every candidate valid as an inline one
// (schema.Candidate.Valid). Its attributes are judged by Decide, like
// inline ones. The error wraps ErrSourceMalformed and names no input.
func DecodeSourceReply(data []byte) (*SourceReply, error) {
	var w wireReply
	if err := schema.Decode(data, &w); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSourceMalformed, err)
	}
	if w.Candidates.Kind() != '[' || w.ObservationRef == nil || len(*w.ObservationRef) > schema.MaxRefLen {
		return nil, fmt.Errorf("%w: missing or invalid member", ErrSourceMalformed)
	}
	r := &SourceReply{ObservationRef: *w.ObservationRef}
	if err := schema.Decode(w.Candidates, &r.Candidates); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSourceMalformed, err)
	}
	for i := range r.Candidates {
		c := &r.Candidates[i]
		if !c.Valid() {
			return nil, fmt.Errorf("%w: invalid candidate", ErrSourceMalformed)
		}
		if len(c.Attributes) == 0 {
			c.Attributes = jsontext.Value("null")
		}
	}
	return r, nil
}

// Source asks candidate sources over core NATS request-reply.
type Source struct {
	Conn     *nats.Conn
	Subjects subjects.Subjects
	// Timeout bounds one request (grounding.source_timeout).
	Timeout time.Duration
}

// Ask requests the candidates of a proposal's candidate source. It returns
// ErrSourceUnavailable or ErrSourceMalformed (wrapped) for anything the
// source is to blame for; any other error is ours (ctx cancelled, the
// connection closing) and worth a retry.
func (s *Source) Ask(ctx context.Context, p *schema.Proposal) (*SourceReply, error) {
	body, err := schema.Marshal(SourceRequest{Subject: p.Grounding.Subject, Scope: p.Grounding.Scope})
	if err != nil {
		return nil, fmt.Errorf("grounding: encode source request: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	msg, err := s.Conn.RequestWithContext(rctx, s.Subjects.Candidates(p.Grounding.CandidateSource), body)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, fmt.Errorf("grounding: source request: %w", ctx.Err())
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining):
		return nil, fmt.Errorf("grounding: source request: %w", err)
	default:
		// No responders, timeout, or a request NATS refused.
		return nil, fmt.Errorf("%w: %w", ErrSourceUnavailable, err)
	}
	// A status reply (the server's) or a micro service error is no answer.
	if msg.Header.Get("Status") != "" || msg.Header.Get("Nats-Service-Error-Code") != "" || msg.Header.Get("Nats-Service-Error") != "" {
		return nil, fmt.Errorf("%w: error reply", ErrSourceUnavailable)
	}
	return DecodeSourceReply(msg.Data)
}

// SourceFault reports whether err is the candidate source's fault
// (GROUNDING_SOURCE_UNAVAILABLE) rather than ours.
func SourceFault(err error) bool {
	return errors.Is(err, ErrSourceUnavailable) || errors.Is(err, ErrSourceMalformed)
}
