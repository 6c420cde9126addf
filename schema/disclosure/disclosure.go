// Package disclosure is the client of the host's protected-profile resolver
// (SPEC §2.6): after the grant and the managed policy passed, the dispatch
// stage asks the resolver on `<prefix>.disclosure.resolve` for the protected
// values a disclosure plan names, checks the reply against the request and
// the closed per-class value contracts, and gets back the values (in memory,
// for the provider adapter only) and a value-free record for the receipt.
//
// Every failure is an *Error carrying one closed disclosure code; its text is
// the code alone. Nothing here logs, and no error, record or formatted value
// ever carries a protected value.
//
// It owns the resolver request, its checks and the value contracts. It
// imports only schema: the values it returns live in memory for one
// provider call and are never written down.
package disclosure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/schema"
)

// Error is a disclosure failure with its closed code (one of the
// schema.CodeDisclosure… / CodeDisclosureUnavailable codes). Its text is the
// code: it never carries a value.
type Error struct {
	Code schema.Code
}

func (e *Error) Error() string { return string(e.Code) }

func fail(code schema.Code) error { return &Error{Code: code} }

// Code returns the disclosure code of err, if it is (or wraps) an *Error.
func Code(err error) (schema.Code, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Code, true
	}
	return "", false
}

// ErrInvalidRequest is returned, without contacting the resolver, for a
// request that is not a valid binding of a valid plan: a bug upstream, not a
// disclosure failure.
var ErrInvalidRequest = errors.New("disclosure: invalid request")

// Values holds protected values by field class, exactly as the resolver sent
// them (each validated against its class contract). It exists only in memory
// between Resolve and the adapter call; formatting or logging it prints the
// classes, never the values.
type Values map[string]jsontext.Value

// Format implements fmt.Formatter for every verb: classes only.
func (v Values) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(v.String())) }

// String lists the classes, never the values.
func (v Values) String() string {
	classes := make([]string, 0, len(v))
	for c := range v {
		classes = append(classes, c)
	}
	slices.Sort(classes)
	return "disclosure.Values{" + strings.Join(classes, ",") + ": redacted}"
}

// LogValue implements slog.LogValuer: classes only.
func (v Values) LogValue() slog.Value { return slog.StringValue(v.String()) }

// Wipe overwrites the values' bytes and empties the map, so that the values
// do not linger in memory longer than the adapter call.
func (v Values) Wipe() {
	for c, raw := range v {
		clear(raw)
		delete(v, c)
	}
}

// Disclosure is a successful resolution.
type Disclosure struct {
	// Values go to the adapter (ForDispatch) and are then dropped (Wipe).
	Values Values
	// Record is what the receipt and the activity record keep: recipient,
	// purpose, sorted classes, source and the actual assurance.
	Record schema.DisclosureRecord
}

// Format implements fmt.Formatter: the record, never the values.
func (d Disclosure) Format(f fmt.State, _ rune) {
	_, _ = fmt.Fprintf(f, "disclosure.Disclosure{classes=%s source=%s assurance=%s values=redacted}",
		strings.Join(d.Record.FieldClasses, ","), d.Record.Source, d.Record.AuthenticationAssurance)
}

// LogValue implements slog.LogValuer: the classes and assurance only.
func (d Disclosure) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("field_classes", strings.Join(d.Record.FieldClasses, ",")),
		slog.String("authentication_assurance", d.Record.AuthenticationAssurance),
	)
}

// ForDispatch returns the protected_disclosure member of a dispatch request.
// It shares the values' memory: Wipe after the adapter call clears both.
func (d *Disclosure) ForDispatch() *schema.DispatchDisclosure {
	return &schema.DispatchDisclosure{
		Recipient:    d.Record.Recipient,
		Purpose:      d.Record.Purpose,
		FieldClasses: slices.Clone(d.Record.FieldClasses),
		Values:       d.Values,
	}
}

// Wipe drops the values (see Values.Wipe); the record stays.
func (d *Disclosure) Wipe() { d.Values.Wipe() }

// NewRequest builds the resolver request binding a plan to the exact intent
// and grant: the fingerprint, the intent's provider, operation and
// environment, the plan (classes sorted), and the grant's method and
// assurance. It refuses an intent without a valid plan.
func NewRequest(fingerprint string, in *schema.Intent, g *schema.Grant) (schema.DisclosureRequest, error) {
	if in == nil || in.ProtectedDisclosure == nil || g == nil {
		return schema.DisclosureRequest{}, fmt.Errorf("%w: no plan or grant", ErrInvalidRequest)
	}
	plan := *in.ProtectedDisclosure
	plan.Normalize()
	req := schema.DisclosureRequest{
		Schema:                       schema.SchemaDisclosure,
		Fingerprint:                  fingerprint,
		Provider:                     in.Provider,
		Operation:                    in.Operation,
		Environment:                  in.Environment,
		Recipient:                    plan.Recipient,
		Purpose:                      plan.Purpose,
		FieldClasses:                 plan.FieldClasses,
		Source:                       plan.Source,
		RequireReauthentication:      plan.RequireReauthentication,
		AuthorizationMethod:          g.AuthorizationMethod,
		GrantAuthenticationAssurance: g.AuthenticationAssurance,
	}
	if err := validRequest(&req); err != nil {
		return schema.DisclosureRequest{}, err
	}
	return req, nil
}

// RequestForEnvelope builds the request for an authorized, grounded envelope
// whose intent carries a disclosure plan.
func RequestForEnvelope(env *schema.Envelope) (schema.DisclosureRequest, error) {
	if env == nil || env.Grounded == nil || env.Authorization == nil {
		return schema.DisclosureRequest{}, fmt.Errorf("%w: envelope not grounded and authorized", ErrInvalidRequest)
	}
	return NewRequest(env.Grounded.Fingerprint, &env.Proposal.Intent, &env.Authorization.Grant)
}

// validRequest checks what Evaluate relies on: a valid normalized plan and
// well-formed bindings.
func validRequest(req *schema.DisclosureRequest) error {
	plan := schema.DisclosurePlan{
		FieldClasses: req.FieldClasses, Recipient: req.Recipient, Purpose: req.Purpose,
		Source: req.Source, RequireReauthentication: req.RequireReauthentication,
	}
	normalized := plan
	normalized.Normalize()
	switch {
	case req.Schema != schema.SchemaDisclosure:
		return fmt.Errorf("%w: schema", ErrInvalidRequest)
	case !schema.ValidFingerprint(req.Fingerprint):
		return fmt.Errorf("%w: fingerprint", ErrInvalidRequest)
	case !schema.ValidName(req.Provider) || !schema.ValidName(req.Operation):
		return fmt.Errorf("%w: provider or operation", ErrInvalidRequest)
	case req.Environment != schema.EnvMock && req.Environment != schema.EnvTest && req.Environment != schema.EnvLive:
		return fmt.Errorf("%w: environment", ErrInvalidRequest)
	case !plan.Valid() || normalized.Recipient != req.Recipient || normalized.Purpose != req.Purpose ||
		!slices.Equal(normalized.FieldClasses, req.FieldClasses):
		return fmt.Errorf("%w: plan", ErrInvalidRequest)
	case !slices.Contains(schema.AuthorizationMethods(), req.AuthorizationMethod) || schema.AssuranceRank(req.GrantAuthenticationAssurance) < 0:
		return fmt.Errorf("%w: grant method or assurance", ErrInvalidRequest)
	}
	return nil
}

// DefaultTimeout bounds a resolver request when Resolve is given none.
const DefaultTimeout = 10 * time.Second

// Resolve asks the resolver on subject for the values req names and checks
// the reply (see Evaluate). No responders, a broken connection or no reply
// within timeout (≤ 0: DefaultTimeout) is PROTECTED_DISCLOSURE_UNAVAILABLE. If ctx itself ends first (shutdown, or
// the caller's own deadline) the error wraps ctx's error and is not an
// *Error: the caller should retry later rather than record a denial.
func Resolve(ctx context.Context, nc *nats.Conn, subject string, req schema.DisclosureRequest, timeout time.Duration) (Disclosure, error) {
	if err := validRequest(&req); err != nil {
		return Disclosure{}, err
	}
	if err := ctx.Err(); err != nil {
		return Disclosure{}, fmt.Errorf("disclosure: %w", err)
	}
	body, err := schema.Marshal(req)
	if err != nil {
		return Disclosure{}, fmt.Errorf("%w: does not encode", ErrInvalidRequest)
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	msg, err := nc.RequestWithContext(rctx, subject, body)
	if err != nil {
		if ctx.Err() != nil {
			return Disclosure{}, fmt.Errorf("disclosure: %w", ctx.Err())
		}
		// No responders, our timeout, a closed or broken connection: the
		// resolver did not answer. Nothing was disclosed or dispatched.
		return Disclosure{}, fail(schema.CodeDisclosureUnavailable)
	}
	return Evaluate(&req, msg.Data)
}
