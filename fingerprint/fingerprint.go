// Package fingerprint computes the intent fingerprint v2 of SPEC §2.3
// (section 2.3 of PROTOCOL.md, the wire contract at the repository's root): the
// lowercase hex SHA-256 of the RFC 8785 (JCS) canonical JSON of
//
//	{"schema": "actions.fingerprint.v2", "tenant_ref", "security_domain_ref",
//	 "actor_ref", "provider", "capability", "operation", "environment",
//	 "referent", "payload", "protected_disclosure", "external_spend"}
//
// prefixed "sha256:". The 64 hex digits alone are the idempotency key sent
// to providers. v2 adds tenant_ref (context.tenant.tenant_ref): the same
// intent of two tenants has two fingerprints, even where their security
// domain, actor and referent strings coincide.
//
// Hosts in other languages can reproduce it: testdata/ holds JCS vectors and
// full fingerprints generated with an independent JCS implementation
// (the npm package `canonicalize`), which the tests check.
//
// JCS reads every JSON number as an IEEE-754 double. Two different numbers
// that round to one double (9007199254740993 and 9007199254740992, or 1 and
// 1.0000000000000001) would share a fingerprint, so that a grant for one
// authorized the other. CheckNumbers refuses such numbers; admission applies
// it to every payload (ADMISSION_MALFORMED), so each admitted payload has
// exactly one canonical form, and every language that parses JSON numbers
// as doubles agrees on it.
//
// It owns the fingerprint and the canonical JSON it is computed over, and
// imports only schema: the client and the grounding stage compute the same
// bytes from the same code.
package fingerprint

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/portcullis/portcullis/schema"
)

// Prefix starts every fingerprint.
const Prefix = schema.FingerprintPrefix

// ErrNotCanonical is returned (wrapped) for a value that has no canonical
// form: invalid JSON, or a number CheckNumbers refuses.
var ErrNotCanonical = errors.New("fingerprint: value has no canonical form")

// Fields are the fingerprinted values of one intent, already normalized as
// admission normalizes them (names trimmed and lowercased).
type Fields struct {
	TenantRef         string
	SecurityDomainRef string
	ActorRef          string
	Provider          string
	Capability        string
	Operation         string
	Environment       string
	// Referent is the grounded candidate's referent.
	Referent string
	// Payload is raw JSON; empty means null.
	Payload             jsontext.Value
	ProtectedDisclosure *schema.DisclosurePlan
	ExternalSpend       *schema.Spend
}

// Result is a computed fingerprint.
type Result struct {
	// Canonical is the JCS text that was hashed.
	Canonical []byte
	// Fingerprint is "sha256:" + 64 lowercase hex digits.
	Fingerprint string
	// IdempotencyKey is the 64 hex digits.
	IdempotencyKey string
}

// object is the SPEC §2.3 object. Member order is irrelevant to the result
// (JCS sorts), but its fields are declared in JCS order so that the sort
// in Canonicalize finds them in place.
type object struct {
	ActorRef            string         `json:"actor_ref"`
	Capability          string         `json:"capability"`
	Environment         string         `json:"environment"`
	ExternalSpend       *schema.Spend  `json:"external_spend"`
	Operation           string         `json:"operation"`
	Payload             jsontext.Value `json:"payload"`
	ProtectedDisclosure *plan          `json:"protected_disclosure"`
	Provider            string         `json:"provider"`
	Referent            string         `json:"referent"`
	Schema              string         `json:"schema"`
	SecurityDomainRef   string         `json:"security_domain_ref"`
	TenantRef           string         `json:"tenant_ref"`
}

// plan is a disclosure plan with all five members always present, so that
// an omitted require_reauthentication and an explicit false hash alike
// (fields in JCS order, as object's).
type plan struct {
	FieldClasses            []string `json:"field_classes"`
	Purpose                 string   `json:"purpose"`
	Recipient               string   `json:"recipient"`
	RequireReauthentication bool     `json:"require_reauthentication"`
	Source                  string   `json:"source"`
}

// Canonical returns the JCS text of the SPEC §2.3 object for f. The only
// numbers in it are the payload's and the spend's amount: it checks those
// (CheckNumbers) and canonicalizes the encoded object without walking all
// of it again for numbers and validity, as Canonicalize does for a value
// it did not build.
func Canonical(f Fields) ([]byte, error) {
	payload := f.Payload
	if len(payload) == 0 {
		payload = jsontext.Value("null")
	}
	if err := CheckNumbers(payload); err != nil {
		return nil, err
	}
	o := object{
		Schema:            schema.SchemaFingerprint,
		TenantRef:         f.TenantRef,
		SecurityDomainRef: f.SecurityDomainRef,
		ActorRef:          f.ActorRef,
		Provider:          f.Provider,
		Capability:        f.Capability,
		Operation:         f.Operation,
		Environment:       f.Environment,
		Referent:          f.Referent,
		Payload:           payload,
		ExternalSpend:     f.ExternalSpend,
	}
	if d := f.ProtectedDisclosure; d != nil {
		classes := slices.Clone(d.FieldClasses)
		if classes == nil {
			classes = []string{}
		}
		slices.Sort(classes)
		o.ProtectedDisclosure = &plan{FieldClasses: classes, Purpose: d.Purpose, Recipient: d.Recipient,
			RequireReauthentication: d.RequireReauthentication, Source: d.Source}
	}
	raw, err := json.Marshal(o)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrNotCanonical, "encode")
	}
	if s := f.ExternalSpend; s != nil && !schema.ExactNumbers(strconv.AppendInt(nil, s.AmountMinor, 10)) {
		return nil, ErrInexactNumber
	}
	v := jsontext.Value(raw)
	if err := v.Canonicalize(); err != nil {
		return nil, fmt.Errorf("%w: canonicalize", ErrNotCanonical)
	}
	return v, nil
}

// Canonicalize returns the RFC 8785 canonical form of one JSON value. It
// refuses invalid JSON, duplicate member names and numbers CheckNumbers
// refuses.
func Canonicalize(raw []byte) ([]byte, error) {
	v := jsontext.Value(slices.Clone(raw))
	if !v.IsValid() {
		return nil, fmt.Errorf("%w: invalid JSON", ErrNotCanonical)
	}
	if err := CheckNumbers(v); err != nil {
		return nil, err
	}
	if err := v.Canonicalize(); err != nil {
		// The error can quote input; keep only that it failed.
		return nil, fmt.Errorf("%w: canonicalize", ErrNotCanonical)
	}
	return v, nil
}

// Sum hashes canonical JSON into a Result.
func Sum(canonical []byte) Result {
	h := sha256.Sum256(canonical)
	key := hex.EncodeToString(h[:])
	return Result{Canonical: canonical, Fingerprint: Prefix + key, IdempotencyKey: key}
}

// Compute canonicalizes and hashes f.
func Compute(f Fields) (Result, error) {
	c, err := Canonical(f)
	if err != nil {
		return Result{}, err
	}
	return Sum(c), nil
}

// FieldsOf returns the fingerprinted fields of a proposal grounded to
// referent. The intent's names are normalized again (idempotent), so that a
// proposal that did not pass through admission is hashed alike.
func FieldsOf(p *schema.Proposal, referent string) Fields {
	in := p.Intent
	if d := in.ProtectedDisclosure; d != nil {
		c := *d // Normalize writes through the pointer: not the caller's plan
		in.ProtectedDisclosure = &c
	}
	in.Normalize()
	return Fields{
		TenantRef:           p.Context.Tenant.TenantRef,
		SecurityDomainRef:   p.Context.Tenant.SecurityDomainRef,
		ActorRef:            p.Context.Actor.ActorRef,
		Provider:            in.Provider,
		Capability:          in.Capability,
		Operation:           in.Operation,
		Environment:         in.Environment,
		Referent:            referent,
		Payload:             in.Payload,
		ProtectedDisclosure: in.ProtectedDisclosure,
		ExternalSpend:       in.ExternalSpend,
	}
}

// Of computes the fingerprint of a proposal grounded to referent.
func Of(p *schema.Proposal, referent string) (Result, error) {
	return Compute(FieldsOf(p, referent))
}

// Key returns the idempotency key (64 hex digits) of a fingerprint
// (schema.FingerprintKey).
func Key(fingerprint string) string { return schema.FingerprintKey(fingerprint) }

// Valid reports whether s is "sha256:" followed by 64 lowercase hex digits
// (schema.ValidFingerprint).
func Valid(s string) bool { return schema.ValidFingerprint(s) }
