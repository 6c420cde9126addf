// Package schema is the wire contract in Go: the types of every message
// (proposals, grants, declines, outcomes, incidents, receipts, activity
// snapshots, the requests and replies of connectors, resolvers and
// candidate sources), the closed sets (outcome kinds, effect truths,
// phases, boundaries, incident codes: codes.go and codes_gen.go, generated
// from the code table in internal/gencodes), strict decoding, and
// value-free validation problems.
//
// The contract itself, for any language, is PROTOCOL.md at the
// repository's root; "SPEC §2.1" in this documentation is its section
// 2.1. The JSON Schemas of the same messages are in package jsonschema.
package schema
