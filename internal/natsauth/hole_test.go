package natsauth

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/subjects"
)

// TestKnownHoleReplySubjectInjection pins a door that per-user permissions
// in one account cannot close: the reply subject of a permitted publish or
// request is not checked against anything, and the server's own answer
// (a JetStream PubAck, a direct-get response) is published there, in the
// same account, where streams capture it and subscribers receive it.
//
// A host can so put messages it does not author onto another host's
// outcome subject (even a genuine outcome of its own proposal, by direct
// get), onto internal stage subjects, and into the activity bucket; an
// operator likewise. Closing it needs account isolation (each role in its
// own account, importing only its subjects), which changes the shape of
// SPEC §2.8. Until then this test asserts that the hole is there, so that
// nobody believes otherwise; when the design closes it, this test fails
// and must be turned into the regression test of the fix.
func TestKnownHoleReplySubjectInjection(t *testing.T) {
	e := newEnv(t, modeUsers)
	s := e.subj
	e.publishAs(t, s.Outcome("A", "p1"), `{"host":"A","kind":"CONFIRMED"}`)
	a := e.connect(t, e.roles.hostA)

	inject := func(subject, reply string) {
		t.Helper()
		if err := a.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Data: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// A genuine outcome of A's, answered onto B's outcome subject.
	inject(subjects.DirectGetLast(s.OutcomesStream(), s.Outcome("A", "p1")), s.Outcome("B", "p1"))
	// PubAcks of A's own proposals, onto an internal subject and the bucket.
	inject(s.Proposal("A"), s.Stage(subjects.StageDispatch, subjects.KindProposal, "B.p1"))
	inject(s.Proposal("A"), "$KV."+s.ActivityBucket()+".k")
	a.noErrors(t)

	deadline := time.Now().Add(2 * time.Second)
	for e.streamMsgs(t, s.OutcomesStream()) < 2 || e.streamMsgs(t, stageStream) == 0 || e.streamMsgs(t, "KV_"+s.ActivityBucket()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the injected answers were not stored: has the hole been closed? Invert this test.")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b := e.connect(t, e.roles.hostB)
	m, err := b.nc.Request(subjects.DirectGetLast(s.OutcomesStream(), s.Outcome("B", "p1")), nil, 2*time.Second)
	if err != nil || string(m.Data) != `{"host":"A","kind":"CONFIRMED"}` {
		t.Fatalf("B's last outcome for p1: %q %v; has the hole been closed? Invert this test.", msgData(m), err)
	}
	t.Logf("host A wrote its own outcome as B's outcome p1, a PubAck onto %s and one into bucket %s",
		s.Stage(subjects.StageDispatch, subjects.KindProposal, "B.p1"), s.ActivityBucket())
}
