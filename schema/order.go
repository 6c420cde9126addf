package schema

import "strings"

// order.go: the order of a proposal's outcomes (SPEC §2.4 Order). Once a
// terminal outcome is on a proposal's subject nothing non-terminal follows
// it, and the last message on the subject is the latest truth recorded
// for the proposal. "Latest" is decided from the outcomes themselves, so
// that any publisher — and any reader of a subject's history — can tell:
//
//   - outcomes that carry a receipt are ordered by the receipt's
//     recorded_at_ms, which grows strictly along an intent's receipts
//     (whichever processor recorded them);
//   - an outcome without a receipt that waits (NEEDS_APPROVAL) comes
//     before anything a receipt or a decision says of the proposal;
//   - a terminal outcome is followed only by one that restates it or by a
//     terminal outcome with a newer receipt (an operator's settlement of
//     an exhausted reconciliation); a terminal outcome without a receipt
//     (a refusal, a give-up) is followed by nothing else;
//   - the refusal of a message that never took the proposal id (its
//     namesake: malformed, context incomplete, tenant not permitted) is
//     not the proposal's, and anything of the proposal's follows it.

// Standing is what orders an outcome among its proposal's outcomes,
// without the outcome's body: small enough to remember for every subject
// a publisher has seen.
type Standing struct {
	Kind     Kind
	Terminal bool
	// Unadmitted: the refusal of a message that never took the proposal
	// id (Outcome.Unadmitted).
	Unadmitted bool
	// ReceiptID and RecordedAtMs are the receipt's ("" and 0: none).
	ReceiptID    string
	RecordedAtMs int64
	// AtMs and Codes (the incidents' phase/code) tell two outcomes
	// without a receipt apart.
	AtMs  int64
	Codes string
}

// Standing is where o stands among its proposal's outcomes.
func (o *Outcome) Standing() Standing {
	s := Standing{Kind: o.Kind, Terminal: o.Terminal, Unadmitted: o.Unadmitted(), AtMs: o.AtMs}
	if o.Receipt != nil {
		s.ReceiptID, s.RecordedAtMs = o.Receipt.ReceiptID, o.Receipt.RecordedAtMs
		return s
	}
	var b strings.Builder
	for i, inc := range o.Incidents {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(string(inc.Phase))
		b.WriteByte('/')
		b.WriteString(string(inc.Code))
	}
	s.Codes = b.String()
	return s
}

// Unadmitted reports whether o refuses a message that never took its
// proposal id: one that did not decode, whose context was incomplete or
// whose tenant was not permitted (SPEC §3 Admission: such a message takes
// no ids). It is published on the id's subject all the same (the id was
// readable), but it is no outcome of the proposal that takes the id.
func (o *Outcome) Unadmitted() bool {
	for _, inc := range o.Incidents {
		if inc.Phase != PhaseAdmission {
			continue
		}
		switch inc.Code {
		case CodeAdmissionMalformed, CodeAdmissionContextIncomplete, CodeAdmissionTenantNotPermitted:
			return true
		}
	}
	return false
}

// Restates reports whether s says what last says: the same truth,
// published again (a repeat's replay, a redelivered input, a second
// publisher of the same receipt). A receipt names it; without one, the
// kind, terminality and incidents do, and for an outcome that waits its
// at_ms too.
func (s Standing) Restates(last Standing) bool {
	if s.Kind != last.Kind || s.Terminal != last.Terminal || s.Unadmitted != last.Unadmitted || s.ReceiptID != last.ReceiptID {
		return false
	}
	return s.ReceiptID != "" || s.Codes == last.Codes && (s.Terminal || s.AtMs == last.AtMs)
}

// Supersedes reports whether s is newer truth of the proposal than last,
// so that it may follow last on the proposal's subject (see order.go).
// It is transitive among the proposal's own outcomes: a publisher that
// knows some outcome on the subject that s does not supersede knows that
// s is stale, whatever followed that outcome since.
func (s Standing) Supersedes(last Standing) bool {
	switch {
	case last.Unadmitted:
		return !s.Restates(last)
	case s.Unadmitted:
		return false
	case last.Terminal:
		return s.Terminal && s.ReceiptID != "" && last.ReceiptID != "" && s.RecordedAtMs > last.RecordedAtMs
	case last.ReceiptID != "":
		if s.ReceiptID != "" {
			return s.RecordedAtMs > last.RecordedAtMs
		}
		return s.Terminal
	case s.ReceiptID != "" || s.Terminal:
		return true
	default:
		return s.AtMs > last.AtMs
	}
}

// Follows reports whether s may be published after last on their
// proposal's subject: it restates or supersedes it.
func (s Standing) Follows(last Standing) bool { return s.Restates(last) || s.Supersedes(last) }
