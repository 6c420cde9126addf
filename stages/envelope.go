package stages

import (
	"errors"
	"fmt"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// ErrEnvelope marks an internal envelope that is not one a stage may act
// on: it does not decode, is another schema's, lacks what the stage needs
// (a grounded record, an authorization), or names another proposal than its
// subject. A stage gives up on it at once (see EnvelopeError); it never
// panics on one and never retries it.
var ErrEnvelope = errors.New("stages: envelope rejected")

// Carries is how far along the pipeline an envelope must be for a stage to
// read it: each level includes the ones before it.
type Carries int

// Levels.
const (
	// Admitted: the proposal as admission handed it on, whole and valid
	// (grounding reads it, candidates and all).
	Admitted Carries = iota + 1
	// Grounded: with its grounded record and a well-formed fingerprint.
	Grounded
	// Authorized: with its authorization as well (dispatch reads it).
	Authorized
)

// DecodeEnvelope is the one decoder of the internal envelope (SPEC §2.6)
// every stage uses: strict (schema.DecodeEnvelope: the binary form every
// stage writes, schema.EncodeEnvelope, or the JSON an earlier version
// wrote; bounded, no unknown members), of the envelope schema, carrying
// what need says. Its errors wrap ErrEnvelope and, where the bytes were at
// fault, schema's value-free *ValidationError.
func DecodeEnvelope(data []byte, need Carries) (*schema.Envelope, error) {
	var env schema.Envelope
	if err := schema.DecodeEnvelope(data, &env); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEnvelope, err)
	}
	if env.Schema != schema.SchemaEnvelope {
		return nil, fmt.Errorf("%w: not of schema %s", ErrEnvelope, schema.SchemaEnvelope)
	}
	switch {
	case need == Admitted && !env.Proposal.Validate():
		return nil, fmt.Errorf("%w: the proposal is not valid", ErrEnvelope)
	case need >= Grounded && (env.Grounded == nil || !schema.ValidFingerprint(env.Grounded.Fingerprint)):
		return nil, fmt.Errorf("%w: not grounded", ErrEnvelope)
	case need >= Authorized && env.Authorization == nil:
		return nil, fmt.Errorf("%w: not authorized", ErrEnvelope)
	}
	return &env, nil
}

// ProposalRef reads the proposal a stage's message is about from its
// subject, `<prefix>.stage.<stage>.<kind>.<h>.<proposal_id>`, with its kind;
// false when the subject is not one of the stage's own (Self) or names no
// valid proposal.
func (r Route) ProposalRef(subject string) (schema.ProposalRef, string, bool) {
	stage, kind, tok, ok := r.Subjects.ParseStage(subject)
	h, id, okTok := subjects.ParseProposalToken(tok)
	if !ok || !okTok || (r.Self != "" && stage != r.Self) || !schema.ValidProposalID(id) {
		return schema.ProposalRef{}, "", false
	}
	return schema.ProposalRef{Host: h, ProposalID: id}, kind, true
}

// Envelope decodes the envelope of a proposal hand-off in (DecodeEnvelope)
// and checks that in's subject is a proposal subject of the stage naming
// the envelope's proposal: a message moved to another proposal's subject
// is not acted on.
func (r Route) Envelope(in *Input, need Carries) (*schema.Envelope, error) {
	ref, kind, ok := r.ProposalRef(in.Subject)
	if !ok || kind != subjects.KindProposal {
		return nil, fmt.Errorf("%w: unexpected subject", ErrEnvelope)
	}
	env, err := DecodeEnvelope(in.Data, need)
	if err != nil {
		return nil, err
	}
	if env.Ref() != ref {
		return nil, fmt.Errorf("%w: not for its subject", ErrEnvelope)
	}
	return env, nil
}
