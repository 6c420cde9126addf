// Package trust authenticates proposals, grants and declines: each
// configured host signs the exact body with its ed25519 key (NATS nkey
// form), publishes on its own subjects, and may speak only for its tenants
// and their security domains (SPEC §2.7).
//
// It imports nothing of Portcullis: admission and the client check and make
// signatures with it.
package trust

import (
	"encoding/base64"
	"errors"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Headers that carry a host's signature.
const (
	HeaderHostKey   = "Actions-Host-Key"
	HeaderSignature = "Actions-Signature"
)

// Authentication failures. Their messages name the check that failed and
// nothing of the message, so they may be logged.
var (
	ErrUnauthenticated = errors.New("trust: not authenticated")
	ErrUnsigned        = errors.New("trust: no signature")
	ErrUnknownKey      = errors.New("trust: unknown key")
	ErrOtherHostsKey   = errors.New("trust: key of another host")
	ErrBadSignature    = errors.New("trust: bad signature")
	ErrUnknownHost     = errors.New("trust: subject names no configured host")
)

// Verifier authenticates messages for the configured hosts.
type Verifier struct {
	Hosts []Host
	// AllowUnsigned attributes unsigned messages to the subject's host
	// (admission.allow_unsigned; development only). Signed messages are
	// checked in full even then.
	AllowUnsigned bool
}

// Authenticate checks a message that arrived on host h's subject: its
// signature headers must carry h's key and a valid signature (base64url,
// padded or not) of the exact body. Without signature headers it succeeds
// only under AllowUnsigned, with signed false and a Host that has only
// h's name. Every failure wraps ErrUnauthenticated and one of the specific
// errors above.
func (v Verifier) Authenticate(h string, body []byte, hdr nats.Header) (host Host, signed bool, err error) {
	if h == "" {
		return Host{}, false, fail(ErrUnknownHost)
	}
	key, sig := hdr.Get(HeaderHostKey), hdr.Get(HeaderSignature)
	if key == "" && sig == "" {
		if v.AllowUnsigned {
			return Host{Name: h}, false, nil
		}
		return Host{}, false, fail(ErrUnsigned)
	}
	i := slices.IndexFunc(v.Hosts, func(c Host) bool { return c.PublicKey == key })
	switch {
	case i < 0:
		return Host{}, true, fail(ErrUnknownKey)
	case v.Hosts[i].Name != h:
		return Host{}, true, fail(ErrOtherHostsKey)
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(sig, "="))
	if err != nil {
		return Host{}, true, fail(ErrBadSignature)
	}
	pub, err := nkeys.FromPublicKey(key)
	if err != nil {
		return Host{}, true, fail(ErrUnknownKey)
	}
	if err := pub.Verify(body, raw); err != nil {
		return Host{}, true, fail(ErrBadSignature)
	}
	return v.Hosts[i], true, nil
}

func fail(why error) error { return errors.Join(ErrUnauthenticated, why) }

// Reason is a failure's value-free category for logs: "no signature",
// "unknown key", "key of another host" or "bad signature".
func Reason(err error) string {
	for _, e := range []error{ErrUnsigned, ErrUnknownKey, ErrOtherHostsKey, ErrBadSignature, ErrUnknownHost} {
		if errors.Is(err, e) {
			return strings.TrimPrefix(e.Error(), "trust: ")
		}
	}
	return "not authenticated"
}

// Permits reports whether a host may speak for a tenant in a security
// domain: the tenant is one of the host's, and the domain one of the
// tenant's (SPEC §2.7). Managed policies match on the domain only after
// this check, so naming another domain cannot escape one.
func Permits(tenants []Tenant, host Host, tenantRef, securityDomain string) bool {
	if !slices.Contains(host.Tenants, tenantRef) {
		return false
	}
	i := slices.IndexFunc(tenants, func(t Tenant) bool { return t.Ref == tenantRef })
	return i >= 0 && slices.Contains(tenants[i].SecurityDomains, securityDomain)
}

// Sign signs body as a host would: it returns the two headers to send with
// it. kp is the host's user nkey pair (seed).
func Sign(kp nkeys.KeyPair, body []byte) (nats.Header, error) {
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	sig, err := kp.Sign(body)
	if err != nil {
		return nil, err
	}
	h := nats.Header{}
	h.Set(HeaderHostKey, pub)
	h.Set(HeaderSignature, base64.RawURLEncoding.EncodeToString(sig))
	return h, nil
}

// Host is a publisher of proposals and grants, trusted for some tenants.
// Its name is the <h> token of its subjects.
type Host struct {
	Name string
	// PublicKey is the host's ed25519 public key in NATS nkey form (U…):
	// it signs bodies and logs in to NATS.
	PublicKey string
	// Tenants are the context.tenant.tenant_ref values the host may speak for.
	Tenants []string
}

// Tenant lists the security domains a tenant's proposals may name.
type Tenant struct {
	// Ref is the tenant_ref (the block's label).
	Ref             string
	SecurityDomains []string
}

// Speaks reports whether the host may speak for tenant.
func (h Host) Speaks(tenant string) bool { return slices.Contains(h.Tenants, tenant) }

// Policy is the trust the stages decide with (stages.Trust): the
// configured hosts and tenants, and whether unsigned messages are
// accepted. The engine builds it from the configuration.
type Policy struct {
	Hosts   []Host
	Tenants []Tenant
	// AllowUnsigned: see Verifier.
	AllowUnsigned bool
}

// Authenticate is Verifier.Authenticate: signed reports a message its
// host's key signed; an unsigned one is accepted only under AllowUnsigned.
func (p Policy) Authenticate(h string, body []byte, hdr nats.Header) (signed bool, err error) {
	_, signed, err = Verifier{Hosts: p.Hosts, AllowUnsigned: p.AllowUnsigned}.Authenticate(h, body, hdr)
	return signed, err
}

// Speaks reports whether the configured host named h may speak for
// tenant, a configured tenant.
func (p Policy) Speaks(h, tenant string) bool {
	host, ok := p.host(h)
	return ok && host.Speaks(tenant) && slices.ContainsFunc(p.Tenants, func(t Tenant) bool { return t.Ref == tenant })
}

// Permits is Permits for the configured host named h; a host that is not
// configured is permitted nothing.
func (p Policy) Permits(h, tenant, securityDomain string) bool {
	host, ok := p.host(h)
	return ok && Permits(p.Tenants, host, tenant, securityDomain)
}

func (p Policy) host(name string) (Host, bool) {
	i := slices.IndexFunc(p.Hosts, func(h Host) bool { return h.Name == name })
	if i < 0 {
		return Host{}, false
	}
	return p.Hosts[i], true
}
