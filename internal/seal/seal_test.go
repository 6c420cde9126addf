package seal

import (
	"bytes"
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
