package dispatch

import (
	"strconv"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// Trigger is the body of a reconciliation timer: poll attempt number
// Attempt of a fingerprint.
type Trigger struct {
	Fingerprint string `json:"fingerprint"`
	Attempt     int    `json:"attempt"`
}

// ScheduleReconcile adds (or replaces) a fingerprint's reconciliation timer
// to the batch: attempt n fires at dueMs on the reconciliation stage.
func ScheduleReconcile(b *kv.Batch, s subjects.Subjects, fingerprint string, n int, dueMs int64) {
	hex := FingerprintHex(fingerprint)
	b.AddTimer(kv.Timer{
		ID:      "reconcile/" + hex,
		DueMs:   dueMs,
		Subject: s.Stage(subjects.StageReconciliation, subjects.KindTimer, hex),
		Data:    schema.MustMarshal(Trigger{Fingerprint: fingerprint, Attempt: n}),
		MsgID:   "reconcile/" + hex + "/" + strconv.Itoa(n),
	})
}
