package kv

import (
	"context"
	"errors"

	"github.com/portcullis/portcullis/schema"
)

// OutcomeLog records each proposal's last outcome on the processor, before
// it is published, so that a repeated delivery can republish it (its one
// backend is kv/pebble's Store). An outcome that neither restates nor
// supersedes the one recorded (schema.Standing.Follows: a stale decision,
// published late) leaves the record as it is, so that a repeat never
// replays an older truth. RecordOutcomes need not wait for the disk: the
// runner calls Flush before it acks the input, so that the record is
// durable before JetStream forgets the input (a crash before then
// redelivers it, and it is recorded again).
type OutcomeLog interface {
	RecordOutcomes(outcomes []schema.Outcome) error
	// LastOutcome returns the outcome recorded for ref.
	LastOutcome(ref schema.ProposalRef) (o schema.Outcome, found bool, err error)
	// Flush makes every write committed so far durable; concurrent
	// callers share one fsync. ErrFailed: the store failed.
	Flush() error
}

// OutcomeHistory is the outcome history (SPEC §2.8): each proposal's
// outcomes in order on a subject of its own, which hosts and operators
// read. Several publishers append to one proposal's subject — the stages
// of one processor, the processors of a cluster, a repeat's replay — so
// every append names the subject's last sequence it follows, and one
// whose subject moved on since is refused (ErrMovedOn): the publisher
// reads the subject's last outcome and decides again (stages/outcomes.go).
// Its one backend is JetStream (kv/jetstream.OutcomeHistory: the outcomes
// stream, every processor of a cluster sharing it).
//
// The runner also appends a handler's outcomes together with its other
// hand-offs, in one batch of asynchronous publishes on the subject the
// backend names (OutcomeRecord's), with the same two headers Append sets.
type OutcomeHistory interface {
	// Last returns the last message on ref's subject; found false when
	// the subject holds none. fromLeader: read by the stream's leader,
	// which checks the next append (what a refused append is decided
	// again on); otherwise any replica may answer, perhaps stale (a hint
	// that the next append checks).
	Last(ctx context.Context, ref schema.ProposalRef, fromLeader bool) (last OutcomeEntry, found bool, err error)
	// Append stores data (an encoded schema.Outcome) as ref's next
	// outcome if the subject's last message is still the one at expect
	// (0: the subject is empty); ErrMovedOn otherwise. msgID makes a
	// retry of the same append one append (duplicate true, nothing stored
	// again) once it expects what the subject now holds; one that still
	// names the sequence before its own stored append is refused
	// (ErrMovedOn) or a duplicate, as the backend checks first (a single
	// JetStream server checks the expectation first, a replicated
	// stream's leader the message id), and the caller that reads the
	// subject finds its own.
	Append(ctx context.Context, ref schema.ProposalRef, data []byte, msgID string, expect uint64) (seq uint64, duplicate bool, err error)
}

// OutcomeEntry is one message of the outcome history: its sequence and
// what it holds.
type OutcomeEntry struct {
	Seq  uint64
	Data []byte
}

// ErrMovedOn: an append named a last sequence its subject has moved past
// (another publisher appended since), or, replicated, another append to
// the subject is in flight. Nothing was stored. It is no outage (not
// ErrUnavailable): the caller reads the subject and decides again.
var ErrMovedOn = errors.New("kv: the subject moved on since the sequence expected")
