package testenv

import (
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/fixtures"
)

// Lumber returns the proposal of SPEC §2.1 (the lumber stock adjustment of
// seed 000), for the fake provider "demo", as a fresh map that a test may
// change freely. Its delivery id is derived from the proposal id.
func Lumber(proposalID string) map[string]any { return fixtures.Lumber(proposalID) }

// Set sets a value at a dotted path in a fixture map ("intent.payload"),
// creating objects on the way; it returns m.
func Set(m map[string]any, path string, v any) map[string]any { return fixtures.Set(m, path, v) }

// Delete removes the value at a dotted path; it returns m.
func Delete(m map[string]any, path string) map[string]any { return fixtures.Delete(m, path) }

// FingerprintOf returns the fingerprint a fixture has once grounded to
// referent (computed as the grounding stage does).
func FingerprintOf(t testing.TB, proposal any, referent string) string {
	t.Helper()
	fp, err := fixtures.FingerprintOf(Body(t, proposal), referent)
	if err != nil {
		t.Fatalf("fixture does not ground to %s: %v", referent, err)
	}
	return fp
}

// Grant returns a grant for a fingerprint: manual, biometric, valid from
// now for five minutes, with a spend ceiling when spend is not nil.
func Grant(fp string, now time.Time, spend map[string]any) map[string]any {
	return fixtures.Grant(fp, now, spend)
}

// Granted puts an inline grant into a proposal fixture, bound to the
// fingerprint it grounds to (referent), valid from now. It returns p.
func Granted(t testing.TB, p map[string]any, referent string, now time.Time) map[string]any {
	t.Helper()
	var spend map[string]any
	if s, ok := p["intent"].(map[string]any)["external_spend"].(map[string]any); ok {
		spend = s
	}
	p["grant"] = Grant(FingerprintOf(t, p, referent), now, spend)
	return p
}

// AsOtherTenant moves a fixture to OtherTenant and its security domain
// (context and grounding scope), as OtherHost may send it. It returns p.
func AsOtherTenant(p map[string]any) map[string]any {
	Set(p, "context.tenant.tenant_ref", OtherTenant)
	Set(p, "context.tenant.security_domain_ref", OtherSecurityDomain)
	return Set(p, "grounding.scope", OtherSecurityDomain)
}
