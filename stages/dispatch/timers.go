package dispatch

import (
	"strconv"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
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

// ReconcileTimerID is the ID of a fingerprint's one reconciliation timer:
// scheduling the next poll, or an announcement, replaces the pending one.
func ReconcileTimerID(fingerprint string) string { return "reconcile/" + FingerprintHex(fingerprint) }

// ScheduleReconcile adds (or replaces) a fingerprint's reconciliation timer
// to the batch: attempt n fires at dueMs on the reconciliation stage.
func ScheduleReconcile(b *kv.Batch, s subjects.Subjects, fingerprint string, n int, dueMs int64) {
	hex := FingerprintHex(fingerprint)
	b.AddTimer(kv.Timer{
		ID:      ReconcileTimerID(fingerprint),
		DueMs:   dueMs,
		Subject: s.Stage(subjects.StageReconciliation, subjects.KindTimer, hex),
		Data:    schema.MustMarshal(Trigger{Fingerprint: fingerprint, Attempt: n}),
		MsgID:   "reconcile/" + hex + "/" + strconv.Itoa(n),
	})
}

// ScheduleAnnounce replaces a fingerprint's reconciliation timer (a pending
// poll is cancelled) with an announcement of its latest receipt, due at
// dueMs. tag makes the message id unique per announced receipt.
func ScheduleAnnounce(b *kv.Batch, s subjects.Subjects, fingerprint, tag string, dueMs int64) {
	hex := FingerprintHex(fingerprint)
	b.AddTimer(kv.Timer{
		ID:      ReconcileTimerID(fingerprint),
		DueMs:   dueMs,
		Subject: s.Stage(subjects.StageReconciliation, subjects.KindTimer, hex),
		Data:    schema.MustMarshal(Trigger{Fingerprint: fingerprint, Announce: true}),
		MsgID:   "reconcile/" + hex + "/" + tag,
	})
}
