package kv

import (
	"strconv"

	"github.com/portcullis/portcullis/schema"
)

// Trigger is the body of a reconciliation timer: poll attempt number
// Attempt of a fingerprint; or, with Announce, publish the fingerprint's
// latest outcome to every proposal of the intent (after an operator
// settled it, so that the outcomes go out through the runner and survive a
// crash between the decision and its publication).
type Trigger struct {
	Fingerprint string `json:"fingerprint"`
	Attempt     int    `json:"attempt"`
	Announce    bool   `json:"announce,omitempty"`
}

// IntentTimerID is the ID of a fingerprint's one reconciliation timer:
// scheduling the next poll, or an announcement, replaces the pending one.
func IntentTimerID(fingerprint string) string { return "reconcile/" + Hex(fingerprint) }

// PollTimer fires attempt n of a fingerprint's reconciliation at dueMs on
// subject (the reconciliation stage's timer subject for the fingerprint).
func PollTimer(subject, fingerprint string, n int, dueMs int64) Timer {
	return Timer{
		ID:      IntentTimerID(fingerprint),
		DueMs:   dueMs,
		Subject: subject,
		Data:    schema.MustMarshal(Trigger{Fingerprint: fingerprint, Attempt: n}),
		MsgID:   "reconcile/" + Hex(fingerprint) + "/" + strconv.Itoa(n),
	}
}

// AnnounceTimer announces a fingerprint's latest receipt at dueMs on
// subject, replacing a pending poll; tag makes the message id unique per
// announced receipt.
func AnnounceTimer(subject, fingerprint, tag string, dueMs int64) Timer {
	return Timer{
		ID:      IntentTimerID(fingerprint),
		DueMs:   dueMs,
		Subject: subject,
		Data:    schema.MustMarshal(Trigger{Fingerprint: fingerprint, Announce: true}),
		MsgID:   "reconcile/" + Hex(fingerprint) + "/" + tag,
	}
}

// Attempt is the checkpoint of one reconciliation attempt: written (Sync)
// before the provider is queried, completed after. A replayed attempt whose
// checkpoint exists is never queried again.
type Attempt struct {
	AttemptID    string `json:"attempt_id"`
	Number       int    `json:"number"`
	StartedAtMs  int64  `json:"started_at_ms"`
	Status       string `json:"status,omitempty"` // empty until the attempt finished (a metrics attempt status)
	FinishedAtMs int64  `json:"finished_at_ms,omitempty"`
}

// AttemptID is the stable id of poll n (1-based) of a fingerprint: the same
// fingerprint and number always give the same id, a later poll a new one.
func AttemptID(fingerprint string, n int) string {
	return "rcn_" + short(fingerprint) + "_" + strconv.Itoa(n)
}

// OperatorAttemptID names the operator's settlement in its receipt's
// reconciliation.attempt_id. There is at most one per fingerprint: a
// settled fingerprint cannot be resolved again.
func OperatorAttemptID(fingerprint string) string { return "opr_" + short(fingerprint) }

func short(fingerprint string) string {
	h := Hex(fingerprint)
	return h[:min(16, len(h))]
}
