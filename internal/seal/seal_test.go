package seal

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestSealBindsSubjectAndBody(t *testing.T) {
	s, err := New(bytes.Repeat([]byte{7}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := New(bytes.Repeat([]byte{8}, KeySize))
	hdr := nats.Header{}
	s.Seal("actions.stage.dispatch.proposal.h.p1", []byte(`{"a":1}`), hdr)
	if !s.Check("actions.stage.dispatch.proposal.h.p1", []byte(`{"a":1}`), hdr) {
		t.Fatal("own seal refused")
	}
	cases := []struct {
		name    string
		sealer  *Sealer
		subject string
		body    string
		hdr     nats.Header
	}{
		{"other subject", s, "actions.stage.dispatch.proposal.h.p2", `{"a":1}`, hdr},
		{"other body", s, "actions.stage.dispatch.proposal.h.p1", `{"a":2}`, hdr},
		{"subject/body split moved", s, "actions.stage.dispatch.proposal.h.p", "1\x00{\"a\":1}", hdr},
		{"other key", other, "actions.stage.dispatch.proposal.h.p1", `{"a":1}`, hdr},
		{"no seal", s, "actions.stage.dispatch.proposal.h.p1", `{"a":1}`, nats.Header{}},
		{"garbage", s, "actions.stage.dispatch.proposal.h.p1", `{"a":1}`, nats.Header{Header: []string{"!!"}}},
	}
	for _, tc := range cases {
		if tc.sealer.Check(tc.subject, []byte(tc.body), tc.hdr) {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	if _, err := New([]byte("short")); err == nil {
		t.Error("short key accepted")
	}
}

// Message ids are the same for every processor that shares the key, and
// nobody without it can compute them: a squatter that publishes first under
// a predictable id (stage/stream/sequence) cannot make the real hand-off a
// dropped duplicate.
func TestMsgIDIsKeyed(t *testing.T) {
	a, _ := New(bytes.Repeat([]byte{1}, KeySize))
	a2, _ := New(bytes.Repeat([]byte{1}, KeySize))
	b, _ := New(bytes.Repeat([]byte{2}, KeySize))
	id := "grounding/ACTIONS_GROUNDING/17/n0"
	if a.MsgID(id) != a2.MsgID(id) {
		t.Error("two processors with one key derive different ids")
	}
	if a.MsgID(id) == b.MsgID(id) || a.MsgID(id) == id || strings.Contains(a.MsgID(id), "17") {
		t.Errorf("id %q is not keyed", a.MsgID(id))
	}
	if a.MsgID(id) == a.MsgID(id+"x") {
		t.Error("two inputs share an id")
	}
	if len(a.MsgID(id)) != 24 {
		t.Errorf("id %q: want 24 characters", a.MsgID(id))
	}
}
