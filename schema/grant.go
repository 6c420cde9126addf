package schema

import (
	"slices"
)

// Grant is the host's authorization of one exact intent (SPEC §2.2).
type Grant struct {
	Schema                  string `json:"schema"`
	ProposalID              string `json:"proposal_id,omitempty"`
	IntentFingerprint       string `json:"intent_fingerprint"`
	AuthorizedBy            string `json:"authorized_by"`
	AuthorizationMethod     string `json:"authorization_method"`
	AuthenticationAssurance string `json:"authentication_assurance"`
	IssuedAtMs              int64  `json:"issued_at_ms"`
	ExpiresAtMs             int64  `json:"expires_at_ms"`
	MaxExternalSpend        *Spend `json:"max_external_spend"`
}

// Decline is a host's word that its user declined a parked proposal
// (SPEC §2.2), published on `<prefix>.grants.<h>`.
type Decline struct {
	Schema            string `json:"schema"`
	ProposalID        string `json:"proposal_id"`
	IntentFingerprint string `json:"intent_fingerprint"`
	DeclinedBy        string `json:"declined_by"`
}

// Valid checks a decline's formats.
func (d *Decline) Valid() bool {
	return d.Schema == SchemaDecline && ValidProposalID(d.ProposalID) && ValidFingerprint(d.IntentFingerprint) &&
		singleLine(d.DeclinedBy, MaxRefLen)
}

// Authorization methods (SPEC §2.2).
const (
	MethodManual          = "manual"
	MethodPolicy          = "policy"
	MethodAdversarialAuto = "adversarial_auto"
	MethodManagedPolicy   = "managed_policy"
	MethodTestFixture     = "test_fixture"
)

// AuthorizationMethods is the closed set of grant methods.
func AuthorizationMethods() []string {
	return []string{MethodManual, MethodPolicy, MethodAdversarialAuto, MethodManagedPolicy, MethodTestFixture}
}

// AutomaticMethods are the methods a managed policy's
// automatic_approval_forbidden refuses.
func AutomaticMethods() []string {
	return []string{MethodPolicy, MethodAdversarialAuto, MethodManagedPolicy}
}

// Valid checks a grant's formats and enumerations (GRANT_MALFORMED when false).
func (g *Grant) Valid() bool {
	if g.Schema != SchemaGrant || !ValidFingerprint(g.IntentFingerprint) {
		return false
	}
	if g.ProposalID != "" && !ValidProposalID(g.ProposalID) {
		return false
	}
	if !singleLine(g.AuthorizedBy, MaxRefLen) {
		return false
	}
	if !slices.Contains(AuthorizationMethods(), g.AuthorizationMethod) || AssuranceRank(g.AuthenticationAssurance) < 0 {
		return false
	}
	if g.IssuedAtMs < 0 || g.ExpiresAtMs <= g.IssuedAtMs {
		return false
	}
	return ValidSpend(g.MaxExternalSpend)
}
