package config

import "fmt"

// RoleOf names the configured role a public key belongs to — `host "web"`,
// `operator "oncall"`, `connector "…"`, `resolver "…"`, `source "…"` —
// or "" when it is no role's key. A command given the wrong key says with
// it whose key it was given (SPEC §5: one clear line).
func (c *Config) RoleOf(publicKey string) string {
	if publicKey == "" {
		return ""
	}
	for _, h := range c.Hosts {
		if h.PublicKey == publicKey {
			return fmt.Sprintf("host %q", h.Name)
		}
	}
	for _, r := range c.Connectors {
		if r.PublicKey == publicKey {
			return fmt.Sprintf("connector %q", r.Name)
		}
	}
	for _, set := range []struct {
		kind  string
		roles []Role
	}{{"operator", c.Operators}, {"resolver", c.Resolvers}, {"source", c.Sources}} {
		for _, r := range set.roles {
			if r.PublicKey == publicKey {
				return fmt.Sprintf("%s %q", set.kind, r.Name)
			}
		}
	}
	return ""
}
