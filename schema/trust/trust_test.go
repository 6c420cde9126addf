package trust

import (
	"errors"
	"testing"

	"github.com/nats-io/nkeys"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Policy answers the stages' questions (stages.Trust) from the configured
// hosts and tenants: by the host's name, which authentication established.
func TestPolicy(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	key, _ := kp.PublicKey()
	p := Policy{
		Hosts: []Host{
			{Name: "frontdesk", PublicKey: key, Tenants: []string{"tenant:demo", "tenant:unconfigured"}},
			{Name: "elsewhere", Tenants: []string{"tenant:other"}},
		},
		Tenants: []Tenant{
			{Ref: "tenant:demo", SecurityDomains: []string{"security-domain:demo"}},
			{Ref: "tenant:other", SecurityDomains: []string{"security-domain:other"}},
		},
	}
	for _, tc := range []struct {
		host, tenant, domain string
		speaks, permits      bool
	}{
		{"frontdesk", "tenant:demo", "security-domain:demo", true, true},
		{"frontdesk", "tenant:demo", "security-domain:other", true, false},
		{"frontdesk", "tenant:other", "security-domain:other", false, false},
		{"frontdesk", "tenant:unconfigured", "security-domain:demo", false, false},
		{"elsewhere", "tenant:other", "security-domain:other", true, true},
		{"nobody", "tenant:demo", "security-domain:demo", false, false},
	} {
		if got := p.Speaks(tc.host, tc.tenant); got != tc.speaks {
			t.Errorf("Speaks(%s, %s) = %v", tc.host, tc.tenant, got)
		}
		if got := p.Permits(tc.host, tc.tenant, tc.domain); got != tc.permits {
			t.Errorf("Permits(%s, %s, %s) = %v", tc.host, tc.tenant, tc.domain, got)
		}
	}
	body := []byte(`{"proposal_id":"p"}`)
	hdr, err := Sign(kp, body)
	if err != nil {
		t.Fatal(err)
	}
	if signed, err := p.Authenticate("frontdesk", body, hdr); err != nil || !signed {
		t.Fatalf("signed: %v %v", signed, err)
	}
	if _, err := p.Authenticate("elsewhere", body, hdr); !errors.Is(err, ErrOtherHostsKey) {
		t.Fatalf("another host's key: %v", err)
	}
	if _, err := p.Authenticate("frontdesk", body, nil); !errors.Is(err, ErrUnsigned) {
		t.Fatalf("unsigned: %v", err)
	}
	p.AllowUnsigned = true
	if signed, err := p.Authenticate("frontdesk", body, nil); err != nil || signed {
		t.Fatalf("unsigned, allowed: %v %v", signed, err)
	}
}
