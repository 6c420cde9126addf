package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/disclosure"
	"github.com/portcullis/portcullis/subjects"
)

// DisclosureHandler releases protected values for one dispatch (SPEC §2.6).
// It is called concurrently, only after the grant and managed policy
// passed, with the bindings of one exact intent: req.FieldClasses for
// req.Recipient and req.Purpose, from req.Source. It returns the values and
// how strongly the user was authenticated for this disclosure, or Refuse.
// When req.RequireReauthentication is set, the processor accepts only
// biometric or managed assurance.
type DisclosureHandler interface {
	Resolve(ctx context.Context, req schema.DisclosureRequest) (Disclosure, error)
}

// DisclosureFunc adapts a function to a DisclosureHandler.
type DisclosureFunc func(ctx context.Context, req schema.DisclosureRequest) (Disclosure, error)

// Resolve calls f.
func (f DisclosureFunc) Resolve(ctx context.Context, req schema.DisclosureRequest) (Disclosure, error) {
	return f(ctx, req)
}

// Disclosure is a resolver's answer: the Resolver echoes the request's
// bindings around it.
type Disclosure struct {
	// AuthenticationAssurance is the user's actual assurance for this
	// disclosure: none, session, biometric or managed.
	AuthenticationAssurance string
	// Values holds one JSON value per requested class, exactly the
	// requested classes, each within its contract (SPEC §2.6; e.g.
	// birth_date "1990-02-28", legal_identity {"given_name", "family_name",
	// …}). The Resolver owns them once returned: it zeroes their bytes
	// after the reply is sent. Return fresh copies, never slices of a
	// cache you keep.
	Values map[string]jsontext.Value
}

// Format implements fmt.Formatter for every verb: the classes, never the
// values.
func (d Disclosure) Format(f fmt.State, _ rune) { _, _ = fmt.Fprint(f, d.String()) }

// String lists the classes and the assurance, never the values.
func (d Disclosure) String() string {
	classes := make([]string, 0, len(d.Values))
	for c := range d.Values {
		classes = append(classes, c)
	}
	slices.Sort(classes)
	return "client.Disclosure{" + strings.Join(classes, ",") + " assurance=" + d.AuthenticationAssurance + ": values redacted}"
}

// LogValue implements slog.LogValuer: the classes, never the values.
func (d Disclosure) LogValue() slog.Value { return slog.StringValue(d.String()) }

// Refuse is the error a DisclosureHandler returns to refuse a disclosure
// (the user said no, no profile, …): the processor denies the proposal
// with PROTECTED_DISCLOSURE_REFUSED and dispatches nothing. reasonCode
// matches ^[A-Za-z0-9._:-]{1,128}$ (else "resolver.refused" is sent); it is
// not recorded in outcomes, which carry closed codes only.
func Refuse(reasonCode string) error { return &refusal{code: reasonCode} }

type refusal struct{ code string }

func (r *refusal) Error() string { return "client: disclosure refused: " + r.code }

// Reason codes a Resolver sends on a handler's behalf.
const (
	// ReasonResolverError: the handler returned an error other than Refuse,
	// or panicked.
	ReasonResolverError = "resolver.error"
	// ReasonMalformedRequest: the request did not decode strictly.
	ReasonMalformedRequest = "resolver.malformed_request"
	// ReasonRefused replaces a Refuse code outside the pattern.
	ReasonRefused = "resolver.refused"
)

// ResolverConfig configures a Resolver.
type ResolverConfig struct {
	// Prefix is the processor's subject prefix; empty means "actions".
	Prefix string
	// Queue is the NATS queue group; empty means DefaultQueue.
	Queue string
	// MaxConcurrent bounds handler calls running at once; zero means
	// DefaultMaxConcurrent.
	MaxConcurrent int
	// Logger receives value-free lines: a refusal made on the handler's
	// behalf, and an answer the processor will refuse, with the code it
	// will give (DISCLOSURE_FIELD_MISMATCH, DISCLOSURE_MALFORMED, …). Nil
	// discards.
	Logger *slog.Logger
}

// Resolver serves `<prefix>.disclosure.resolve` with a DisclosureHandler.
//
// It decodes each request strictly and replies with the bindings echoed
// exactly as the processor checks them (fingerprint, provider, operation,
// environment, recipient, purpose, field_classes, source,
// require_reauthentication, authorization_method,
// grant_authentication_assurance), plus the handler's assurance and
// values. Before sending it checks the answer as the processor will and
// logs the code the processor will give to one it will refuse (it still
// sends it, so the outcome names the real cause). A Refuse error becomes
// {"refused": true, "reason_code"}; any other error, a panic or an
// undecodable request becomes a refusal with a Reason… code, so the
// proposal is denied at once instead of waiting for the request to time
// out. After replying it zeroes the request bytes, the reply bytes and the
// values.
type Resolver struct {
	srv *server
}

// ServeResolver subscribes to the disclosure subject and serves it with h
// until Drain or Stop. nc is the resolver's own connection.
func ServeResolver(nc *nats.Conn, cfg ResolverConfig, h DisclosureHandler) (*Resolver, error) {
	if h == nil {
		return nil, errors.New("client: ServeResolver: no handler")
	}
	subj, err := subjects.New(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("client: ServeResolver: %w", err)
	}
	srv, err := newServer(nc, cfg.MaxConcurrent, cfg.Logger)
	if err != nil {
		return nil, err
	}
	r := resolver{h: h, log: srv.log}
	if err := srv.subscribe(subj.DisclosureResolve(), cfg.Queue, r.serve); err != nil {
		srv.halt()
		return nil, err
	}
	if err := srv.ready(); err != nil {
		srv.halt()
		return nil, err
	}
	return &Resolver{srv: srv}, nil
}

// Drain stops taking requests, answers those already received, and
// returns when that is done (or, if ctx ends first, stops as Stop does).
func (r *Resolver) Drain(ctx context.Context) error { return r.srv.drain(ctx) }

// Stop stops at once: requests not yet handed to the handler get no reply
// (the processor denies them PROTECTED_DISCLOSURE_UNAVAILABLE when its
// request times out); running handlers' contexts are cancelled and Stop
// waits for them.
func (r *Resolver) Stop() { r.srv.halt() }

type resolver struct {
	h   DisclosureHandler
	log *slog.Logger
}

func (r resolver) serve(ctx context.Context, m *nats.Msg) {
	var req schema.DisclosureRequest
	if err := schema.Decode(m.Data, &req); err != nil || req.Schema != schema.SchemaDisclosure {
		r.refuse(m, ReasonMalformedRequest, true)
		return
	}
	answer, err := call(func() (Disclosure, error) { return r.h.Resolve(ctx, req) })
	defer wipeValues(answer.Values)
	if err != nil {
		var ref *refusal
		switch {
		case errors.As(err, &ref) && schema.ValidErrorCode(ref.code):
			r.refuse(m, ref.code, false)
		case errors.As(err, &ref):
			r.refuse(m, ReasonRefused, true)
		default:
			r.refuse(m, ReasonResolverError, true)
		}
		return
	}
	reauth := req.RequireReauthentication
	reply := schema.DisclosureReply{
		Schema:                       schema.SchemaDisclosure,
		Fingerprint:                  req.Fingerprint,
		Provider:                     req.Provider,
		Operation:                    req.Operation,
		Environment:                  req.Environment,
		Recipient:                    req.Recipient,
		Purpose:                      req.Purpose,
		FieldClasses:                 req.FieldClasses,
		Source:                       req.Source,
		RequireReauthentication:      &reauth,
		AuthorizationMethod:          req.AuthorizationMethod,
		GrantAuthenticationAssurance: req.GrantAuthenticationAssurance,
		AuthenticationAssurance:      answer.AuthenticationAssurance,
		ProtectedValues:              answer.Values,
	}
	body, err := schema.Marshal(reply)
	if err != nil {
		// A value that is not valid JSON: say nothing of it.
		r.refuse(m, ReasonResolverError, true)
		return
	}
	defer clear(body)
	// The processor's own check, to tell the integrator what it will say.
	if d, err := disclosure.Evaluate(&req, body); err != nil {
		code, _ := disclosure.Code(err)
		r.log.Warn("client: the processor will refuse this disclosure", "code", code, "classes", strings.Join(req.FieldClasses, ","))
	} else {
		d.Wipe()
	}
	respond(r.log, m, body)
	clear(m.Data)
}

// refuse answers a refusal; logged says it was made on the handler's
// behalf (or replaced its code).
func (r resolver) refuse(m *nats.Msg, code string, logged bool) {
	if logged {
		r.log.Warn("client: resolver refused on the handler's behalf", "reason_code", code)
	}
	respond(r.log, m, schema.MustMarshal(schema.DisclosureReply{Schema: schema.SchemaDisclosure, Refused: true, ReasonCode: code}))
	clear(m.Data)
}

func wipeValues(values map[string]jsontext.Value) {
	for class, v := range values {
		clear(v)
		delete(values, class)
	}
}
