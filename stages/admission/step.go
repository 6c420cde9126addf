package admission

import (
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// step.go is the pure part of dedupe (SPEC §2.1, §3 Admission): Step
// decides, from the records of a message's ids read under their locks and
// the answer of its claim, what to write and how to answer. stage.go only
// authenticates and screens (Decide), locks, reads, steps, writes and steps
// again.

// Facts are what one dedupe step decides from.
type Facts struct {
	// Ref and DeliveryID are the ids the message carries; Digest its
	// content digest; Seq its stream sequence.
	Ref        schema.ProposalRef
	DeliveryID string
	Digest     string
	Seq        uint64
	Now        int64
	// TakesIDs: the proposal is well formed, complete and permitted for
	// its tenant (Screening.Dedupe), so it takes its ids. One that does not
	// is only checked against the proposal id's record.
	TakesIDs bool
	// Refused: the screening refused the proposal after it took its ids
	// (an unknown provider, say): it is answered with its refusal, which
	// is recorded.
	Refused bool
	// GivingUp: the runner gave up on the message; it takes its ids for
	// its PROCESSING_FAILED outcome unless they are taken.
	GivingUp bool
	// Delivery and Admitted are the records of the delivery id and the
	// proposal id; nil when absent (Delivery is not read for a message
	// that takes no ids).
	Delivery *kv.Delivery
	Admitted *kv.Admitted
	// Claimed: the claim Decision.Admit asked for was made; Claim is what
	// it found taken.
	Claimed bool
	Claim   kv.AdmissionClaim
}

// Answer is how a message is answered.
type Answer int

// Answers.
const (
	// AnswerNothing: nothing to publish (handed off already).
	AnswerNothing Answer = iota
	// AnswerReplay: republish the recorded outcome of Decision.Replay, if
	// any (a repeat; a proposal still in flight has none yet).
	AnswerReplay
	// AnswerReused: the proposal id belongs to another message's
	// proposal: only the ADMISSION_PROPOSAL_ID_REUSED event.
	AnswerReused
	// AnswerRefuse: the message's own refusal as its outcome, recorded.
	AnswerRefuse
	// AnswerRefuseUnrecorded: the refusal of a message that took no ids,
	// not recorded (junk leaves nothing in the store).
	AnswerRefuseUnrecorded
	// AnswerHandOff: hand the proposal on to grounding; once the hand-off
	// is acknowledged, write Decision.Forward.
	AnswerHandOff
	// AnswerFailed: a given-up message that took its ids: its
	// PROCESSING_FAILED outcome, recorded so that a repeat hears it.
	AnswerFailed
	// AnswerHandle: a given-up message found its ids taken by itself: it
	// was admitted meanwhile, so it is decided as Handle does.
	AnswerHandle
)

// Admission is a claim of a message's ids.
type Admission struct {
	Admitted kv.Admitted
	Delivery kv.Delivery
}

// Decision is what the shell does for one step, in this order: claim
// Admit's ids (synced) and step again with the claim; or write Repeat,
// then answer.
type Decision struct {
	Admit  *Admission
	Repeat *kv.Delivery
	Answer Answer
	// Replay is the proposal whose outcome AnswerReplay republishes.
	Replay schema.ProposalRef
	// Forward is the proposal id's record once its hand-off was
	// acknowledged (AnswerHandOff).
	Forward *kv.Admitted
	// Note is a value-free line for the debug log.
	Note string
}

// Step decides one message's dedupe:
//   - a delivery id another message took first: a repeated delivery,
//     answered with that message's proposal's outcome;
//   - no record of the proposal id: claim both ids;
//   - the proposal id taken by another message with the same content: a
//     repeat under a new delivery id, recorded and answered with the
//     outcome; with other content: a reused id;
//   - taken by this very message: answered as it was (handed off, given
//     up on), or decided now;
//   - giving up, the message takes its ids for its PROCESSING_FAILED
//     outcome; if it took them before, it is decided as Handle does.
func Step(f Facts) Decision {
	if !f.TakesIDs {
		if f.Admitted != nil {
			return Decision{Answer: AnswerReused}
		}
		return Decision{Answer: AnswerRefuseUnrecorded}
	}
	if f.Delivery != nil && f.Delivery.Seq != f.Seq {
		return repeatedDelivery(f, *f.Delivery)
	}
	a := f.Admitted
	if a == nil && !f.Claimed {
		return Decision{Admit: &Admission{
			Admitted: kv.Admitted{Digest: f.Digest, Seq: f.Seq, AtMs: f.Now, Failed: f.GivingUp},
			Delivery: kv.Delivery{ProposalID: f.Ref.ProposalID, Seq: f.Seq, AtMs: f.Now},
		}}
	}
	if a == nil {
		switch c := f.Claim; {
		case c.Delivery != nil:
			// Another processor took the delivery id first.
			return repeatedDelivery(f, *c.Delivery)
		case c.Admitted != nil:
			// Another processor took the proposal id first (or this
			// message did, before).
			a = c.Admitted
		default:
			// Claimed: this message holds its ids now.
			return claimed(f)
		}
	}
	switch {
	case a.Seq != f.Seq && a.Digest == f.Digest && !f.GivingUp:
		// The same proposal under a new delivery id: a repeat.
		return Decision{Repeat: &kv.Delivery{ProposalID: f.Ref.ProposalID, Seq: f.Seq, AtMs: f.Now},
			Answer: AnswerReplay, Replay: f.Ref, Note: "admission: repeated proposal; the recorded outcome is republished"}
	case a.Seq != f.Seq:
		// Another body under a taken id (or, giving up, any other
		// message's): its outcome subject belongs to the first proposal.
		return Decision{Answer: AnswerReused}
	case a.Failed:
		return Decision{Answer: AnswerReplay, Replay: f.Ref} // admission gave up on this very message
	case f.GivingUp:
		return Decision{Answer: AnswerHandle} // this message took the id meanwhile, elsewhere
	case a.Forwarded:
		return Decision{Answer: AnswerNothing} // this very message was handed off already
	}
	return decided(f, *a)
}

// claimed answers a message that has just taken its ids.
func claimed(f Facts) Decision {
	if f.GivingUp {
		return Decision{Answer: AnswerFailed}
	}
	return decided(f, kv.Admitted{Digest: f.Digest, Seq: f.Seq, AtMs: f.Now})
}

// decided answers a message that holds its ids with its own decision.
func decided(f Facts, a kv.Admitted) Decision {
	if f.Refused {
		return Decision{Answer: AnswerRefuse}
	}
	a.Forwarded = true
	return Decision{Answer: AnswerHandOff, Forward: &a}
}

func repeatedDelivery(f Facts, d kv.Delivery) Decision {
	return Decision{Answer: AnswerReplay, Replay: schema.ProposalRef{Host: f.Ref.Host, ProposalID: d.ProposalID},
		Note: "admission: repeated delivery; the recorded outcome is republished"}
}
