package client

import "testing"

func TestMsgID(t *testing.T) {
	a := msgID("actions.proposals.frontdesk", []byte("{}"))
	if len(a) != 64 || a == msgID("actions.proposals.elsewhere", []byte("{}")) || a == msgID("actions.proposals.frontdesk", []byte("{} ")) {
		t.Errorf("msgID %q does not tell subjects and bodies apart", a)
	}
	if a != msgID("actions.proposals.frontdesk", []byte("{}")) {
		t.Error("msgID is not deterministic")
	}
}
