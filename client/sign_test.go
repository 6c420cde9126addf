package client_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/client"
	"github.com/portcullis/portcullis/schema/trust"
)

// client.Sign is what admission verifies: the processor's own verifier
// accepts it for the right host and body, and nothing else.
func TestSignMatchesVerifier(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	other, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	otherPub, _ := other.PublicKey()
	v := trust.Verifier{Hosts: []trust.Host{{Name: "frontdesk", PublicKey: pub}, {Name: "elsewhere", PublicKey: otherPub}}}
	body := []byte("{\"proposal_id\":\"p-1\"}\n")

	hdr, err := client.Sign(kp, body)
	if err != nil {
		t.Fatal(err)
	}
	if hdr.Get(client.HeaderHostKey) != pub || hdr.Get(client.HeaderHostKey) != hdr.Get(trust.HeaderHostKey) ||
		client.HeaderSignature != trust.HeaderSignature {
		t.Fatalf("headers %v", hdr)
	}
	host, signed, err := v.Authenticate("frontdesk", body, hdr)
	if err != nil || !signed || host.Name != "frontdesk" {
		t.Fatalf("Authenticate = %+v, %v, %v", host, signed, err)
	}
	want, err := trust.Sign(kp, body)
	if err != nil {
		t.Fatal(err)
	}
	if hdr.Get(client.HeaderSignature) != want.Get(trust.HeaderSignature) {
		t.Errorf("signature %q, trust.Sign %q", hdr.Get(client.HeaderSignature), want.Get(trust.HeaderSignature))
	}

	// Exact bytes: the body without its trailing newline is another body.
	if _, _, err := v.Authenticate("frontdesk", body[:len(body)-1], hdr); !errors.Is(err, trust.ErrBadSignature) {
		t.Errorf("changed body: %v", err)
	}
	if _, _, err := v.Authenticate("elsewhere", body, hdr); !errors.Is(err, trust.ErrOtherHostsKey) {
		t.Errorf("another host's subject: %v", err)
	}
	if _, err := client.Sign(nil, body); err == nil {
		t.Error("Sign without a key succeeded")
	}
}
