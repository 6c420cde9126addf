package grounding

import (
	"errors"

	"github.com/portcullis/portcullis/schema"
)

// step.go is the pure part of the stage: Step decides, from the proposal,
// the checkpoint of an earlier delivery and a candidate source's answer,
// which read or call comes next, what to checkpoint and how the proposal is
// bound. stage.go only decodes, locks, reads, asks, writes and hands on.

// ErrCorruptCheckpoint: a checkpoint names a code that is not a grounding
// code; it is not trusted, and the input is not decided again (the source
// may answer differently).
var ErrCorruptCheckpoint = errors.New("grounding: checkpoint corrupt")

// Checkpoint is the decision of a proposal that asked a candidate source,
// kept (synced) before it is published: a source may answer differently
// when asked again, and a redelivered input must not be decided twice.
// Value-free: a code, or the referent and the observation reference.
type Checkpoint struct {
	// Code is the grounding incident's code; "" when grounded.
	Code           schema.Code
	Referent       string
	ObservationRef string
	AtMs           int64
}

// Facts are what one step decides from.
type Facts struct {
	Proposal      *schema.Proposal
	MaxCandidates int
	Now           int64
	// Read: the input's checkpoint was read (under its lock); Checkpoint
	// is nil when there is none.
	Read       bool
	Checkpoint *Checkpoint
	// Asked: the candidate source was asked; Reply is its answer, or
	// SourceFailed says it was to blame for none (SourceFault).
	Asked        bool
	Reply        *SourceReply
	SourceFailed bool
}

// Call is what a step asks the shell for before it can decide.
type Call int

// Calls.
const (
	NoCall Call = iota
	// ReadCheckpoint: lock the input's checkpoint and read it.
	ReadCheckpoint
	// AskSource: ask the proposal's candidate source.
	AskSource
)

// Decision is what the shell does for one step: make Call and step again;
// or write Checkpoint (Sync), then publish Binding — the hand-off with
// ObservationRef when it bound, its failure outcome otherwise. Err is a
// permanent failure of the input.
type Decision struct {
	Call           Call
	Checkpoint     *Checkpoint
	Binding        Binding
	ObservationRef string
	Err            error
}

// Step grounds one proposal: rules 1–2 first (a foreign scope never
// queries a source); inline candidates are decided at once; a candidate
// source is asked once per input — a checkpoint of an earlier delivery is
// the answer, and a new answer is checkpointed before it is published.
func Step(f Facts) Decision {
	p := f.Proposal
	if inc := Precheck(p); inc != nil {
		return Decision{Binding: Binding{Incident: inc}}
	}
	if p.Grounding.CandidateSource == "" {
		return Decision{Binding: Decide(p, p.Grounding.Candidates, f.MaxCandidates), ObservationRef: p.Grounding.ObservationRef}
	}
	switch {
	case !f.Read:
		return Decision{Call: ReadCheckpoint}
	case f.Checkpoint != nil:
		c := f.Checkpoint
		if c.Code == "" {
			return Decision{Binding: Binding{Referent: c.Referent}, ObservationRef: c.ObservationRef}
		}
		if _, ok := schema.LookupCode(schema.PhaseGrounding, c.Code); !ok {
			return Decision{Err: ErrCorruptCheckpoint}
		}
		return Decision{Binding: fail(c.Code)}
	case !f.Asked:
		return Decision{Call: AskSource}
	}
	d := Decision{Checkpoint: &Checkpoint{AtMs: f.Now}}
	if f.SourceFailed {
		d.Binding = fail(schema.CodeGroundingSourceUnavailable)
	} else {
		d.Binding = Decide(p, f.Reply.Candidates, f.MaxCandidates)
		d.ObservationRef = f.Reply.ObservationRef
	}
	if d.Binding.Grounded() {
		d.Checkpoint.Referent, d.Checkpoint.ObservationRef = d.Binding.Referent, d.ObservationRef
	} else {
		d.Checkpoint.Code = d.Binding.Incident.Code
		d.ObservationRef = ""
	}
	return d
}
