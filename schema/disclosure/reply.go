package disclosure

import (
	"bytes"
	"io"
	"slices"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/portcullis/portcullis/schema"
)

// MaxReplyBytes bounds a resolver reply. The largest valid reply (every
// class at its limits, every character escaped as a surrogate pair) stays
// under it.
const MaxReplyBytes = 512 << 10

// wireReply is the resolver reply as decoded: pointers and nil slices/maps
// tell an absent member from an empty one (null is refused outright), so
// that "present but empty" can be told apart from "absent".
// schema.DisclosureReply is the same shape for encoding (resolvers, tests).
type wireReply struct {
	Schema                       *string                   `json:"schema"`
	Fingerprint                  *string                   `json:"fingerprint"`
	Provider                     *string                   `json:"provider"`
	Operation                    *string                   `json:"operation"`
	Environment                  *string                   `json:"environment"`
	Recipient                    *string                   `json:"recipient"`
	Purpose                      *string                   `json:"purpose"`
	FieldClasses                 []string                  `json:"field_classes"`
	Source                       *string                   `json:"source"`
	RequireReauthentication      *bool                     `json:"require_reauthentication"`
	AuthorizationMethod          *string                   `json:"authorization_method"`
	GrantAuthenticationAssurance *string                   `json:"grant_authentication_assurance"`
	AuthenticationAssurance      *string                   `json:"authentication_assurance"`
	ProtectedValues              map[string]jsontext.Value `json:"protected_values"`
	Refused                      *bool                     `json:"refused"`
	ReasonCode                   *string                   `json:"reason_code"`
}

// Evaluate checks a resolver reply against its request, in this order; the
// first failure decides the code:
//
//  1. Decode → DISCLOSURE_MALFORMED: more than MaxReplyBytes; not exactly one
//     JSON object; invalid UTF-8; duplicate member names at any depth; an
//     unknown member; a wrong type; null anywhere (absent is the only way
//     to omit an optional member); an empty string member; `schema` other
//     than "actions.disclosure.v1".
//  2. Refusal → PROTECTED_DISCLOSURE_REFUSED: `"refused": true` with a
//     `reason_code` matching ^[A-Za-z0-9._:-]{1,128}$ and neither
//     `protected_values` nor `authentication_assurance` (else MALFORMED).
//     Echoed bindings may accompany a refusal and are not compared: the
//     refusal stands either way. A non-refusal must not carry reason_code.
//  3. Shape of an answer → DISCLOSURE_MALFORMED: the bindings fingerprint,
//     provider, operation, environment, recipient, purpose, field_classes
//     (no duplicates) and source, plus authentication_assurance (one of
//     none, session, biometric, managed) and protected_values (an object)
//     are required.
//  4. Bindings → DISCLOSURE_BINDING_MISMATCH: each required binding equals
//     the request's (field_classes as a set); require_reauthentication,
//     authorization_method and grant_authentication_assurance, optional,
//     equal the request's when present.
//  5. Reauthentication → DISCLOSURE_REAUTHENTICATION_REQUIRED: the request
//     requires it and the reply's assurance is neither biometric nor managed.
//  6. Classes → DISCLOSURE_FIELD_MISMATCH: the protected_values keys are
//     exactly the requested classes (a missing or an extra class, known or
//     not).
//  7. Contracts → DISCLOSURE_MALFORMED: each value satisfies its class
//     contract (see ValidValue).
//
// req must be a valid request (Resolve and NewRequest ensure it).
func Evaluate(req *schema.DisclosureRequest, data []byte) (Disclosure, error) {
	r, ok := decodeReply(data)
	if !ok {
		return Disclosure{}, fail(schema.CodeDisclosureMalformed)
	}
	if r.Refused != nil && *r.Refused {
		if r.ReasonCode == nil || !schema.ValidErrorCode(*r.ReasonCode) || r.ProtectedValues != nil || r.AuthenticationAssurance != nil {
			return Disclosure{}, fail(schema.CodeDisclosureMalformed)
		}
		return Disclosure{}, fail(schema.CodeDisclosureRefused)
	}
	if !answerShape(r) {
		return Disclosure{}, fail(schema.CodeDisclosureMalformed)
	}
	if !bindingsMatch(req, r) {
		return Disclosure{}, fail(schema.CodeDisclosureBindingMismatch)
	}
	assurance := *r.AuthenticationAssurance
	if req.RequireReauthentication && schema.AssuranceRank(assurance) < schema.AssuranceRank(schema.AssuranceBiometric) {
		return Disclosure{}, fail(schema.CodeDisclosureReauthRequired)
	}
	if len(r.ProtectedValues) != len(req.FieldClasses) {
		return Disclosure{}, fail(schema.CodeDisclosureFieldMismatch)
	}
	for _, c := range req.FieldClasses {
		if _, ok := r.ProtectedValues[c]; !ok {
			return Disclosure{}, fail(schema.CodeDisclosureFieldMismatch)
		}
	}
	for _, c := range req.FieldClasses {
		if !ValidValue(c, r.ProtectedValues[c]) {
			return Disclosure{}, fail(schema.CodeDisclosureMalformed)
		}
	}
	classes := slices.Clone(req.FieldClasses)
	slices.Sort(classes)
	return Disclosure{
		Values: Values(r.ProtectedValues),
		Record: schema.DisclosureRecord{
			Recipient:               req.Recipient,
			Purpose:                 req.Purpose,
			FieldClasses:            classes,
			Source:                  req.Source,
			AuthenticationAssurance: assurance,
		},
	}, nil
}

// decodeReply strictly decodes a reply and applies the rules of step 1.
func decodeReply(data []byte) (*wireReply, bool) {
	if len(data) > MaxReplyBytes || hasNull(data) {
		return nil, false
	}
	var r wireReply
	if err := schema.Decode(data, &r); err != nil {
		return nil, false
	}
	for _, s := range []*string{
		r.Schema, r.Fingerprint, r.Provider, r.Operation, r.Environment, r.Recipient, r.Purpose,
		r.Source, r.AuthorizationMethod, r.GrantAuthenticationAssurance, r.AuthenticationAssurance, r.ReasonCode,
	} {
		if s != nil && *s == "" {
			return nil, false
		}
	}
	if r.Schema != nil && *r.Schema != schema.SchemaDisclosure {
		return nil, false
	}
	if (r.Refused == nil || !*r.Refused) && r.ReasonCode != nil {
		return nil, false
	}
	return &r, true
}

// hasNull reports whether a JSON text holds a null anywhere (or is not
// valid JSON, which decoding refuses anyway).
func hasNull(data []byte) bool {
	dec := jsontext.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.ReadToken()
		if err == io.EOF {
			return false
		}
		if err != nil {
			return true
		}
		if tok.Kind() == 'n' {
			return true
		}
	}
}

// answerShape checks that a non-refusal carries every required member.
func answerShape(r *wireReply) bool {
	for _, s := range []*string{r.Fingerprint, r.Provider, r.Operation, r.Environment, r.Recipient, r.Purpose, r.Source, r.AuthenticationAssurance} {
		if s == nil {
			return false
		}
	}
	if r.FieldClasses == nil || r.ProtectedValues == nil {
		return false
	}
	sorted := slices.Clone(r.FieldClasses)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != len(r.FieldClasses) {
		return false
	}
	return schema.AssuranceRank(*r.AuthenticationAssurance) >= 0
}

func bindingsMatch(req *schema.DisclosureRequest, r *wireReply) bool {
	if *r.Fingerprint != req.Fingerprint || *r.Provider != req.Provider || *r.Operation != req.Operation ||
		*r.Environment != req.Environment || *r.Recipient != req.Recipient || *r.Purpose != req.Purpose ||
		*r.Source != req.Source {
		return false
	}
	got := slices.Clone(r.FieldClasses)
	slices.Sort(got)
	want := slices.Clone(req.FieldClasses)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return false
	}
	if r.RequireReauthentication != nil && *r.RequireReauthentication != req.RequireReauthentication {
		return false
	}
	if r.AuthorizationMethod != nil && *r.AuthorizationMethod != req.AuthorizationMethod {
		return false
	}
	return r.GrantAuthenticationAssurance == nil || *r.GrantAuthenticationAssurance == req.GrantAuthenticationAssurance
}
