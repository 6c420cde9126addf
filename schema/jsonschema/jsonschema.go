// Package jsonschema holds the JSON Schemas (draft 2020-12) of every
// Portcullis wire message, embedded from the *.json files beside this file,
// and validates messages against them.
//
// The files are the contract for hosts, connectors, resolvers and candidate
// sources in other languages, beside PROTOCOL.md at the repository's root
// (which "SPEC §N" here cites, section N): load all of them (they refer to each other by
// relative $ref under Base) and validate against the message's file. Two
// files are not messages: defs.json (shared definitions) and
// disclosure_values.json (the per-class value contracts of SPEC §2.6).
//
// JSON Schema cannot say everything the processor checks: duplicate member
// names, nesting depth, body size, byte (rather than character) limits,
// cross-field equalities (a grant's expiry after its issue, a reply's
// echoed bindings, exactly the requested disclosure classes) and
// configuration-dependent limits (grounding.max_candidates) are the
// processor's alone; limits the processor counts in bytes are given as
// maxLength in characters (the same for ASCII). Within that, a message
// valid against its schema is one the processor does not refuse as
// malformed. The schemas of input messages describe the canonical form
// (names lowercase and trimmed, optional members omitted rather than null
// or ""), which the processor accepts with some leniency beyond it.
//
// Patterns use only syntax that Go's regexp (RE2) and ECMA-262 read alike,
// and "date" values are checked by pattern and by format "date": a
// validator in another language should assert formats (Ajv: ajv-formats)
// to refuse 2023-02-29.
//
// It imports nothing of Portcullis: the schemas are data, checked against
// the Go types by tests.
package jsonschema

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"sync"

	sjs "github.com/santhosh-tekuri/jsonschema/v6"
)

// FS holds the schema files.
//
//go:embed *.json
var FS embed.FS

// Base is the URI every schema's $id starts with: $id is Base + file name.
const Base = "https://github.com/portcullis/portcullis/schema/jsonschema/"

// Message kinds: each has the schema file <kind>.json.
const (
	Proposal          = "proposal"
	Grant             = "grant"
	Decline           = "decline"
	Outcome           = "outcome"
	IncidentEvent     = "incident_event"
	Receipt           = "receipt"
	Activity          = "activity"
	DispatchRequest   = "dispatch_request"
	ReconcileRequest  = "reconcile_request"
	AdapterReply      = "adapter_reply"
	DisclosureRequest = "disclosure_request"
	DisclosureReply   = "disclosure_reply"
	CandidateRequest  = "candidate_request"
	CandidateReply    = "candidate_reply"
)

// Messages lists every message kind.
func Messages() []string {
	return []string{
		Proposal, Grant, Decline, Outcome, IncidentEvent, Receipt, Activity,
		DispatchRequest, ReconcileRequest, AdapterReply,
		DisclosureRequest, DisclosureReply, CandidateRequest, CandidateReply,
	}
}

// Definitions are the schema files that are not messages.
func Definitions() []string { return []string{"defs", "disclosure_values"} }

// File is the file name of a kind's schema.
func File(kind string) string { return kind + ".json" }

// Validator validates messages against the compiled schemas.
type Validator struct {
	schemas map[string]*sjs.Schema
}

// New compiles every schema in FS. Formats are asserted ("date" must name
// a real calendar date).
func New() (*Validator, error) {
	c := sjs.NewCompiler()
	c.DefaultDraft(sjs.Draft2020)
	c.AssertFormat()
	names, err := fs.Glob(FS, "*.json")
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		data, err := FS.ReadFile(name)
		if err != nil {
			return nil, err
		}
		doc, err := sjs.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("jsonschema: %s: %w", name, err)
		}
		if err := c.AddResource(Base+name, doc); err != nil {
			return nil, fmt.Errorf("jsonschema: %s: %w", name, err)
		}
	}
	v := &Validator{schemas: map[string]*sjs.Schema{}}
	for _, kind := range append(Messages(), Definitions()...) {
		s, err := c.Compile(Base + File(kind))
		if err != nil {
			return nil, fmt.Errorf("jsonschema: compile %s: %w", kind, err)
		}
		v.schemas[kind] = s
	}
	return v, nil
}

// Validate checks one JSON document against the schema of kind. The error
// may quote values of data: do not log it where data may hold secrets.
func (v *Validator) Validate(kind string, data []byte) error {
	doc, err := sjs.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("jsonschema: %s: not JSON: %w", kind, err)
	}
	return v.ValidateValue(kind, doc)
}

// ValidateValue checks a decoded JSON value (as encoding/json decodes into
// any, numbers as json.Number or float64) against the schema of kind.
func (v *Validator) ValidateValue(kind string, doc any) error {
	s, ok := v.schemas[kind]
	if !ok {
		return fmt.Errorf("jsonschema: unknown message kind %q", kind)
	}
	if err := s.Validate(doc); err != nil {
		return fmt.Errorf("jsonschema: %s: %w", kind, err)
	}
	return nil
}

var defaultValidator = sync.OnceValues(New)

// Default is the validator of the embedded schemas, compiled once.
func Default() (*Validator, error) { return defaultValidator() }

// Validate checks data against the schema of kind with Default.
func Validate(kind string, data []byte) error {
	v, err := Default()
	if err != nil {
		return err
	}
	return v.Validate(kind, data)
}
